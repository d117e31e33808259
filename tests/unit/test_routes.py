"""Routes (issue 15): the pure part (sluice.core.routes) and the relay's routed dispatch."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from sluice.backends.aws.dispatch import LambdaDispatcher
from sluice.core.errors import BackendUnavailable, InvalidInput
from sluice.core.models import DispatchEvent
from sluice.core.routes import (
    CachedRouteLookup,
    InvalidSchema,
    Route,
    RouteCache,
    RouteConflict,
    RouteTable,
    TeamMapCache,
    app_schemas,
    check_new,
    check_schema,
    routes_for,
)
from sluice_dev.fakes import FakeTeamMap

THUMB_SCHEMA = {"type": "object", "properties": {"url": {"type": "string"}, "width": {"type": "integer",
                                                                                   "minimum": 1}},
                "required": ["url", "width"]}


def r(pattern: str, function: str = "f", owner: str = "a", **kw: Any) -> Route:
    return Route(pattern, function, owner, **kw)


def test_exact_name_wins_then_the_longest_prefix_then_none() -> None:
    table = RouteTable([r("thumbs-*", "short"), r("thumbs-big-*", "long"), r("thumbs-big-x", "exact"),
                        r("echo", "plain")])
    assert table.resolve("thumbs-big-x").function == "exact"  # type: ignore[union-attr]
    assert table.resolve("thumbs-big-y").function == "long"  # type: ignore[union-attr]
    assert table.resolve("thumbs-small").function == "short"  # type: ignore[union-attr]
    assert table.resolve("echo").function == "plain"  # type: ignore[union-attr]
    assert table.resolve("echo2") is None and table.resolve("thumbs") is None


def test_reserved_queues_never_resolve_even_under_a_wide_prefix() -> None:
    assert RouteTable([r("s*")]).resolve("sluice-relay") is None
    with pytest.raises(InvalidInput, match="reserved"):
        r("sluice-relay")
    with pytest.raises(InvalidInput, match="reserved"):
        r("sluice-*")


@pytest.mark.parametrize("bad", ["", "*", "Thumbs", "a b", "thumbs-**", "-x", "x*y", 5])
def test_a_bad_pattern_is_refused(bad: Any) -> None:
    with pytest.raises(InvalidInput):
        r(bad)


def test_two_teams_claiming_one_queue_is_refused_with_the_owner_named() -> None:
    existing = [r("thumbnails", "team-a-worker", "team-a"), r("mail-*", "team-a-worker", "team-a")]
    for claim in ("thumbnails", "thumb*", "mail-out", "mail-*", "m*"):
        with pytest.raises(RouteConflict, match="team-a"):
            check_new(existing, [r(claim, "team-b-worker", "team-b")], owner="team-b")
    # Same owner re-registering, and a queue nobody else routes, are fine.
    assert check_new(existing, [r("thumbnails", "team-a-worker", "team-a")], owner="team-a") == []
    assert check_new(existing, [r("video", "team-b-worker", "team-b")], owner="team-b") == []


def test_a_registration_replaces_what_the_function_registered_before() -> None:
    existing = [r("old", "fa", "a"), r("kept", "fa", "a"), r("other-fn", "fb", "a")]
    stale = check_new(existing, [r("kept", "fa", "a"), r("new", "fa", "a")], owner="a",
                      replaces_function="fa")
    assert [s.pattern for s in stale] == ["old"]


def test_a_registration_cannot_write_another_owners_routes_or_name_a_pattern_twice() -> None:
    with pytest.raises(InvalidInput, match="owned by"):
        check_new([], [r("q", owner="b")], owner="a")
    with pytest.raises(InvalidInput, match="twice"):
        check_new([], [r("q"), r("q")], owner="a")


@pytest.mark.parametrize("schema", [
    {"type": "strin"}, {"required": "url"}, {"properties": {"a": {"minimum": "one"}}}, {"minLength": -1},
    {"type": ["string", 5]}, [1, 2], "object",
])
def test_a_schema_that_is_not_valid_json_schema_is_refused(schema: Any) -> None:
    with pytest.raises(InvalidSchema, match="thumbnails"):
        check_schema("thumbnails", schema)
    with pytest.raises(InvalidSchema):
        r("thumbnails", schemas={"thumbnails": schema})


def test_a_valid_schema_passes_and_must_belong_to_a_queue_the_route_covers() -> None:
    assert check_schema("thumbnails", THUMB_SCHEMA) is THUMB_SCHEMA
    assert r("thumbs-*", schemas={"thumbs-big": THUMB_SCHEMA}).schemas["thumbs-big"] == THUMB_SCHEMA
    with pytest.raises(InvalidInput, match="does not route"):
        r("thumbs-*", schemas={"video": THUMB_SCHEMA})


def test_routes_for_a_handlers_module_one_per_queue_and_patterns_cover_theirs() -> None:
    routes = routes_for("fn", "team", ["thumbs-big", "thumbs-small", "video"], {"thumbs-big": THUMB_SCHEMA},
                        patterns=["thumbs-*"])
    by = {x.pattern: x for x in routes}
    assert set(by) == {"video", "thumbs-*"}
    assert by["thumbs-*"].schemas == {"thumbs-big": THUMB_SCHEMA} and by["video"].schemas == {}
    with pytest.raises(InvalidInput, match="does not handle"):
        routes_for("fn", "team", ["video"], {"audio": THUMB_SCHEMA})


def test_app_schemas_uses_the_worker_contract_when_present() -> None:
    class Typed:
        def schemas(self) -> dict[str, dict[str, Any]]:
            return {"thumbnails": THUMB_SCHEMA}

    assert app_schemas(Typed()) == {"thumbnails": THUMB_SCHEMA}
    assert app_schemas(object()) == {}


class Source:
    def __init__(self, routes: list[Route]) -> None:
        self.routes, self.reads, self.fail = routes, 0, False

    def list_routes(self) -> list[Route]:
        self.reads += 1
        if self.fail:
            raise BackendUnavailable("down")
        return list(self.routes)


def test_the_cache_reads_once_per_ttl_and_picks_up_a_new_route_after_it() -> None:
    now = [0.0]
    source = Source([r("echo", "default-fn")])
    cache = RouteCache(source, ttl_s=30, clock=lambda: now[0])
    assert cache.known() and cache.resolve("thumbnails") is None
    source.routes = [r("echo", "default-fn"), r("thumbnails", "team-fn")]
    now[0] = 29.0
    assert cache.resolve("thumbnails") is None and source.reads == 1
    now[0] = 30.0
    assert cache.resolve("thumbnails").function == "team-fn"  # type: ignore[union-attr]
    assert source.reads == 2


TEAM_FN = "st-worker-media"  # a team's worker: <stack>-worker-<team> (infra/team.yaml)


def team_lookup(source: Source, clock: Any, default: str = "default-fn") -> CachedRouteLookup:
    teams = TeamMapCache(FakeTeamMap({"media": "thumbnails"}), ttl_s=60, clock=clock)
    return CachedRouteLookup(RouteCache(source, ttl_s=30, clock=clock), default, teams=teams, stack_name="st")


def test_the_dispatch_lookup_keeps_the_last_table_when_the_registry_is_down() -> None:
    now = [0.0]
    source = Source([r("thumbnails", TEAM_FN, "media")])
    lookup = team_lookup(source, lambda: now[0])
    assert lookup("thumbnails") == TEAM_FN and lookup("echo") == "default-fn"
    source.fail, now[0] = True, 31.0
    assert lookup("thumbnails") == TEAM_FN  # the last table read: the relay keeps dispatching


def test_the_dispatch_lookup_does_not_guess_before_any_read_succeeded() -> None:
    """Sending a team's queue to the default worker would dead-letter its jobs (no handler)."""
    source = Source([r("thumbnails", TEAM_FN, "media")])
    source.fail = True
    lookup = team_lookup(source, lambda: 0.0)
    for _ in range(2):  # the second call falls in the pause after the failed read: still no guess
        with pytest.raises(BackendUnavailable, match="thumbnails"):
            lookup("thumbnails")
    source.fail = False
    lookup.cache.forget()
    assert lookup("thumbnails") == TEAM_FN and lookup("echo") == "default-fn"


