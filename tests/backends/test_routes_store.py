"""The routes table on a real (moto) DynamoDB, and registration's checks (issue 15).

Hostile cases: a route to a function that does not exist; two teams claiming one queue; a
schema that is not valid JSON Schema. Each is one clear error, and the table is left as it was.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from sluice.backends.dynamodb.routes import DynamoRouteStore, LambdaFunctions, register, unregister
from sluice.backends.dynamodb.tables import create_routes_table
from sluice.core.errors import InvalidInput
from sluice.core.routes import InvalidSchema, Route, RouteConflict, UnknownFunction, routes_for
from sluice_dev.local.lambdas import Function, LambdaApi, LocalLambda

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

SCHEMA = {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]}


class Known:
    def __init__(self, *names: str) -> None:
        self.names = set(names)

    def exists(self, function: str) -> bool:
        return function in self.names


@pytest.fixture
def store(moto_url: str, unique: str) -> DynamoRouteStore:
    client = boto3.client("dynamodb", endpoint_url=moto_url, region_name="us-east-1")
    create_routes_table(client, f"routes-{unique}")
    return DynamoRouteStore(client, f"routes-{unique}")


def snapshot(store: DynamoRouteStore) -> list[tuple[str, str, str]]:
    return sorted((r.pattern, r.function, r.owner) for r in store.list_routes())


def test_register_list_replace_and_unregister(store: DynamoRouteStore) -> None:
    routes = routes_for("team-a-fn", "team-a", ["thumbnails", "video"], {"thumbnails": SCHEMA})
    assert register(store, Known("team-a-fn"), routes, owner="team-a", function="team-a-fn") == []
    listed = {r.pattern: r for r in store.list_routes()}
    assert set(listed) == {"thumbnails", "video"}
    assert listed["thumbnails"].schemas == {"thumbnails": SCHEMA} and listed["thumbnails"].updated_at_ms > 0
    # The next deploy handles only thumbnails, and a prefix: video's route goes.
    again = routes_for("team-a-fn", "team-a", ["thumbnails"], {}, patterns=["clips-*"])
    stale = register(store, Known("team-a-fn"), again, owner="team-a", function="team-a-fn")
    assert [s.pattern for s in stale] == ["video"]
    assert snapshot(store) == [("clips-*", "team-a-fn", "team-a"), ("thumbnails", "team-a-fn", "team-a")]
    assert {r.pattern for r in unregister(store, owner="team-a", function="team-a-fn")} == {"clips-*",
                                                                                            "thumbnails"}
    assert store.list_routes() == []


def test_a_route_to_a_function_that_does_not_exist_is_refused_and_nothing_written(
        store: DynamoRouteStore) -> None:
    with pytest.raises(UnknownFunction, match=r"ghost-fn.*does not exist"):
        register(store, Known("real-fn"), [Route("q", "ghost-fn", "t")], owner="t", function="ghost-fn")
    assert store.list_routes() == []


def test_two_teams_claiming_one_queue_second_is_refused_and_first_keeps_it(store: DynamoRouteStore) -> None:
    register(store, None, [Route("thumbs-*", "fa", "team-a")], owner="team-a", function="fa")
    before = snapshot(store)
    with pytest.raises(RouteConflict, match="team-a"):
        register(store, None, [Route("video", "fb", "team-b"), Route("thumbs-big", "fb", "team-b")],
                 owner="team-b", function="fb")
    assert snapshot(store) == before  # video was not written either: all or nothing


def test_the_write_itself_refuses_a_pattern_another_owner_took_meanwhile(store: DynamoRouteStore) -> None:
    """The check reads, then writes: a registration racing it is stopped by the conditional put."""
    register(store, None, [Route("thumbnails", "fa", "team-a")], owner="team-a", function="fa")
    with pytest.raises(RouteConflict, match="another owner"):
        store.put_routes("team-b", [Route("other", "fb", "team-b"), Route("thumbnails", "fb", "team-b")], [])
    assert snapshot(store) == [("thumbnails", "fa", "team-a")]


def test_a_schema_that_is_not_json_schema_never_reaches_the_table(store: DynamoRouteStore) -> None:
    with pytest.raises(InvalidSchema, match="thumbnails"):
        routes_for("fa", "team-a", ["thumbnails"], {"thumbnails": {"type": "objekt"}})
    assert store.list_routes() == []


def test_delete_one_route_only_by_its_owner(store: DynamoRouteStore) -> None:
    register(store, None, [Route("thumbnails", "fa", "team-a")], owner="team-a", function="fa")
    with pytest.raises(InvalidInput, match="owned by 'team-b'"):
        store.delete_route("thumbnails", "team-b")
    assert store.delete_route("thumbnails", "team-a").function == "fa"
    with pytest.raises(InvalidInput, match="no route"):
        store.delete_route("thumbnails", None)


@pytest.fixture
def lambda_api(tmp_path: Path) -> Iterator[LambdaApi]:
    svc = LocalLambda([Function("sluice-worker-team", "x:handler", 1000, 1)], tmp_path).start()
    api = LambdaApi(svc).start()
    yield api
    api.stop()
    svc.stop()


def test_the_local_lambda_api_answers_get_function_as_lambda_does(lambda_api: LambdaApi) -> None:
    functions = LambdaFunctions(boto3.client("lambda", endpoint_url=lambda_api.url, region_name="us-east-1",
                                             aws_access_key_id="x", aws_secret_access_key="x"))
    assert functions.exists("sluice-worker-team")
    assert not functions.exists("sluice-worker-ghost")
