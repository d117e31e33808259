"""The gateway's router answers as Powertools' resolver did (issue 30, item 3).

Each request, ordinary or hostile, goes through the gateway twice, on two fresh rigs: once as the
functions run it (``sluice.gateway.http.router``), once through the router's Powertools twin
(``sluice.gateway.http.openapi.twin``: the same route functions on an ``APIGatewayRestResolver`` with
validation on, as the gateway was until session 35). The two raw proxy answers must be equal,
byte for byte, and so must what each wrote.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from sluice.core import ids
from sluice.gateway.http import openapi
from tests.unit import test_gateway_admin as admin
from tests.unit import test_gateway_fakes as fakes

JOB = "/v1/queues/emails/jobs"
BATCH = "/v1/queues/emails/jobs/batch"
P1 = {"payload": 1}
KEY = "Idempotency-Key"
KEY_ID = ids.mint(1_700_000_000_000, "emails", fakes.KEY, b"\x01" * 10)


def _answer(twin: bool, make: Callable[[], Any], request: Callable[[Any], Any],
            monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """The raw answer of one fresh rig, and what it wrote (Kafka records, table items, queue writes)."""
    with monkeypatch.context() as m:
        m.setattr(ids.os, "urandom", lambda n: b"\x01" * n)  # the same job ids on both rigs
        m.setattr(fakes, "unpack", lambda response: response)
        m.setattr(admin, "unpack", lambda response: response)
        rig = make()
        routes = rig.gateway.http.router
        if twin:
            powertools = openapi.twin(routes)
            m.setattr(routes, "resolve", lambda event, context: openapi.resolve(
                powertools, routes, event, context, dict(routes.context)))
        answer = request(rig)
        wrote = (list(rig.log.records), sorted(rig.store.items),
                 list(getattr(rig.queue, "writes", [])))
    return answer, wrote


def _same(make: Callable[[], Any], request: Callable[[Any], Any], monkeypatch: pytest.MonkeyPatch) -> None:
    ours, wrote = _answer(False, make, request, monkeypatch)
    theirs, wrote_twin = _answer(True, make, request, monkeypatch)
    assert ours == theirs
    assert repr(wrote) == repr(wrote_twin)


def _public() -> fakes.Rig:
    return fakes.Rig(max_payload_bytes=4096)


def _event(method: str, path: str, body: Any = None, **kw: Any) -> dict[str, Any]:
    return fakes.event_for(method, path, body, **kw)


API: list[tuple[str, Callable[[fakes.Rig], Any]]] = [
    ("enqueue", lambda r: r.call("POST", JOB, {"payload": {"to": "a@b.c"}})),
    ("enqueue, options", lambda r: r.call("POST", JOB, {"payload": 1, "delay_seconds": 5, "priority": 9,
                                                       "max_attempts": 3})),
    ("enqueue, trailing slashes", lambda r: r.call("POST", JOB + "//", {"payload": 1})),
    ("enqueue, keyed", lambda r: r.call("POST", JOB, P1, headers={KEY: "k-1"})),
    ("enqueue, key in lower case", lambda r: r.call("POST", JOB, P1, headers={"idempotency-key": "k"})),
    ("enqueue, bad key", lambda r: r.call("POST", JOB, P1, headers={KEY: "é" * 3})),
    ("enqueue, long key", lambda r: r.call("POST", JOB, P1, headers={KEY: "k" * 129})),
    ("enqueue, traceparent", lambda r: r.call("POST", JOB, {"payload": 1}, headers={
        "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})),
    ("enqueue, bad traceparent", lambda r: r.call("POST", JOB, P1, headers={"traceparent": "x,y"})),
    ("enqueue, no payload", lambda r: r.call("POST", JOB, {"delay_s": 1})),
    ("enqueue, unknown field", lambda r: r.call("POST", JOB, {"payload": 1, "job_id": "x"})),
    ("enqueue, wrong types", lambda r: r.call("POST", JOB, {**P1, "delay_seconds": "soon", "priority": []})),
    ("enqueue, a list", lambda r: r.call("POST", JOB, raw='[{"payload": 1}]')),
    ("enqueue, empty list", lambda r: r.call("POST", JOB, raw="[]")),
    ("enqueue, a number", lambda r: r.call("POST", JOB, raw="1")),
    ("enqueue, null", lambda r: r.call("POST", JOB, raw="null")),
    ("enqueue, no body", lambda r: r.call("POST", JOB)),
    ("enqueue, base64", lambda r: r.call("POST", JOB, {"payload": 1}, b64=True)),
    ("enqueue, bad queue", lambda r: r.call("POST", "/v1/queues/bad%20name/jobs", {"payload": 1})),
    ("enqueue, queue with spaces", lambda r: r.call("POST", "/v1/queues/bad name/jobs", {"payload": 1})),
    ("enqueue, reserved queue", lambda r: r.call("POST", "/v1/queues/sluice-relay/jobs", {"payload": 1})),
    ("batch", lambda r: r.call("POST", BATCH, {"jobs": [P1, {"payload": 2, "delay_seconds": 3}]})),
    ("batch, two bad jobs", lambda r: r.call("POST", BATCH, {"jobs": [P1, {"x": 1}, P1,
                                                                      {"payload": 2, "priority": "high"}]})),
    ("batch, empty", lambda r: r.call("POST", BATCH, {"jobs": []})),
    ("batch, 101", lambda r: r.call("POST", BATCH, {"jobs": [{"payload": i} for i in range(101)]})),
    ("batch, not a list", lambda r: r.call("POST", BATCH, {"jobs": {"payload": 1}})),
    ("get job, unknown", lambda r: r.call("GET", f"/v1/jobs/{KEY_ID}")),
    ("get job, malformed id", lambda r: r.call("GET", "/v1/jobs/not-an-id")),
    ("get job, enqueued", lambda r: (r.call("POST", JOB, P1), r.call("GET", f"/v1/jobs/{KEY_ID}"))),
    ("cancel job", lambda r: (r.call("POST", JOB, P1), r.call("DELETE", f"/v1/jobs/{KEY_ID}/"))),
    ("cancel job, malformed id", lambda r: r.call("DELETE", "/v1/jobs/1")),
    ("get queue", lambda r: r.call("GET", "/v1/queues/emails")),
    ("get queue, trailing slash", lambda r: r.call("GET", "/v1/queues/emails/")),
    ("get queue, bad name", lambda r: r.call("GET", "/v1/queues/UPPER$")),
    ("get queue, unsafe characters", lambda r: r.call("GET", "/v1/queues/a<b>[c]{d}|e^f")),
    ("no route", lambda r: r.call("GET", "/v1/nothing")),
    ("no route, root", lambda r: r.call("GET", "/")),
    ("wrong method", lambda r: r.call("PUT", JOB, {"payload": 1})),
    ("method in lower case", lambda r: r.gateway({**_event("GET", "/v1/queues/emails"), "httpMethod": "get"},
                                                 fakes.LambdaContext())),
    ("options", lambda r: r.call("OPTIONS", JOB)),
    ("openapi", lambda r: r.call("GET", "/v1/openapi.json")),
    ("openapi, trailing slash", lambda r: r.call("GET", "/v1/openapi.json/")),
    ("two keys in multiValueHeaders", lambda r: r.gateway(_two_keys(), fakes.LambdaContext())),
    ("headers only, no multiValueHeaders", lambda r: r.gateway(
        {**_event("POST", JOB, P1, headers={KEY: "k-2"}), "multiValueHeaders": None},
        fakes.LambdaContext())),
]


def _two_keys() -> dict[str, Any]:
    event = _event("POST", JOB, P1, headers={KEY: "a"})
    event["multiValueHeaders"]["Idempotency-Key"] = ["a", "b"]
    return event


@pytest.mark.parametrize("request_", [r for _, r in API], ids=[n for n, _ in API])
def test_the_public_routes_answer_as_powertools_did(request_: Callable[[fakes.Rig], Any],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    _same(_public, request_, monkeypatch)


Q = "/v1/admin/queues/emails"
ADMIN: list[tuple[str, Callable[[admin.Rig], Any]]] = [
    ("queues", lambda r: r.call("GET", "/v1/admin/queues")),
    ("queue", lambda r: r.call("GET", Q)),
    ("queue, bad name", lambda r: r.call("GET", "/v1/admin/queues/Bad!")),
    ("not an operator", lambda r: r.call("GET", Q, caller=admin.WEB)),
    ("pause", lambda r: r.call("POST", Q + "/pause")),
    ("rate", lambda r: r.call("PUT", Q + "/rate", {"per_second": 5, "burst": 10})),
    ("rate, strict types", lambda r: r.call("PUT", Q + "/rate", {"per_second": "5"})),
    ("rate, out of range", lambda r: r.call("PUT", Q + "/rate", {"per_second": -1, "burst": 10**9})),
    ("rate, no body", lambda r: r.call("PUT", Q + "/rate")),
    ("rate, no body, text/plain", lambda r: r.call("PUT", Q + "/rate", headers={
        "Content-Type": "text/plain"})),
    ("rate, no body, multipart", lambda r: r.call("PUT", Q + "/rate", headers={
        "Content-Type": "multipart/form-data; boundary=b"})),
    ("rate, no body, multipart, quoted", lambda r: r.call("PUT", Q + "/rate", headers={
        "Content-Type": 'multipart/form-data; charset=x; boundary="b"'})),
    ("rate, no body, multipart, no boundary", lambda r: r.call("PUT", Q + "/rate", headers={
        "Content-Type": "multipart/form-data; boundary="})),
    ("rate, no body, form", lambda r: r.call("PUT", Q + "/rate", headers={
        "Content-Type": "application/x-www-form-urlencoded"})),
    ("rate, no body, JSON in capitals", lambda r: r.call("PUT", Q + "/rate", headers={
        "Content-Type": "APPLICATION/JSON"})),
    ("rate, a list body", lambda r: r.call("PUT", Q + "/rate", raw='[{"per_second": 2}]')),
    ("caps", lambda r: r.call("PUT", Q + "/caps", {"max_dead": 5})),
    ("watermarks, missing high", lambda r: r.call("PUT", Q + "/watermarks", {"low": 5})),
    ("sensitive", lambda r: r.call("PUT", Q + "/sensitive", {"fields": ["/card/number", "password"]})),
    ("dlq", lambda r: r.call("GET", Q + "/dlq", query={"limit": "5"})),
    ("dlq, limit 0", lambda r: r.call("GET", Q + "/dlq", query={"limit": "0"})),
    ("dlq, limit not a number", lambda r: r.call("GET", Q + "/dlq", query={"limit": "ten"})),
    ("jobs", lambda r: r.call("GET", Q + "/jobs", query={"state": "ready", "limit": "3"})),
    ("jobs, bad state", lambda r: r.call("GET", Q + "/jobs", query={"state": "gone"})),
    ("jobs, bad cursor and prefix", lambda r: r.call("GET", Q + "/jobs",
                                                     query={"cursor": "!!", "prefix": "?"})),
    ("jobs, comma in a value", lambda r: r.call("GET", Q + "/jobs", query={"state": "ready,dead"})),
    ("jobs, repeated limit", lambda r: r.gateway(_admin_event(
        {"limit": "2"}, multiValueQueryStringParameters={"limit": ["2", "3"]}), fakes.LambdaContext())),
    ("jobs, a comma, single values only", lambda r: r.gateway(_admin_event(
        {"state": "ready,dead"}, multiValueQueryStringParameters=None), fakes.LambdaContext())),
    ("jobs, a comma in a prefix, single values only", lambda r: r.gateway(_admin_event(
        {"prefix": "a,b", "limit": "1,2"}, multiValueQueryStringParameters=None), fakes.LambdaContext())),
    ("redrive, nothing named", lambda r: r.call("POST", Q + "/dlq/redrive", {})),
    ("redrive, all", lambda r: r.call("POST", Q + "/dlq/redrive", {"all": True})),
    ("purge", lambda r: r.call("DELETE", Q + "/dlq")),
    ("timeline, malformed id", lambda r: r.call("GET", Q + "/jobs/x%2Fy/timeline")),
    ("schedules, no store", lambda r: r.call("GET", Q + "/schedules")),
    ("admin, wrong method", lambda r: r.call("DELETE", Q + "/rate")),
    ("admin, no route", lambda r: r.call("GET", Q + "/nothing")),
]


def _admin_event(query: dict[str, str], **edit: Any) -> dict[str, Any]:
    """An operator's ``GET .../jobs`` event as the admin rig makes it, with ``edit`` applied."""
    rig = admin.Rig()
    event: dict[str, Any] = {}

    def capture(e: dict[str, Any], _context: Any) -> dict[str, Any]:
        event.update(e)
        return {}

    rig.gateway = capture  # type: ignore[assignment]
    rig.call("GET", Q + "/jobs", query=query)
    return {**event, **edit}


@pytest.mark.parametrize("request_", [r for _, r in ADMIN], ids=[n for n, _ in ADMIN])
def test_the_operator_routes_answer_as_powertools_did(request_: Callable[[admin.Rig], Any],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    _same(admin.Rig, request_, monkeypatch)


def test_the_twin_is_not_the_router(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison compares two things: the twin's answers come from Powertools' resolver."""
    seen: list[str] = []
    from aws_lambda_powertools.event_handler import APIGatewayRestResolver

    resolve = APIGatewayRestResolver.resolve
    monkeypatch.setattr(APIGatewayRestResolver, "resolve",
                        lambda self, e, c: seen.append(e["path"]) or resolve(self, e, c))
    _same(_public, lambda r: r.call("GET", "/v1/queues/emails"), monkeypatch)
    assert seen == ["/v1/queues/emails"]
    assert json.loads(_answer(False, _public, lambda r: r.call("GET", "/v1/queues/emails"),
                              monkeypatch)[0]["body"])["queue"] == "emails"
