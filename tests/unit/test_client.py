"""sluice.Client over a fake transport: requests, retries with the same key, errors, signing."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from typing import Any

import pytest
from botocore.credentials import Credentials

import sluice
from sluice.client import Client, HttpResponse
from sluice.core.errors import (
    AlreadyFinished,
    BackendUnavailable,
    IdempotencyConflict,
    InvalidInput,
    JobNotFound,
    NoRoute,
    NotOperator,
    ScheduleNotFound,
)

JOB = "01HZX5Q3W7K2M9N4P6R8S0T1V2"
ACCEPTED = {"job_id": JOB, "queue": "emails", "status": "accepted"}


def problem(status: int, code: str, detail: str = "x") -> HttpResponse:
    body = {"type": "urn:sluice:problem:x", "title": "t", "status": status, "detail": detail, "code": code}
    headers = {"content-type": "application/problem+json"}
    if status == 503:
        headers["retry-after"] = "1"
    return HttpResponse(status, headers, json.dumps(body).encode())


def ok(body: Any, status: int = 200) -> HttpResponse:
    return HttpResponse(status, {"content-type": "application/json"}, json.dumps(body).encode())


class FakeTransport:
    def __init__(self, *replies: HttpResponse | OSError) -> None:
        self.replies = list(replies)
        self.sent: list[tuple[str, str, dict[str, str], Any]] = []

    def send(self, method: str, url: str, headers: Mapping[str, str], body: bytes | None,
             timeout: float) -> HttpResponse:
        self.sent.append((method, url, dict(headers), None if body is None else json.loads(body)))
        reply = self.replies.pop(0)
        if isinstance(reply, OSError):
            raise reply
        return reply


def client(transport: FakeTransport, **kw: Any) -> tuple[Client, list[float]]:
    sleeps: list[float] = []
    return Client("https://api.example.test/prod/", transport=transport, sleep=sleeps.append,
                  rng=random.Random(7), **kw), sleeps


def test_sluice_client_is_exported() -> None:
    assert sluice.Client is Client


def test_enqueue_posts_the_job_with_a_generated_idempotency_key() -> None:
    t = FakeTransport(ok(ACCEPTED, 202))
    c, _ = client(t)
    accepted = c.enqueue("emails", {"to": "ada"}, priority=3, delay_seconds=10)
    assert accepted.job_id == JOB
    method, url, headers, body = t.sent[0]
    assert (method, url) == ("POST", "https://api.example.test/prod/v1/queues/emails/jobs")
    # no max_attempts unless asked: the handler's RetryPolicy decides (issue 31, item 4)
    assert body == {"payload": {"to": "ada"}, "delay_seconds": 10, "priority": 3, "lease_seconds": 30}
    assert headers["Content-Type"] == "application/json"
    assert headers["Idempotency-Key"].startswith("sluice-")


def test_enqueue_sends_max_attempts_only_when_given() -> None:
    t = FakeTransport(ok(ACCEPTED, 202))
    c, _ = client(t)
    c.enqueue("emails", {}, max_attempts=2)
    assert t.sent[0][3]["max_attempts"] == 2
    for bad in (0, -1, 101, True):
        with pytest.raises(InvalidInput):
            c.enqueue("emails", {}, max_attempts=bad)


def test_each_logical_call_gets_its_own_key() -> None:
    t = FakeTransport(ok(ACCEPTED, 202), ok(ACCEPTED, 202))
    c, _ = client(t)
    c.enqueue("emails", 1)
    c.enqueue("emails", 1)
    assert t.sent[0][2]["Idempotency-Key"] != t.sent[1][2]["Idempotency-Key"]


@pytest.mark.parametrize("failure", [problem(503, "UNAVAILABLE"), problem(429, "THROTTLED"),
                                     problem(502, "BAD_GATEWAY"), problem(504, "TIMEOUT"),
                                     problem(409, "IN_PROGRESS"), ConnectionResetError("reset"),
                                     TimeoutError("read timed out")])
def test_retries_reuse_the_same_idempotency_key(failure: HttpResponse | OSError) -> None:
    t = FakeTransport(failure, failure, ok(ACCEPTED, 200))
    c, sleeps = client(t)
    assert c.enqueue("emails", 1, idempotency_key="order-9").job_id == JOB
    keys = [s[2]["Idempotency-Key"] for s in t.sent]
    assert keys == ["order-9"] * 3
    assert [s[3] for s in t.sent] == [t.sent[0][3]] * 3
    assert len(sleeps) == 2


def test_backoff_honours_retry_after_and_grows_with_jitter() -> None:
    t = FakeTransport(*[problem(429, "THROTTLED")] * 5, ok(ACCEPTED))
    c, sleeps = client(t, backoff_base_ms=100, backoff_cap_ms=5_000)
    c.enqueue("emails", 1)
    assert all(0 <= s <= min(5.0, 0.1 * 2 ** i) for i, s in enumerate(sleeps))
    t = FakeTransport(problem(503, "UNAVAILABLE"), ok(ACCEPTED))
    c, sleeps = client(t)
    c.enqueue("emails", 1)
    assert sleeps[0] >= 1.0  # Retry-After: 1


def test_gives_up_after_max_attempts_with_a_typed_error() -> None:
    t = FakeTransport(*[problem(503, "UNAVAILABLE")] * 3)
    c, _ = client(t, max_attempts=3)
    with pytest.raises(BackendUnavailable):
        c.enqueue("emails", 1)
    assert len(t.sent) == 3
    t = FakeTransport(*[ConnectionRefusedError("refused")] * 2)
    c, _ = client(t, max_attempts=2)
    with pytest.raises(BackendUnavailable, match="no response"):
        c.status(JOB)


@pytest.mark.parametrize(("reply", "error"), [
    (problem(404, "NOT_FOUND"), JobNotFound), (problem(409, "ALREADY_FINISHED"), AlreadyFinished),
    (problem(422, "IDEMPOTENCY_CONFLICT"), IdempotencyConflict),
    (problem(400, "INVALID_INPUT"), InvalidInput), (problem(413, "PAYLOAD_TOO_LARGE"), InvalidInput),
    (problem(415, "UNSUPPORTED_MEDIA_TYPE"), InvalidInput),
    (problem(403, "NOT_OPERATOR"), NotOperator), (problem(404, "NO_ROUTE"), NoRoute),
    (problem(404, "SCHEDULE_NOT_FOUND"), ScheduleNotFound),
])
def test_client_errors_are_not_retried_and_map_to_sluice_errors(reply: HttpResponse,
                                                                 error: type[Exception]) -> None:
    t = FakeTransport(reply)
    c, sleeps = client(t)
    with pytest.raises(error) as info:
        c.cancel(JOB)
    assert len(t.sent) == 1 and sleeps == []
    assert info.value.details["status"] == reply.status  # type: ignore[attr-defined]


def test_invalid_arguments_fail_before_any_request() -> None:
    t = FakeTransport()
    c, _ = client(t)
    with pytest.raises(InvalidInput):
        c.enqueue("Bad Queue", 1)
    with pytest.raises(InvalidInput):
        c.enqueue("emails", 1, priority=10)
    with pytest.raises(InvalidInput):
        c.enqueue("emails", float("nan"))
    with pytest.raises(InvalidInput):
        c.enqueue("emails", {1, 2})
    with pytest.raises(InvalidInput):
        c.enqueue_batch("emails", [{"payload": float("inf")}])
    with pytest.raises(InvalidInput):
        c.enqueue_batch("emails", [])
    with pytest.raises(InvalidInput):
        c.status("../etc/passwd")
    assert t.sent == []


def test_batch_status_cancel_and_stats_requests() -> None:
    batch = {"queue": "emails", "jobs": [ACCEPTED, {**ACCEPTED, "job_id": JOB[:-1] + "3"}]}
    view = {"job_id": JOB, "queue": "emails", "status": "queued", "attempts": 0, "created_at_ms": 1,
            "updated_at_ms": 2}
    stats = {"queue": "emails", "ready": 1, "delayed": 0, "leased": 0, "dead": 0, "oldest_ready_age_ms": 5,
             "paused": False, "rate_per_s": 0.0, "burst": 0, "max_in_flight": 0, "high_watermark": 0,
             "low_watermark": 0}
    t = FakeTransport(ok(batch, 202), ok(view), ok({"job_id": JOB, "status": "cancelled"}, 202), ok(stats))
    c, _ = client(t)
    assert len(c.enqueue_batch("emails", [{"payload": 1}, {"payload": 2, "priority": 9}]).jobs) == 2
    assert c.status(JOB).status == "queued"
    assert c.cancel(JOB).status == "cancelled"
    assert c.queue_stats("emails").ready == 1
    assert [(m, u.removeprefix("https://api.example.test/prod")) for m, u, _, _ in t.sent] == [
        ("POST", "/v1/queues/emails/jobs/batch"), ("GET", f"/v1/jobs/{JOB}"), ("DELETE", f"/v1/jobs/{JOB}"),
        ("GET", "/v1/queues/emails")]
    assert t.sent[0][3]["jobs"][1]["priority"] == 9
    assert "Idempotency-Key" in t.sent[0][2] and "Idempotency-Key" not in t.sent[1][2]


def test_wait_polls_until_final() -> None:
    base = {"job_id": JOB, "queue": "emails", "attempts": 1, "created_at_ms": 1, "updated_at_ms": 2}
    t = FakeTransport(ok({**base, "status": "accepted"}), ok({**base, "status": "leased"}),
                      ok({**base, "status": "succeeded", "result": {"echo": 1}}))
    c, sleeps = client(t)
    assert c.wait(JOB, timeout_s=10).result == {"echo": 1}
    assert len(sleeps) == 2


def test_wait_times_out() -> None:
    base = {"job_id": JOB, "queue": "emails", "attempts": 0, "created_at_ms": 1, "updated_at_ms": 2,
            "status": "queued"}
    t = FakeTransport(*[ok(base)] * 50)
    now = [0.0]
    sleeps: list[float] = []

    def sleep(s: float) -> None:
        sleeps.append(s)
        now[0] += s

    c = Client("http://x", transport=t, sleep=sleep)
    with pytest.raises(TimeoutError):
        c.wait(JOB, timeout_s=1.0, clock=lambda: now[0])
    assert now[0] <= 1.0


def test_api_key_header() -> None:
    t = FakeTransport(ok(ACCEPTED, 202))
    c, _ = client(t, api_key="k-123")
    c.enqueue("emails", 1)
    assert t.sent[0][2]["x-api-key"] == "k-123"


def test_sigv4_signs_every_attempt_for_execute_api() -> None:
    t = FakeTransport(problem(503, "UNAVAILABLE"), ok(ACCEPTED, 202))
    c = Client("https://abc123.execute-api.eu-west-1.amazonaws.com/prod", transport=t, sleep=lambda s: None,
               sign_sigv4=True, credentials=Credentials("AKIDEXAMPLE", "secret", "token"))
    c.enqueue("emails", 1, idempotency_key="k")
    for _, _, headers, _ in t.sent:
        auth = headers["Authorization"]
        assert auth.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
        assert "/eu-west-1/execute-api/aws4_request" in auth
        assert "idempotency-key" in auth  # the key is covered by the signature
        assert headers["X-Amz-Security-Token"] == "token"


def test_route_and_schema_refusals_raise_their_own_errors_with_their_codes() -> None:
    """`sluice enqueue --json` printed code INVALID_INPUT for a 404 NO_ROUTE and a 400 PAYLOAD_INVALID."""
    from sluice.client import _error
    from sluice.core.errors import NoRoute, PayloadInvalid

    assert type(_error(404, {"code": "NO_ROUTE", "detail": "no route"})) is NoRoute
    refused = _error(400, {"code": "PAYLOAD_INVALID", "detail": "bad", "errors": []})
    assert type(refused) is PayloadInvalid and refused.code == "PAYLOAD_INVALID"
