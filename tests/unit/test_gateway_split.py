"""Issue 27: one function per kind of caller. Each functions/<name>/app.py refuses every event shape
but its own caller's (403 WRONG_FUNCTION) before any adapter is built, so nothing is read or written.

A caller its resource policy admits (a worker, for the internal function) can thus reach no other
entry: an API Gateway proxy event naming an operator, a firing, an admin call are all refused.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from sluice.core.schedules import FIRE_KEY
from sluice.entry.gateway import Gateway, is_admin_path, kind_of
from tests.loading import module_from_file
from tests.unit.test_gateway_fakes import LambdaContext
from tests.unit.test_gateway_handler import Fakes, event
from tests.unit.test_gateway_handler import fakes as fakes  # the fixture

FUNCTIONS = Path(__file__).parents[2] / "functions"
OPERATOR = "arn:aws:iam::123456789012:role/ops"
JOB = "01J0000000000000000000000A.emails.aaaaaaaaaaaaaaaaaaaaaaaaaa"


def proxy(method: str, path: str, body: Any = None, caller: str = OPERATOR) -> dict[str, Any]:
    ev = event("apigw_get_queue.json")
    ev.update(httpMethod=method, path=path, resource=path, body=None if body is None else json.dumps(body))
    ev["requestContext"] = {**ev["requestContext"], "httpMethod": method,
                            "identity": {**ev["requestContext"]["identity"], "userArn": caller}}
    return ev


SHAPES: dict[str, dict[str, Any]] = {
    "api: enqueue at priority 9, claiming an operator": proxy("POST", "/v1/queues/emails/jobs",
                                                              {"payload": 1, "priority": 9}),
    "api: cancel another's job": proxy("DELETE", f"/v1/jobs/{JOB}"),
    "api: read another's job": proxy("GET", f"/v1/jobs/{JOB}"),
    "operator: purge a dead-letter queue": proxy("DELETE", "/v1/admin/queues/emails/dlq"),
    "operator: pause a queue": proxy("POST", "/v1/admin/queues/emails/pause"),
    "operator: create a schedule": proxy("POST", "/v1/admin/queues/emails/schedules",
                                         {"name": "n", "expression": "rate(1 minute)", "payload": 1}),
    "internal: children of another's job": {
        "sluice_internal": "enqueue_children", "parent_id": JOB, "token": 1,
        "jobs": [{"queue": "emails", "payload": 1, "key": "k"}]},
    "internal: release": {"sluice_internal": "release", "continuation": JOB},
    "internal: load a worker's scripts": {"sluice_internal": "load_scripts",
                                          "scripts": {"lease.lua": "while true do end"}},
    "firing: at a time of one's choosing": {FIRE_KEY: "nightly", "queue": "emails",
                                            "scheduled_time": "2030-01-01T00:00:00Z"},
}
OWN = {"gateway": "api", "operator": "operator", "internal": "internal", "firings": "firing"}
NO_SHAPE = [{}, {"httpMethod": "GET"}, {"path": "/v1/admin/queues"}, [], "text", None,
            {"httpMethod": "GET", "path": "/v1/queues/emails"}]  # no requestContext: not API Gateway's


def load(name: str) -> ModuleType:
    return module_from_file(FUNCTIONS / name / "app.py", f"{name}_app_under_test")


@pytest.mark.parametrize("name", sorted(OWN))
def test_each_function_refuses_every_other_callers_shape_and_builds_nothing(name: str, fakes: Fakes) -> None:
    app = load(name)
    wrong = {label: ev for label, ev in SHAPES.items() if not label.startswith(OWN[name] + ":")}
    assert len(wrong) >= 5
    for label, ev in [*wrong.items(), *[(f"no shape {i}", e) for i, e in enumerate(NO_SHAPE)]]:
        response = app.handler(copy.deepcopy(ev), LambdaContext())
        assert response["statusCode"] == 403, (name, label, response)
        if "body" in response:  # a proxy event's answer: a problem document
            assert json.loads(response["body"])["code"] == "WRONG_FUNCTION", (name, label)
        else:
            assert response["error"]["code"] == "WRONG_FUNCTION", (name, label)
    assert fakes.builds == 0 and fakes.log.records == []  # no adapter built, nothing appended
    assert app.gateway.serves == frozenset({OWN[name]})


def test_the_operator_function_builds_its_routes_on_its_first_request(fakes: Fakes,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Cold start (issue 30, item 3): the operator's init builds no HTTP surface (its router, the admin
    routes, the jobs listing and the depth history): its first request does, and answers as before. The
    public function's first request is an enqueue: it keeps its routes built at init."""
    from sluice.entry import root as wiring

    def no_store(settings: Any = None) -> Any:
        raise AssertionError("a queue's stats need no jobs table: only a redrive writes it")

    monkeypatch.setenv("SLUICE_OPERATOR_PRINCIPALS", OPERATOR)
    monkeypatch.setattr(wiring, "store", no_store)
    wiring.settings.cache_clear()
    app = load("operator")
    assert app.gateway._http is None
    for path in ("/v1/admin/queues", "/v1/admin/queues/emails"):  # no DynamoDB client built for them
        response = app.handler(proxy("GET", path), LambdaContext())
        assert response["statusCode"] == 200, response
    assert app.gateway._http is not None
    assert load("gateway").gateway._http is not None


