"""functions/gateway/app.py, driven with the API Gateway REST proxy event fixtures (tests/events) as they are.

The composition root is pointed at fakes, so this checks the thin handler's wiring:
settings, adapters built once per container on first use, Powertools logging and metrics.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from sluice.core import ids
from sluice.core.errors import ConfigError
from sluice.core.models import JobRecord, JobState
from sluice.entry import gateway as entry_gateway
from sluice.entry import root as wiring
from sluice_dev.fakes import FakeKeyStore, FakeLog, FakeStore
from tests.loading import module_from_file
from tests.unit.test_gateway_fakes import EVENTS, LambdaContext, gateway_queue, unavailable

APP = Path(__file__).parents[2] / "functions" / "gateway" / "app.py"
SECRET = "handler-test-secret-0123456789"


class Fakes:
    def __init__(self) -> None:
        self.log, self.store, self.idem = FakeLog(), FakeStore(), FakeKeyStore()
        self.queue = gateway_queue()
        self.builds = 0


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> Iterator[Fakes]:
    f = Fakes()

    def built(adapter: Any) -> Any:
        def build(settings: Any = None) -> Any:
            f.builds += 1
            return adapter
        return build

    monkeypatch.setenv("SLUICE_MAX_PAYLOAD_BYTES", "1000")
    monkeypatch.setenv("SLUICE_JOB_ID_SECRET", SECRET)
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "sluice-gateway")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "Sluice")
    wiring.reset()
    monkeypatch.setattr(wiring, "job_log", built(f.log))
    monkeypatch.setattr(wiring, "store", built(f.store))
    monkeypatch.setattr(wiring, "lazy_families", lambda settings=None: None)  # the fake store keeps none
    monkeypatch.setattr(wiring, "queue", built(f.queue))
    monkeypatch.setattr(entry_gateway, "idempotency", built(f.idem))
    yield f
    monkeypatch.undo()
    wiring.reset()


def load_app() -> ModuleType:
    return module_from_file(APP, "gateway_app_under_test")


@pytest.fixture
def app(fakes: Fakes) -> ModuleType:
    return load_app()


def event(name: str) -> dict[str, Any]:
    return json.loads((EVENTS / name).read_text())  # type: ignore[no-any-return]


def emf_lines(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]


def call(app: ModuleType, ev: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
    response = app.handler(ev, LambdaContext())
    headers = {k.lower(): v[-1] for k, v in (response.get("multiValueHeaders") or {}).items()}
    headers |= {k.lower(): v for k, v in (response.get("headers") or {}).items()}
    return response["statusCode"], headers, json.loads(response["body"])


def test_cold_start_builds_no_adapter(app: ModuleType, fakes: Fakes) -> None:
    assert fakes.builds == 0


def test_recorded_enqueue_event(capsys: pytest.CaptureFixture[str], app: ModuleType, fakes: Fakes) -> None:
    code, headers, body = call(app, event("apigw_enqueue.json"))
    assert code == 202 and headers["location"] == f"/live/v1/jobs/{body['job_id']}"  # the recorded stage
    [spec] = fakes.log.records
    assert (spec.queue, spec.payload, spec.priority, spec.lease_ms) == (
        "emails", {"to": "ada@example.com", "template": "welcome"}, 5, 60_000)
    caller = "arn:aws:sts::123456789012:assumed-role/web-servers/web-1"
    assert spec.idempotency_key == f"{caller}|order-1234-welcome-email"
    assert emf_lines(capsys) == []  # a 2xx answer is counted by API Gateway and Lambda, not by a line
    code, _, again = call(app, event("apigw_enqueue.json"))
    assert (code, again) == (200, body)
    # log, idempotency and the Redis queue: once per container. The queue is built on the first
    # admission view (a queue's caps, issue 19), not at import. The jobs table's store is not
    # built at all: the enqueue path never touches it (issue 14, cold start).
    assert fakes.builds == 3
    call(app, event("apigw_get_queue.json"))
    call(app, event("apigw_get_queue.json"))
    assert fakes.builds == 3  # the queue, built on the first request that needs it, once
    call(app, event("apigw_get_job.json"))
    call(app, event("apigw_get_job.json"))
    assert fakes.builds == 4  # the store, likewise


def test_recorded_enqueue_then_get_says_accepted(app: ModuleType, fakes: Fakes) -> None:
    ev = event("apigw_enqueue.json")
    ev["headers"] = {k: v for k, v in ev["headers"].items() if k != "Idempotency-Key"}
    ev["multiValueHeaders"] = {k: [v] for k, v in ev["headers"].items()}
    _, _, body = call(app, ev)
    assert ids.verify(body["job_id"], SECRET.encode()) is not None
    get = event("apigw_get_job.json")
    get.update(path=f"/v1/jobs/{body['job_id']}", pathParameters={"job_id": body["job_id"]})
    code, _, doc = call(app, get)
    assert (code, doc["status"], doc["queue"]) == (200, "accepted", "emails")
    assert fakes.store.items == {}


def test_gateway_refuses_to_start_without_a_job_id_secret(fakes: Fakes,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLUICE_JOB_ID_SECRET")
    wiring.settings.cache_clear()  # the other builders are the fixture's fakes
    with pytest.raises(ConfigError, match="SLUICE_JOB_ID_SECRET"):
        load_app()


@pytest.mark.parametrize("hours,days,expected_hours", [(168, 14, 168), (8760, 14, 14 * 24), (24, 1, 24)])
def test_the_horizon_is_kafkas_retention_capped_by_the_tables(
        fakes: Fakes, monkeypatch: pytest.MonkeyPatch, hours: int, days: int, expected_hours: int) -> None:
    monkeypatch.setenv("SLUICE_JOB_ID_HORIZON_HOURS", str(hours))
    monkeypatch.setenv("SLUICE_RETENTION_DAYS", str(days))
    wiring.settings.cache_clear()
    assert load_app().gateway.api.id_horizon_ms == expected_hours * 3_600_000


def test_a_short_secret_is_refused(fakes: Fakes, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_JOB_ID_SECRET", "short")
    wiring.settings.cache_clear()
    wiring.job_id_key.cache_clear()
    with pytest.raises(ConfigError, match="shorter than 16 bytes"):
        wiring.job_id_key()


def test_recorded_batch_event(app: ModuleType, fakes: Fakes) -> None:
    code, _, body = call(app, event("apigw_enqueue_batch.json"))
    assert code == 202 and [j["queue"] for j in body["jobs"]] == ["emails", "emails"]
    assert fakes.log.records[1].run_at_ms == fakes.log.records[1].enqueued_at_ms + 30_000


def test_recorded_base64_event(app: ModuleType, fakes: Fakes) -> None:
    code, _, _ = call(app, event("apigw_enqueue_base64.json"))
    assert code == 202 and fakes.log.records[0].payload["image"] == "s3://photos/é.jpg"


def test_settings_reach_the_gateway(capsys: pytest.CaptureFixture[str], app: ModuleType,
                                    fakes: Fakes) -> None:
    ev = event("apigw_enqueue.json")
    ev["body"] = json.dumps({"payload": "x" * 1000})  # over SLUICE_MAX_PAYLOAD_BYTES=1000 as JSON
    code, _, doc = call(app, ev)
    assert (code, doc["status"]) == (413, 413)
    assert fakes.log.records == []
    [emf] = emf_lines(capsys)  # an answer that is not 2xx is counted, in the function's own metric
    assert emf["Gateway4xx"] == [1.0] and emf["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "Sluice"


def test_only_answers_that_are_not_2xx_write_a_metric_line(capsys: pytest.CaptureFixture[str],
                                                           app: ModuleType, fakes: Fakes) -> None:
    """Issue 33: the gateway's per-request EMF count of 2xx answers is gone (168 B a job); 4xx and 5xx
    answers keep theirs, one line each, with nothing left over for the next request."""
    assert [call(app, event("apigw_enqueue_batch.json"))[0] for _ in range(3)] == [202, 200, 200]  # replays
    assert call(app, event("apigw_get_job.json"))[0] == 404
    fakes.log.fail = unavailable()
    unkeyed = event("apigw_enqueue.json")
    unkeyed["headers"] = {k: v for k, v in unkeyed["headers"].items() if k != "Idempotency-Key"}
    unkeyed["multiValueHeaders"] = {k: [v] for k, v in unkeyed["headers"].items()}
    assert call(app, unkeyed)[0] == 503
    counts = [{k: v for k, v in line.items() if k.startswith("Gateway")} for line in emf_lines(capsys)]
    assert counts == [{"Gateway4xx": [1.0]}, {"Gateway5xx": [1.0]}]


def test_recorded_get_cancel_and_queue_events(app: ModuleType, fakes: Fakes) -> None:
    assert call(app, event("apigw_get_job.json"))[0] == 404
    job_id = event("apigw_get_job.json")["pathParameters"]["job_id"]
    fakes.store.put(JobRecord(job_id=job_id, queue="emails", status=JobState.QUEUED))
    fakes.queue.add("emails", job_id)
    code, _, body = call(app, event("apigw_get_job.json"))
    assert (code, body["status"]) == (200, "queued")
    code, _, body = call(app, event("apigw_cancel_job.json"))
    assert (code, body) == (202, {"job_id": job_id, "status": "cancelled"})
    assert call(app, event("apigw_cancel_job.json"))[0] == 409
    code, _, body = call(app, event("apigw_get_queue.json"))
    assert (code, body["queue"], body["ready"]) == (200, "emails", 3)


def test_recorded_openapi_event(app: ModuleType) -> None:
    code, headers, doc = call(app, event("apigw_openapi.json"))
    assert code == 200 and headers["content-type"] == "application/json"
    assert "/v1/queues/{queue}/jobs" in doc["paths"]


def test_the_local_stacks_warm_up_answers_without_generating_the_openapi_document(
        app: ModuleType, fakes: Fakes, monkeypatch: pytest.MonkeyPatch) -> None:
    """`sluice dev`'s first request to each gateway container builds the Api and reads a queue, as an
    enqueue does, and writes nothing; the OpenAPI document (0.66 CPU-s a container) waits for a request
    that asks for it."""
    from sluice.gateway.http import app as http_app
    from sluice_dev.local.dev import WARM_UP_QUEUE, warm_up_event

    def no_document(*_args: Any) -> str:
        raise AssertionError("the warm-up generated the OpenAPI document")

    monkeypatch.setattr(http_app, "build_openapi", no_document)
    registered = fakes.queue.queues()
    code, _, body = call(app, warm_up_event())
    assert (code, body["queue"], body["ready"]) == (200, WARM_UP_QUEUE, 0)
    assert fakes.log.records == [] and fakes.store.items == {} and fakes.queue.queues() == registered
