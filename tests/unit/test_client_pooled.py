"""Issue 31, item 2: the client's pooled transport, its life (close, ``with``), pydantic payloads,
``create_schedule``, and ``AsyncClient``'s methods, without a socket (tests/stack/test_client_stack.py
sends them to a running stack)."""

from __future__ import annotations

import datetime as dt
import enum
import inspect
from typing import Any

import pytest
import urllib3
from pydantic import BaseModel

from sluice.client import Client, ClientClosed, PooledTransport
from sluice.client_async import AsyncClient
from sluice.core import wire
from sluice.core.errors import BackendUnavailable, InvalidInput, JobNotFound, ScheduleExists
from tests.unit.test_client import ACCEPTED, JOB, FakeTransport, client, ok, problem

VIEW = {"name": "nightly", "expression": "cron(0 3 * * ? *)", "queue": "emails", "payload": {"n": 1},
        "paused": False, "created_at_ms": 1, "next_firing_ms": 2}


class Kind(enum.Enum):
    WELCOME = "welcome"


class Address(BaseModel):
    to: str
    at: dt.datetime


class Email(BaseModel):
    address: Address
    kind: Kind
    tags: tuple[str, ...] = ()


EMAIL = Email(address=Address(to="ada", at=dt.datetime(2026, 12, 6, 15, tzinfo=dt.UTC)), kind=Kind.WELCOME,
              tags=("a",))
EMAIL_JSON = {"address": {"to": "ada", "at": "2026-12-06T15:00:00Z"}, "kind": "welcome", "tags": ["a"]}


def test_a_pydantic_model_is_sent_as_its_json_dump() -> None:
    t = FakeTransport(ok(ACCEPTED, 202))
    c, _ = client(t)
    assert c.enqueue("emails", EMAIL).job_id == JOB
    assert t.sent[0][3]["payload"] == EMAIL_JSON == EMAIL.model_dump(mode="json")


def test_a_batch_takes_models_in_mappings_and_in_requests_it_was_given() -> None:
    t = FakeTransport(ok({"queue": "emails", "jobs": [ACCEPTED, ACCEPTED]}, 202))
    c, _ = client(t)
    c.enqueue_batch("emails", [{"payload": EMAIL, "priority": 2},
                               wire.EnqueueRequest(payload=EMAIL, group="t1")])
    first, second = t.sent[0][3]["jobs"]
    assert (first["payload"], first["priority"]) == (EMAIL_JSON, 2)
    assert (second["payload"], second["group"]) == (EMAIL_JSON, "t1")


def test_a_model_that_is_no_json_is_refused_before_sending() -> None:
    class Reading(BaseModel):
        value: float

    t = FakeTransport()
    c, _ = client(t)
    with pytest.raises(InvalidInput):
        c.enqueue("emails", Reading(value=float("nan")))
    with pytest.raises(InvalidInput):
        c.create_schedule("emails", "nightly", "rate(1 day)", Reading(value=float("inf")))
    assert t.sent == []


def test_create_schedule_posts_name_expression_and_payload_to_the_queues_schedules() -> None:
    t = FakeTransport(ok({**VIEW, "payload": EMAIL_JSON}, 201))
    c, _ = client(t)
    view = c.create_schedule("emails", "nightly", "cron(0 3 * * ? *)", EMAIL)
    method, url, headers, body = t.sent[0]
    assert (method, url) == ("POST", "https://api.example.test/prod/v1/admin/queues/emails/schedules")
    assert body == {"name": "nightly", "expression": "cron(0 3 * * ? *)", "payload": EMAIL_JSON}
    assert "Idempotency-Key" not in headers  # the route keeps no idempotency record
    assert view["payload"] == EMAIL_JSON and view["next_firing_ms"] == 2


def test_create_schedule_keeps_the_typed_error_with_its_status_and_code() -> None:
    t = FakeTransport(problem(409, "SCHEDULE_EXISTS", "emails has a schedule named nightly"))
    c, _ = client(t)
    with pytest.raises(ScheduleExists) as caught:
        c.create_schedule("emails", "nightly", "rate(1 day)", 1)
    assert caught.value.code == "SCHEDULE_EXISTS" and caught.value.details["status"] == 409


def test_a_create_whose_outcome_is_unknown_is_not_sent_again_but_a_throttled_one_is() -> None:
    c, sleeps = client(FakeTransport(problem(503, "UNAVAILABLE"), ok(VIEW, 201)))
    with pytest.raises(BackendUnavailable):  # a second create could say 409 for this one's schedule
        c.create_schedule("emails", "nightly", "rate(1 day)", 1)
    assert sleeps == []
    t = FakeTransport(problem(429, "THROTTLED"), ok(VIEW, 201))
    c, sleeps = client(t)
    assert c.create_schedule("emails", "nightly", "rate(1 day)", 1)["name"] == "nightly"
    assert len(t.sent) == 2 and len(sleeps) == 1


