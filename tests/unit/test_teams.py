"""Teams (issue 27): the team map, the registrar, and the relay dispatching only by the map.

A hostile team's registration attempts are refused here with fakes (the registrar's logic); the
same attempts against the local stack's registrar function are in tests/stack/test_hostile_team.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sluice.backends.aws.dispatch import LambdaDispatcher
from sluice.core import bus as ev
from sluice.core.errors import (
    BackendUnavailable,
    InvalidInput,
    RegistrationRefused,
    RouteConflict,
    RouteRefused,
)
from sluice.core.routes import (
    CachedRouteLookup,
    Route,
    RouteCache,
    TeamMap,
    TeamMapCache,
    pattern_within,
    team_of_function,
    team_patterns,
)
from sluice.entry import registrar as registrar_entry
from sluice.entry import routes_resource
from sluice.registrar.register import FAILED_PREFIX, Registrar, response_url_ok
from sluice.relay.config import RelayConfig
from sluice.relay.dispatch import Dispatch
from sluice.relay.state import QueueState, RelayReport
from sluice_dev.fakes import FakeDescriber, FakeRouteStore, FakeTeamMap

SCHEMA = {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]}
MEDIA, EVIL = "st-worker-media", "st-worker-evil"
CFN_URL = "https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/x?sig=1"


# -- the team map ---------------------------------------------------------------------------------

def test_a_map_entry_is_queue_names_and_prefixes_and_never_sluice_queues() -> None:
    assert team_patterns("thumbs-*, avatars,avatars") == ("avatars", "thumbs-*")
    for bad in ("sluice-ops", "Thumbs", "a.b", "*", "s*", "sluic*", "sluice*"):
        with pytest.raises(InvalidInput):
            team_patterns(bad)


def test_a_pattern_is_within_an_entry_only_if_every_queue_it_routes_is() -> None:
    assert pattern_within("thumbs-big", "thumbs-*") and pattern_within("thumbs-big-*", "thumbs-*")
    assert pattern_within("avatars", "avatars")
    assert not pattern_within("thumbs-*", "thumbs-big") and not pattern_within("thumb*", "thumbs-*")
    assert not pattern_within("avatars-x", "avatars")
    m = TeamMap({"media": ("avatars", "thumbs-*")})
    assert m.allows("media", "thumbs-1") and not m.allows("media", "payments")
    assert not m.allows("evil", "avatars")


def test_a_team_function_is_named_stack_worker_team() -> None:
    assert team_of_function(MEDIA, "st") == "media"
    arn = "arn:aws:lambda:us-east-1:123456789012:function:st-worker-media:live"
    assert team_of_function(arn, "st") == "media"
    assert team_of_function("st-worker", "st") is None and team_of_function("other-worker-x", "st") is None
    assert team_of_function(MEDIA, "") is None


# -- the relay follows a route only where the map agrees -------------------------------------------

class Routes:
    def __init__(self, routes: list[Route]) -> None:
        self.routes = routes

    def list_routes(self) -> list[Route]:
        return list(self.routes)


def lookup(routes: list[Route], teams: FakeTeamMap | None) -> CachedRouteLookup:
    cache = RouteCache(Routes(routes), ttl_s=30, clock=lambda: 0.0)
    return CachedRouteLookup(cache, "st-worker", stack_name="st",
                             teams=None if teams is None else TeamMapCache(teams, clock=lambda: 0.0))


def test_the_relay_follows_a_route_the_map_gives_its_team() -> None:
    f = lookup([Route("avatars", MEDIA, "media"), Route("echo", "st-worker", "sluice")],
               FakeTeamMap({"media": "avatars"}))
    assert f("avatars") == MEDIA and f("echo") == "st-worker" and f("other") == "st-worker"


@pytest.mark.parametrize(("route", "why"), [
    # evil wrote itself a route to another team's queue (around the registrar)
    (Route("payments", EVIL, "evil"), "does not give queue 'payments' to team 'evil'"),
    # a route claiming the owner the map names, to evil's function
    (Route("payments", EVIL, "pay"), "owner 'pay' is not the function's team 'evil'"),
    # a route to a function outside the naming convention
    (Route("payments", "some-other-function", "pay"), "neither the default worker"),
])
def test_the_relay_refuses_a_route_the_map_does_not_back(route: Route, why: str) -> None:
    f = lookup([route], FakeTeamMap({"pay": "payments", "evil": "evil-*"}))
    with pytest.raises(RouteRefused, match=why):
        f("payments")


def test_without_a_team_map_no_route_to_a_team_function_is_followed() -> None:
    with pytest.raises(RouteRefused, match="no team map"):
        lookup([Route("avatars", MEDIA, "media")], None)("avatars")


def test_an_unreadable_map_is_a_failed_dispatch_then_the_last_map_is_used() -> None:
    teams = FakeTeamMap({"media": "avatars"})
    teams.broken = True
    f = lookup([Route("avatars", MEDIA, "media")], teams)
    with pytest.raises(BackendUnavailable, match="team map"):
        f("avatars")
    teams.broken = False
    assert f.teams is not None
    f.teams.forget()
    assert f("avatars") == MEDIA
    teams.broken = True
    f.teams.forget()
    assert f("avatars") == MEDIA  # the last map read


def test_the_relay_emits_an_incident_and_invokes_nothing_for_a_refused_route() -> None:
    invoked: list[dict[str, Any]] = []

    class Client:
        def invoke(self, **kw: Any) -> dict[str, Any]:
            invoked.append(kw)
            return {"StatusCode": 202}

    f = lookup([Route("payments", EVIL, "evil")], FakeTeamMap({"pay": "payments"}))
    bus, seen = ev.EventBus(), []
    bus.subscribe(seen.append, ev.Incident)
    d = Dispatch(LambdaDispatcher(Client(), "st-worker", function_for=f), RelayConfig(), report=RelayReport(),
                 events=bus)
    d._start_workers("payments", QueueState(), 2, 0.0)
    assert invoked == []
    assert [type(e) for e in seen] == [ev.DispatchRefused]
    assert seen[0].queue == "payments" and seen[0].function == EVIL  # type: ignore[attr-defined]


# -- the registrar --------------------------------------------------------------------------------

def registrar(store: FakeRouteStore, answers: dict[str, Any] | None = None,
              queues: str = "avatars,thumbs-*") -> Registrar:
    described = FakeDescriber(answers or {MEDIA: {"queues": ["avatars", "thumbs-big"],
                                                  "schemas": {"avatars": SCHEMA}}})
    return Registrar.of("st", "media", queues, store, described)


def cfn(kind: str = "Create", **props: Any) -> dict[str, Any]:
    e: dict[str, Any] = {"RequestType": kind, "ResponseURL": CFN_URL, "RequestId": "r1",
                         "StackId": "arn:aws:cloudformation:us-east-1:1:stack/media/1",
                         "LogicalResourceId": "TeamRoutes", "ResourceType": "Custom::SluiceRoutes",
                         "ResourceProperties": {"ServiceToken": "arn:aws:lambda:x", **props}}
    if kind != "Create":
        e["PhysicalResourceId"] = "sluice-registrar:media:st-worker-media"
    return e


def answer(reg: Registrar, event: dict[str, Any]) -> dict[str, Any]:
    sent: list[tuple[str, bytes]] = []
    body = registrar_entry.respond(event, reg, lambda url, data: sent.append((url, data)))
    assert sent == [(CFN_URL, json.dumps(body).encode())]
    return body


def test_the_registrar_registers_its_teams_queues_to_its_teams_function() -> None:
    store = FakeRouteStore()
    body = answer(registrar(store), cfn(Version="3"))
    assert body["Status"] == "SUCCESS", body
    assert {(r.pattern, r.function, r.owner) for r in store.routes.values()} == {
        ("avatars", MEDIA, "media"), ("thumbs-big", MEDIA, "media")}
    assert store.routes["avatars"].schemas == {"avatars": SCHEMA}


def test_the_registrar_uses_its_configuration_whatever_the_event_claims() -> None:
    """A forged StackId and ServiceToken change nothing: the function and owner are the registrar's."""
    store = FakeRouteStore()
    e = cfn()
    e["StackId"] = "arn:aws:cloudformation:us-east-1:1:stack/payments-worker/9"
    e["ResourceProperties"]["ServiceToken"] = "arn:aws:lambda:us-east-1:1:function:st-registrar-pay"
    assert answer(registrar(store), e)["Status"] == "SUCCESS"
    assert {r.owner for r in store.routes.values()} == {"media"}
    assert {r.function for r in store.routes.values()} == {MEDIA}


