"""Powertools glue: EMF metrics in namespace Sluice, JSON log lines carrying the job's keys."""

from __future__ import annotations

import io
import json

import pytest

from sluice.core.models import Job
from sluice.worker.runtime import telemetry as t
from sluice.worker.runtime.context import JobContext
from sluice.worker.runtime.options import WorkerOptions
from sluice.worker.runtime.telemetry import PowertoolsMetrics, Telemetry
from sluice_dev.fakes import FakeQueue, FakeStore, kit


def emf_lines(out: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.splitlines() if '"_aws"' in line]


def test_powertools_metrics_flush_one_emf_blob(capsys: pytest.CaptureFixture[str]) -> None:
    m = PowertoolsMetrics(service="unit")
    m.flush()  # nothing recorded: no output, no warning
    assert emf_lines(capsys.readouterr().out) == []
    m.count(t.JOBS_SUCCEEDED)
    m.count(t.JOBS_SUCCEEDED)
    m.observe_ms(t.JOB_DURATION, 12.5)
    m.flush()
    (blob,) = emf_lines(capsys.readouterr().out)
    directive = blob["_aws"]["CloudWatchMetrics"][0]  # type: ignore[index]
    assert directive["Namespace"] == "Sluice"
    units = {d["Name"]: d["Unit"] for d in directive["Metrics"]}
    assert units == {"JobsSucceeded": "Count", "JobDuration": "Milliseconds"}
    assert blob["JobsSucceeded"] == [1.0, 1.0] and blob["JobDuration"] == [12.5]


def test_a_drain_with_default_telemetry_logs_json_with_the_job_keys(
        capsys: pytest.CaptureFixture[str]) -> None:
    from aws_lambda_powertools import Logger

    stream = io.StringIO()
    k = kit()

    @k.app.handler("q")
    def h(job: Job, ctx: JobContext) -> int:
        ctx.logger.info("inside the handler")
        return 1

    k.queue.add("q", "j1")
    tel = Telemetry(PowertoolsMetrics(service="unit"), Logger(service="unit-worker", stream=stream))
    k.app.bind(queue=k.queue, store=k.store, options=WorkerOptions(lease_ms=1000), telemetry=tel,
               worker_id="w1").drain(["q"], 1)
    lines = [json.loads(x) for x in stream.getvalue().splitlines()]
    inside = next(x for x in lines if x["message"] == "inside the handler")
    assert (inside["job_id"], inside["queue"], inside["attempt"], inside["token"]) == ("j1", "q", 1, 1)
    assert inside["worker_id"] == "w1" and inside["lease_token"] == 1
    assert all(x.get("job_id") == "j1" for x in lines)
    blob = emf_lines(capsys.readouterr().out)
    assert blob and blob[0]["JobsSucceeded"] == [1.0]


def test_worker_telemetry_defaults_to_powertools() -> None:
    w = kit().app.bind(queue=FakeQueue(), store=FakeStore())
    assert isinstance(w.telemetry.metrics, PowertoolsMetrics)
