"""The enqueue routes' direct path answers exactly as the Powertools resolver would.

``Gateway`` serves plain enqueue requests without the resolver (speed; docs/api.md,
Performance) and hands everything else to it. Each case here runs through two
gateways over identical fakes, one with the direct path and one without, and
compares status, headers and body.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from sluice.errors import IdempotencyConflict
from tests.unit.test_gateway_fakes import Rig, event_for, unavailable, unpack

JOBS = "/v1/queues/emails/jobs"
BATCH = f"{JOBS}/batch"


def rigs() -> tuple[Rig, Rig]:
    pair = Rig(direct_enqueue=True), Rig(direct_enqueue=False)
    for rig in pair:
        counter = itertools.count()
        rig.api.new_id = lambda _now, c=counter: f"job-{next(c)}"  # the same ids on both sides
    return pair


def conflict() -> None:
    raise IdempotencyConflict("the key was used with another request")


def both(event: dict[str, Any], setup: Any = None) -> tuple[Any, Any]:
    direct, resolver = rigs()
    out = []
    for rig in (direct, resolver):
        if setup is not None:
            setup(rig)
        out.append(unpack(rig.gateway(event, None)))
    return out[0], out[1]


def with_headers(event: dict[str, Any], multi: dict[str, list[Any]] | None,
                 single: dict[str, Any]) -> dict[str, Any]:
    base = {k: v for k, v in event["headers"].items() if k.lower() != "idempotency-key"}
    event["headers"] = {**base, **single}
    event["multiValueHeaders"] = None if multi is None else {**{k: [v] for k, v in base.items()}, **multi}
    return event


@pytest.mark.parametrize("path,body", [
    (JOBS, {"payload": {"to": "ada"}, "priority": 7, "delay_seconds": 60}),
    (JOBS, {"payload": None}),
    (BATCH, {"jobs": [{"payload": i, "priority": i} for i in range(5)]}),
])
def test_plain_requests_take_the_direct_path_and_answer_the_same(path: str, body: Any) -> None:
    direct, resolver = rigs()
    direct.gateway.resolver.resolve = lambda *_a: pytest.fail("the resolver answered a plain enqueue")
    a = unpack(direct.gateway(event_for("POST", path, body), None))
    b = unpack(resolver.gateway(event_for("POST", path, body), None))
    assert a == b and a[0] == 202
    assert direct.log.records == resolver.log.records


def test_keys_replays_and_conflicts_answer_the_same() -> None:
    direct, resolver = rigs()
    key = {"Idempotency-Key": "order-1"}
    for body in ({"payload": 1}, {"payload": 1}, {"payload": 2}):
        a = unpack(direct.gateway(event_for("POST", JOBS, body, headers=key), None))
        b = unpack(resolver.gateway(event_for("POST", JOBS, body, headers=key), None))
        assert a == b
    assert [c for c, _, _ in [a]] == [422]
    assert direct.idem.keys_seen == resolver.idem.keys_seen  # scoped to the same caller


@pytest.mark.parametrize("multi,single", [
    ({"Idempotency-Key": ["a,b"]}, {"Idempotency-Key": "a,b"}),
    ({"Idempotency-Key": [" a"]}, {"Idempotency-Key": " a"}),
    ({"Idempotency-Key": [""]}, {"Idempotency-Key": ""}),
    ({"Idempotency-Key": ["x" * 128]}, {"Idempotency-Key": "x" * 128}),
    ({"Idempotency-Key": ["x" * 129]}, {"Idempotency-Key": "x" * 129}),
    ({"Idempotency-Key": ["é"]}, {"Idempotency-Key": "é"}),
    ({"Idempotency-Key": ["a", "b"]}, {"Idempotency-Key": "b"}),
    ({"Idempotency-Key": ["a"], "idempotency-key": ["b"]}, {"Idempotency-Key": "a"}),
    ({"Idempotency-Key": []}, {}),
    (None, {"Idempotency-Key": "only-single"}),
    (None, {"Idempotency-Key": "a", "IDEMPOTENCY-KEY": "b"}),
])
def test_odd_idempotency_headers_answer_the_same(multi: dict[str, list[Any]] | None,
                                                 single: dict[str, Any]) -> None:
    a, b = both(with_headers(event_for("POST", JOBS, {"payload": 1}), multi, single))
    assert a == b


@pytest.mark.parametrize("path", [f"{JOBS}/", "/v1/queues/Emails/jobs", "/v1/queues/em%61ils/jobs",
                                  f"{JOBS}\n", "/v1/queues/" + "q" * 65 + "/jobs", f"{BATCH}/"])
def test_odd_paths_answer_the_same(path: str) -> None:
    body = {"jobs": [{"payload": 1}]} if "batch" in path else {"payload": 1}
    a, b = both(event_for("POST", path, body))
    assert a == b


@pytest.mark.parametrize("path,body", [
    (JOBS, {"payload": 1, "priority": 10}), (JOBS, {"payload": 1, "job_id": "x"}), (JOBS, {}),
    (JOBS, {"payload": 1, "delay_seconds": True}), (JOBS, [1]), (JOBS, "text"),
    (BATCH, {"jobs": []}), (BATCH, {"jobs": [{"payload": 1}, {"payload": 2, "max_attempts": 0}]}),
    (BATCH, {"payload": 1}),
])
def test_invalid_bodies_answer_the_same(path: str, body: Any) -> None:
    a, b = both(event_for("POST", path, body))
    assert a == b and a[0] == 400


@pytest.mark.parametrize("setup,status", [
    (lambda rig: setattr(rig.log, "fail", unavailable()), 503),
    (lambda rig: setattr(rig.log, "fail", RuntimeError("secret connection string")), 500),
    (lambda rig: setattr(rig.idem, "run", lambda *a, **k: conflict()), 422),
])
def test_use_case_errors_render_the_same(setup: Any, status: int) -> None:
    a, b = both(event_for("POST", JOBS, {"payload": 1}, headers={"Idempotency-Key": "k"}), setup)
    assert a == b and a[0] == status


def test_payload_over_the_limit_answers_the_same() -> None:
    a, b = both(event_for("POST", BATCH, {"jobs": [{"payload": 1}, {"payload": "x" * 300_000}]}))
    assert a == b and a[0] == 413