@pytest.mark.parametrize(("props", "why"), [
    ({"Owner": "pay"}, "names owner 'pay'"),
    ({"FunctionName": "st-worker-pay"}, "names 'st-worker-pay'"),
    ({"Function": "arn:aws:lambda:us-east-1:1:function:st-worker-pay"}, "to st-worker-media only"),
    ({"Patterns": ["pay*"]}, "'pay*' is not given to team 'media'"),
    ({"Patterns": ["thumbs*"]}, "'thumbs*' is not given to team 'media'"),  # wider than thumbs-*
    ({"Schedules": [{"queue": "avatars"}]}, "operator API"),
])
def test_the_registrar_refuses_a_forged_or_outside_request_and_writes_nothing(props: dict[str, Any],
                                                                              why: str) -> None:
    store = FakeRouteStore()
    body = answer(registrar(store), cfn(**props))
    assert body["Status"] == "FAILED" and body["Reason"].startswith("RegistrationRefused")
    assert body["PhysicalResourceId"].startswith(FAILED_PREFIX)
    assert why in body["Reason"], body
    assert store.writes == 0 and store.routes == {}


def test_a_worker_that_handles_another_teams_queue_is_refused_whole() -> None:
    store = FakeRouteStore()
    reg = registrar(store, {MEDIA: {"queues": ["avatars", "payments"], "schemas": {}}})
    body = answer(reg, cfn())
    assert body["Status"] == "FAILED" and "'payments' is not given to team 'media'" in body["Reason"]
    assert store.writes == 0 and store.routes == {}