def test_a_bad_schedule_name_or_queue_is_refused_before_sending() -> None:
    t = FakeTransport()
    c, _ = client(t)
    with pytest.raises(InvalidInput):
        c.create_schedule("emails", "no/slash", "rate(1 day)", 1)
    with pytest.raises(InvalidInput):
        c.create_schedule("bad queue", "nightly", "rate(1 day)", 1)
    assert t.sent == []


def test_get_schedule_reads_one_by_name() -> None:
    t = FakeTransport(ok(VIEW))
    c, _ = client(t)
    assert c.get_schedule("emails", "nightly") == VIEW
    assert t.sent[0][:2] == ("GET", "https://api.example.test/prod/v1/admin/queues/emails/schedules/nightly")


class ClosingTransport(FakeTransport):
    closes = 0

    def close(self) -> None:
        self.closes += 1


def test_close_closes_the_transport_and_a_later_call_sends_nothing() -> None:
    t = ClosingTransport(ok(ACCEPTED, 202))
    c, _ = client(t)
    c.close()
    c.close()  # idempotent
    with pytest.raises(ClientClosed):
        c.status(JOB)
    assert t.sent == [] and t.closes == 2


def test_leaving_the_with_block_closes_the_client_even_after_an_error() -> None:
    t = ClosingTransport(problem(404, "NOT_FOUND"))
    with pytest.raises(JobNotFound), client(t)[0] as c:
        c.status(JOB)
    assert c.closed and t.closes == 1


def test_the_default_transport_is_a_pool_built_without_connecting() -> None:
    c = Client("https://api.example.test/prod", max_connections=3)
    assert isinstance(c.transport, PooledTransport) and len(c.transport._direct.pools) == 0
    c.close()
    assert c.transport.closed


@pytest.mark.parametrize(("raised", "seen"), [
    (urllib3.exceptions.NewConnectionError(None, "refused"), ConnectionError),  # type: ignore[arg-type]
    (urllib3.exceptions.ReadTimeoutError(None, "/", "read timed out"), TimeoutError),  # type: ignore[arg-type]
    (urllib3.exceptions.ProtocolError("Connection aborted."), ConnectionError),
    (urllib3.exceptions.SSLError("bad certificate"), ConnectionError),
])
def test_the_pools_errors_become_oserrors_that_a_keyed_call_retries(
        raised: Exception, seen: type[OSError], monkeypatch: pytest.MonkeyPatch) -> None:
    transport = PooledTransport()
    replies: list[Any] = [raised, urllib3.HTTPResponse(body=b'{"job_id": "x"}', status=202,
                                                       headers={"Content-Type": "application/json"})]

    def request(*_a: Any, **kw: Any) -> Any:
        assert kw["redirect"] is False  # the client follows nothing: a 3xx is an answer
        reply = replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply

    monkeypatch.setattr(transport._direct, "request", request)
    with pytest.raises(seen):
        transport.send("GET", "https://api.example.test/v1/jobs/x", {}, None, 1.0)
    replies.insert(0, raised)
    sleeps: list[float] = []
    c = Client("https://api.example.test", transport=transport, sleep=sleeps.append)
    monkeypatch.setattr(wire.Accepted, "model_validate", staticmethod(lambda doc: doc))
    assert c.enqueue("emails", 1) == {"job_id": "x"} and len(sleeps) == 1


def test_a_proxy_from_the_environment_is_used_unless_the_host_bypasses_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example.test:3128")
    monkeypatch.setenv("NO_PROXY", "internal.example.test")
    transport = PooledTransport()
    proxied = transport._manager("https://abc.execute-api.eu-west-1.amazonaws.com/prod/v1/jobs/x")
    assert isinstance(proxied, urllib3.ProxyManager) and proxied.proxy is not None
    assert proxied.proxy.host == "proxy.example.test"
    assert transport._manager("https://internal.example.test/v1/jobs/x") is transport._direct
    assert transport._manager("https://abc.execute-api.eu-west-1.amazonaws.com/other") is proxied  # reused


def test_the_async_client_has_every_call_of_the_client_with_its_signature() -> None:
    public = {n for n, _ in inspect.getmembers(Client, inspect.isfunction) if not n.startswith("_")}
    calls = public - {"close"}
    assert calls <= set(dir(AsyncClient))
    for name in calls:
        ours = getattr(AsyncClient, name)
        assert inspect.iscoroutinefunction(ours), name
        assert inspect.signature(ours) == inspect.signature(getattr(Client, name)), name


def test_a_forked_process_gets_pools_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """A web server that builds its client before forking its workers: each worker's first request
    opens its own connection rather than writing into the parent's socket."""
    import os

    from sluice import client_transport

    transport = PooledTransport()
    parents = transport._manager("https://api.example.test/v1/jobs/x")
    assert transport._manager("https://api.example.test/v1/jobs/y") is parents
    child_pid = os.getpid() + 1
    monkeypatch.setattr(client_transport.os, "getpid", lambda: child_pid)  # now "the child"
    child = transport._manager("https://api.example.test/v1/jobs/x")
    assert child is not parents and transport._manager("https://api.example.test/v1/jobs/y") is child
