"""Jobs that start jobs on the whole local pipeline (`sluice dev`): gateway, Kafka, relay, Redis,
worker Lambdas, the jobs table. A parent fans out through the gateway function's family entry, the
continuation sums the children, and a child's record sent to Kafka again after it finished is
dropped by the relay (final in the jobs table), so it never runs twice."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from sluice.backends.kafka.producer import KafkaJobLog
from sluice.core.config import Settings
from sluice.core.models import JobSpec
from tests.stack.test_dev import SLUICE, http, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def until(url: str, done: Any, timeout: float = 90) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    view: dict[str, Any] = {}
    while time.monotonic() < deadline:
        status, view = http("GET", url)
        if status == 200 and done(view):
            return view
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting on {url}: {view}")


def test_a_fanout_runs_its_children_then_its_continuation_once_through_the_pipeline(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    argv = [SLUICE, "dev", "--workers", "3", "--log-level", "WARNING"]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        ep = wait_for(tmp_path / ".sluice" / "endpoints.json", proc)
        gw = ep["gateway_url"]
        n = 12
        status, accepted = http("POST", f"{gw}/v1/queues/fanout/jobs", {"payload": {"n": n}})
        assert status == 202, accepted
        parent = until(f"{gw}/v1/jobs/{accepted['job_id']}", lambda v: v["status"] == "succeeded")
        assert len(parent["children"]) == n and len(parent["continuations"]) == 1
        then = parent["continuations"][0]
        assert parent["result"] == {"children": n, "continuation": then}
        report = until(f"{gw}/v1/jobs/{then}", lambda v: v["status"] == "succeeded")
        assert report["result"] == {"sum": sum(i * i for i in range(n)), "children": n,
                                    "states": {"succeeded": n}}
        assert report["parent_id"] == accepted["job_id"] and report["remaining"] == 0
        assert sorted(report["waits_for"]) == sorted(parent["children"]) and report["attempts"] == 1
        shown = subprocess.run([SLUICE, "status", accepted["job_id"]], cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0, shown.stderr
        assert f"children: {n}: " in shown.stdout and f"continuation: {then}" in shown.stdout
        shown = subprocess.run([SLUICE, "status", then], cwd=tmp_path, env=env, capture_output=True,
                               text=True, timeout=60)
        assert f"parent: {accepted['job_id']}" in shown.stdout
        assert f"waits for: {n} children, 0 not ended yet" in shown.stdout
        child_id = parent["children"][0]
        child = until(f"{gw}/v1/jobs/{child_id}", lambda v: v["status"] == "succeeded")
        assert (child["parent_id"], child["continuation"], child["attempts"]) == (accepted["job_id"], then, 1)

        # A re-run parent appends its children again: here, one child's record, sent to Kafka again
        # after it finished. The relay drops it (final in the jobs table): it does not run again.
        s = Settings(kafka_bootstrap=ep["kafka_bootstrap"], kafka_topic=ep["kafka_topic"])
        log = KafkaJobLog.from_settings(s)
        log.append([JobSpec(job_id=child_id, queue="square", payload=0,
                            enqueued_at_ms=int(time.time() * 1000))])
        status, probe = http("POST", f"{gw}/v1/queues/echo/jobs", {"payload": "after the duplicate"})
        # the relay went past the duplicate
        until(f"{gw}/v1/jobs/{probe['job_id']}", lambda v: v["status"] == "succeeded")
        time.sleep(2)
        again = http("GET", f"{gw}/v1/jobs/{child_id}")[1]
        assert (again["status"], again["attempts"], again["result"]) == ("succeeded", 1, child["result"])
        assert http("GET", f"{gw}/v1/jobs/{then}")[1]["attempts"] == 1
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