def test_a_queue_another_team_routes_is_a_conflict_even_inside_the_map() -> None:
    """Two map entries overlapping (an infra mistake) still cannot take a live route."""
    store = FakeRouteStore([Route("avatars", "st-worker-pay", "pay")])
    body = answer(registrar(store), cfn())
    assert body["Status"] == "FAILED" and RouteConflict.__name__ in body["Reason"]
    assert store.writes == 0


def test_a_delete_removes_only_its_teams_routes_and_a_failed_create_nothing() -> None:
    store = FakeRouteStore([Route("payments", "st-worker-pay", "pay")])
    reg = registrar(store)
    assert answer(reg, cfn())["Status"] == "SUCCESS"
    gone = cfn("Delete", Owner="pay")  # a forged owner on a delete changes nothing either
    assert answer(reg, gone)["Data"]["Removed"] == "avatars,thumbs-big"
    assert set(store.routes) == {"payments"}
    failed = {**cfn("Delete"), "PhysicalResourceId": f"{FAILED_PREFIX}r0"}
    assert answer(reg, failed)["Status"] == "SUCCESS" and set(store.routes) == {"payments"}


def test_the_registrar_puts_its_answer_only_to_cloudformation() -> None:
    assert response_url_ok(CFN_URL, None)
    for url in ("http://169.254.169.254/latest", "https://evil.example/x", "http://x.amazonaws.com/y"):
        assert not response_url_ok(url, None)
    assert response_url_ok("http://127.0.0.1:5000/b/k", "http://127.0.0.1:5000")
    store, sent = FakeRouteStore(), []
    e = {**cfn(), "ResponseURL": "http://169.254.169.254/latest/meta-data"}
    body = registrar_entry.respond(e, registrar(store), lambda u, d: sent.append(u))
    assert body["Status"] == "FAILED" and sent == [] and store.writes == 0


def test_a_team_worker_refuses_to_register_its_own_routes() -> None:
    """A team stack still naming its worker as ServiceToken: Create fails, Delete removes nothing."""
    import sluice

    app = sluice.Worker()
    app.register("payments", lambda job, ctx: None)
    sent: list[bytes] = []
    store = routes_resource.NoRoutesTable()
    e = {**cfn(), "ResponseURL": CFN_URL}
    body = routes_resource.respond(e, EVIL, app, store, lambda u, d: sent.append(d))  # type: ignore[arg-type]
    assert body["Status"] == "FAILED" and "registrar" in body["Reason"]
    body = routes_resource.respond({**cfn("Delete")}, EVIL, app, store,  # type: ignore[arg-type]
                                   lambda u, d: sent.append(d))
    assert body["Status"] == "SUCCESS"


def test_a_registrar_refuses_a_team_name_that_is_not_one() -> None:
    with pytest.raises(InvalidInput):
        Registrar.of("st", "Media!", "avatars", FakeRouteStore(), FakeDescriber({}))
    with pytest.raises(RegistrationRefused):
        registrar(FakeRouteStore()).refuse_claims({"Owner": "x"})


def test_a_team_worker_describes_its_handlers_to_its_registrar() -> None:
    import sluice
    from sluice.backends.aws.team_map import DESCRIBE_EVENT
    from sluice.entry import worker

    app = sluice.Worker()
    app.register("avatars", lambda job, ctx: None)
    app.schemas = lambda: {"avatars": SCHEMA}  # type: ignore[attr-defined]
    assert worker.DESCRIBE == DESCRIBE_EVENT
    answer = worker.describe(app)
    assert {k: answer[k] for k in ("queues", "schemas", "schedules")} == {
        "queues": ["avatars"], "schemas": {"avatars": SCHEMA}, "schedules": []}
    assert answer["digest"].startswith("sha256-")  # issue 31: the registration's inputs, hashed


def test_the_registrar_function_answers_custom_resources_only() -> None:
    assert registrar_entry.handler({"queues": ["x"]}, None)["Status"] == "FAILED"