def test_the_lambda_dispatcher_invokes_each_queues_routed_function() -> None:
    client = boto3.client("lambda", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    table = RouteTable([r("thumbs-*", "team-thumbs")])

    def function_for(queue: str) -> str:
        route = table.resolve(queue)
        return "sluice-worker" if route is None else route.function

    with Stubber(client) as stub:
        for fn, q in (("team-thumbs", "thumbs-big"), ("sluice-worker", "echo")):
            stub.add_response("invoke", {"StatusCode": 202}, {
                "FunctionName": fn, "InvocationType": "Event",
                "Payload": DispatchEvent(queues=[q], batch=10).model_dump_json().encode()})
        dispatcher = LambdaDispatcher(client, "sluice-worker", function_for=function_for)
        assert dispatcher.dispatch("thumbs-big", 1, 10) == 1
        assert dispatcher.dispatch("echo", 1, 10) == 1
        stub.assert_no_pending_responses()


def test_an_empty_registry_is_read_again_within_seconds_so_a_first_route_counts_soon() -> None:
    now = [0.0]
    source = Source([])
    cache = RouteCache(source, ttl_s=30, clock=lambda: now[0])
    assert not cache.known()
    source.routes = [r("thumbnails", "team-fn")]
    now[0] = 4.9
    assert not cache.known() and source.reads == 1
    now[0] = 5.0
    assert cache.known() and source.reads == 2
    now[0] = 34.9  # a table with routes is kept the whole ttl
    assert cache.known() and source.reads == 2
