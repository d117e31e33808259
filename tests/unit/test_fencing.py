"""Fencing for services (issue 31, item 7), pure: the headers (``sluice.core.fencing``), the fence's
decision (``sluice_fence.verifier``) on an in-memory store, and ``ctx.http`` on a fake pool (no
socket here; tests/backends/test_fence_service.py runs them on real servers)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from sluice.core.bus import EventBus, FencedCall, HandlerEnded
from sluice.core.errors import InvalidInput, StaleToken
from sluice.core.fencing import MAX_FENCE_TOKEN, Claim, fence_headers, parse_token, read_claim, stale_of
from sluice.core.models import Job
from sluice.worker.runtime import http as fenced_http
from sluice.worker.runtime.context import JobContext
from sluice_dev.fakes import FakeQueue, kit
from sluice_fence.verifier import Advance, Fence

pytestmark = pytest.mark.timeout(20)


def getter(headers: dict[str, Any]) -> Callable[[str], list[str]]:
    """``read_claim``'s view of ``headers`` (a list value: the header given that many times)."""
    def get(name: str) -> list[str]:
        value = headers.get(name)
        return [] if value is None else value if isinstance(value, list) else [value]
    return get


def test_the_headers_name_the_job_the_token_the_resource_and_a_stable_idempotency_key() -> None:
    assert fence_headers("job-1", 7) == {"Sluice-Job-Id": "job-1", "Sluice-Fencing-Token": "7",
                                         "Idempotency-Key": "job-1"}
    assert fence_headers("job-1", 8, "charge") == {"Sluice-Job-Id": "job-1", "Sluice-Fencing-Token": "8",
                                                   "Sluice-Fence-Resource": "charge",
                                                   "Idempotency-Key": "job-1:charge"}
    assert read_claim(getter(fence_headers("job-1", 8, "charge"))) == Claim("job-1", 8, "charge")
    for bad in (("job 1", 1, None), ("j", 0, None), ("j", -1, None), ("j", MAX_FENCE_TOKEN + 1, None),
                ("j", True, None), ("j", 1.0, None), ("j", 1, ""), ("j", 1, "a\nb"), ("j", 1, "x" * 65),
                ("j", 1, "é")):
        with pytest.raises(InvalidInput):
            fence_headers(*bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("raw", ["9223372036854775808", "18446744073709551616", "9" * 40, "-1", "0", "00",
                                 "05", "+5", " 5", "5 ", "5.0", "1e3", "0x10", "", "\u0663", "\uff15",
                                 "1_000"])
def test_a_token_is_a_canonical_decimal_in_1_to_2_63_minus_1(raw: str) -> None:
    with pytest.raises(InvalidInput):
        parse_token(raw)


def test_the_largest_token_parses_exactly() -> None:
    assert parse_token("9223372036854775807") == MAX_FENCE_TOKEN and parse_token("1") == 1


@pytest.mark.parametrize("headers", [
    {"Sluice-Fencing-Token": "5"},  # no job
    {"Sluice-Job-Id": "j"},  # no token
    {"Sluice-Fence-Resource": "r"},  # a resource alone
    {"Sluice-Job-Id": "j", "Sluice-Fencing-Token": ["5", "6"]},  # a header given twice
    {"Sluice-Job-Id": ["j", "k"], "Sluice-Fencing-Token": "5"},
    {"Sluice-Job-Id": "j/../k", "Sluice-Fencing-Token": "5"},
])
def test_some_fencing_headers_that_make_no_claim_are_malformed(headers: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput):
        read_claim(getter(headers))


class MemoryStore:
    """``FenceStore`` in a dict, with fence.lua's rule."""

    def __init__(self) -> None:
        self.newest: dict[str, int] = {}

    def advance(self, key: str, token: int) -> Advance:
        seen = self.newest.get(key, 0)
        if token < seen:
            return Advance("stale", seen)
        self.newest[key] = token
        return Advance("same" if token == seen else "new", token)


def decide(fence: Fence, method: str, headers: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    d = fence.decide(method, getter(headers))
    return (200, {"replay": d.admitted.replay}) if d.admitted else (d.status, json.loads(d.body))


def test_the_fence_admits_newer_and_equal_tokens_and_refuses_older_ones_with_a_409_problem() -> None:
    fence = Fence(MemoryStore(), namespace="svc")
    assert decide(fence, "POST", fence_headers("j", 2)) == (200, {"replay": False})
    assert decide(fence, "POST", fence_headers("j", 2)) == (200, {"replay": True})
    status, body = decide(fence, "PUT", fence_headers("j", 1, "row"))
    assert status == 409
    assert {k: body[k] for k in ("type", "status", "job_id", "token", "current", "resource")} == {
        "type": "urn:sluice:problem:stale-token", "status": 409, "job_id": "j", "token": 1, "current": 2,
        "resource": "row"}
    assert decide(fence, "POST", fence_headers("other", 1))[0] == 200  # another job's tokens are its own
    assert fence.store.newest == {"svc:j": 2, "svc:other": 1}  # type: ignore[attr-defined]


def test_missing_headers_are_refused_by_default_or_let_through_when_allowed() -> None:
    status, body = decide(Fence(MemoryStore()), "POST", {})
    assert (status, body["type"]) == (400, "urn:sluice:problem:fencing-required")
    assert decide(Fence(MemoryStore(), missing="allow"), "POST", {})[0] == 200
    assert decide(Fence(MemoryStore()), "GET", {})[0] == 200  # only writes are fenced by default
    assert decide(Fence(MemoryStore(), methods=None), "GET", {})[0] == 400
    status, body = decide(Fence(MemoryStore(), missing="allow"), "POST", {"Sluice-Fencing-Token": "-1"})
    assert (status, body["type"]) == (400, "urn:sluice:problem:bad-fencing")
    for bad in ({"missing": "maybe"}, {"namespace": ""}, {"namespace": "a\nb"}):
        with pytest.raises(InvalidInput):
            Fence(MemoryStore(), **bad)


# --- ctx.http, on a fake pool ---------------------------------------------------------------------

class FakeResponse:
    def __init__(self, status: int, data: bytes) -> None:
        self.status, self.data = status, data


class FakePool:
    def __init__(self, *answers: FakeResponse) -> None:
        self.answers, self.sent = list(answers), []  # type: ignore[var-annotated]

    def request(self, method: str, url: str, **kw: Any) -> FakeResponse:
        self.sent.append((method, url, kw))
        return self.answers.pop(0)


STALE = json.dumps({"type": "urn:sluice:problem:stale-token", "status": 409, "current": 9}).encode()


def test_ctx_http_sends_the_attempts_headers_and_raises_stale_token_on_the_fences_409(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pool = FakePool(FakeResponse(201, b"{}"), FakeResponse(409, b'{"type": "other"}'),
                    FakeResponse(409, STALE))
    monkeypatch.setattr(fenced_http, "pool", lambda: pool)
    calls: list[FencedCall] = []
    bus = EventBus()
    bus.subscribe(calls.append, FencedCall)
    h = fenced_http.FencedHttp("job-1", 4, bus)
    assert h.request("post", "https://svc.example/x", json={"a": 1}, resource="charge",
                     headers={"X-Trace": "t"}).status == 201
    method, url, kw = pool.sent[0]
    assert (method, url, kw["body"], kw["redirect"], kw["retries"]) == (
        "POST", "https://svc.example/x", b'{"a":1}', False, False)
    assert kw["headers"] == {"X-Trace": "t", "Content-Type": "application/json", "Sluice-Job-Id": "job-1",
                             "Sluice-Fencing-Token": "4", "Sluice-Fence-Resource": "charge",
                             "Idempotency-Key": "job-1:charge"}
    assert h.request("DELETE", "http://svc/x").status == 409  # the service's own 409: the handler's to read
    with pytest.raises(StaleToken) as stale:
        h.request("POST", "http://svc/x")
    assert (stale.value.mine, stale.value.current) == (4, 9)
    assert [(c.outcome, c.status, c.current, c.method, c.host) for c in calls] == [
        ("ok", 201, None, "POST", "svc.example"), ("ok", 409, None, "DELETE", "svc"),
        ("rejected", 0, 9, "POST", "svc")]


@pytest.mark.parametrize(("args", "kw"), [
    (("GET", "file:///etc/passwd"), {}), (("GET", "ftp://h/x"), {}), (("GET", "http:///x"), {}),
    (("POST", "http://h/x"), {"headers": {"sluice-fencing-token": "99"}}),  # no caller sets a fence header
    (("POST", "http://h/x"), {"headers": {"Idempotency-Key": "mine"}}),
    (("POST", "http://h/x"), {"json": {}, "body": b"x"}), (("POST", "http://h/x"), {"timeout": 0}),
    (("POST", "http://h/x"), {"resource": "a\r\nInjected: 1"}),
])
def test_ctx_http_refuses_what_it_would_not_send_before_sending(
        monkeypatch: pytest.MonkeyPatch, args: tuple[str, str], kw: dict[str, Any]) -> None:
    pool = FakePool()
    monkeypatch.setattr(fenced_http, "pool", lambda: pool)
    with pytest.raises(InvalidInput):
        fenced_http.FencedHttp("job-1", 4, EventBus()).request(*args, **kw)
    assert pool.sent == []


def test_a_stale_token_from_the_fence_ends_the_attempt_as_lost_like_a_fenced_write(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fenced_http, "pool", lambda: FakePool(FakeResponse(409, STALE)))
    k = kit(FakeQueue())
    ended: list[HandlerEnded] = []

    @k.app.handler("notify")
    def notify(job: Job, ctx: JobContext) -> dict[str, int]:
        ctx.http.request("POST", "http://svc/notify", json={"job": job.job_id})
        return {"sent": 1}

    k.queue.add("notify", "j1", {})
    worker = k.worker()
    worker.events.subscribe(ended.append, HandlerEnded)
    summary = worker.drain(["notify"], 1)
    assert summary.leased == 1 and dict(summary.outcomes) == {"lease_lost": 1}
    assert [e.stale_token for e in ended] == [True]
    assert k.store.get_job("j1").result is None  # nothing of the stale attempt was written


def test_stale_of_reads_only_the_fences_problem() -> None:
    assert stale_of(409, STALE, job_id="j", mine=4, operation="op") is not None
    for status, body in ((409, b"not json"), (409, b"[1]"), (409, b'{"type": "x"}'), (400, STALE)):
        assert stale_of(status, body, job_id="j", mine=4, operation="op") is None
    odd = stale_of(409, b'{"type": "urn:sluice:problem:stale-token", "current": true}', job_id="j", mine=4,
                   operation="op")
    assert odd is not None and odd.current == 5  # a current that is no token: at least newer than ours