def test_the_public_function_still_serves_its_own_callers(fakes: Fakes) -> None:
    app = load("gateway")
    response = app.handler(event("apigw_enqueue.json"), LambdaContext())
    assert response["statusCode"] == 202 and len(fakes.log.records) == 1


@pytest.mark.parametrize("path", ["/v1/admin/queues/emails/pause", "/V1/ADMIN/queues/emails/pause",
                                  "//v1//admin/queues/emails/pause", "/v1/admin", "/v1/admin/"])
def test_an_admin_path_however_spelled_is_the_operators(path: str) -> None:
    assert is_admin_path(path)
    assert kind_of(proxy("POST", path)) == "operator"


def test_public_paths_are_not_admin_paths() -> None:
    for path in ("/v1/queues/admin/jobs", "/v1/jobs/x", "/v1/administrators", "/v1/openapi.json"):
        assert not is_admin_path(path), path


def test_the_in_process_gateway_still_serves_every_kind() -> None:
    """Tests and the chaos harness play the four functions with one object (Gateway(api))."""
    every = frozenset({"api", "operator", "internal", "firing"})
    assert Gateway(lambda: None).serves == every  # type: ignore[arg-type,return-value]


def test_the_deprecated_gateway_names_still_name_the_split_functions(monkeypatch: pytest.MonkeyPatch) -> None:
    """A deployment configured before the split (SLUICE_GATEWAY_FUNCTION_NAME/_ARN) keeps working."""
    from sluice.core.config import Settings

    old = "arn:aws:lambda:us-east-1:123456789012:function:old-gateway"
    monkeypatch.setenv("SLUICE_GATEWAY_FUNCTION_NAME", "old-gateway")
    monkeypatch.setenv("SLUICE_GATEWAY_FUNCTION_ARN", old)
    s = Settings()
    assert (s.internal_function_name, s.firings_function_arn) == ("old-gateway", old)
    monkeypatch.setenv("SLUICE_INTERNAL_FUNCTION_NAME", "sluice-internal")
    monkeypatch.setenv("SLUICE_FIRINGS_FUNCTION_ARN", old.replace("old-gateway", "sluice-firings"))
    s = Settings()
    assert (s.internal_function_name, s.firings_function_arn) == ("sluice-internal", old.replace(
        "old-gateway", "sluice-firings"))


@pytest.mark.parametrize("path", [
    "/v1/admin%2Fqueues/other/pause", "/v1/%61dmin/queues/other/pause", "/v1/./admin/queues/other/pause",
    "/v1/queues/../admin/queues/other/pause", "/v1/admin;x/queues/other/pause",
    "/V1/Admin/queues/other/pause"])
def test_no_spelling_of_an_admin_path_runs_an_operator_route_on_the_public_function(path: str,
                                                                                   fakes: Fakes) -> None:
    app, before = load("gateway"), dict(fakes.queue.configs)
    response = app.handler(proxy("POST", path), LambdaContext())
    assert response["statusCode"] in (403, 404), response
    assert json.loads(response["body"])["code"] in ("WRONG_FUNCTION", "NOT_FOUND"), response
    assert fakes.log.records == [] and fakes.queue.configs == before  # a 404 may read, it writes nothing
