"""The worker function's own Custom::SluiceRoutes (issue 15): its deployment registers its routes."""

from __future__ import annotations

import json
from typing import Any

import sluice
from sluice.core.routes import Route
from sluice.entry import routes_resource
from sluice_dev.fakes import FakeRouteStore

SCHEMA = {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]}


def team_app(schema: Any = SCHEMA) -> sluice.Worker:
    app = sluice.Worker()
    app.register("thumbnails", lambda job, ctx: None)
    app.register("thumbs-big", lambda job, ctx: None)
    # The contract h15typed's typed handlers provide: queue -> JSON Schema of its model.
    app.schemas = lambda: {"thumbnails": schema}  # type: ignore[attr-defined]
    return app


def event(kind: str, **props: Any) -> dict[str, Any]:
    e = {"RequestType": kind, "ResponseURL": "https://cloudformation-custom-resource-response/x",
         "StackId": "arn:aws:cloudformation:us-east-1:1:stack/team/1", "RequestId": "r1",
         "LogicalResourceId": "Routes", "ResourceType": "Custom::SluiceRoutes",
         "ResourceProperties": {"ServiceToken": "arn", **props}}
    if kind != "Create":
        e["PhysicalResourceId"] = "sluice-routes:media:sluice-worker-media"
    return e


def run(e: dict[str, Any], store: FakeRouteStore, app: sluice.Worker | None = None) -> dict[str, Any]:
    sent: list[tuple[str, bytes]] = []
    body = routes_resource.respond(e, "sluice-worker-media", app or team_app(), store,
                                   lambda url, data: sent.append((url, data)))
    assert len(sent) == 1 and json.loads(sent[0][1]) == body and sent[0][0] == e["ResponseURL"]
    return body


def test_create_routes_every_handled_queue_with_its_schema_to_this_function() -> None:
    store = FakeRouteStore()
    body = run(event("Create", Owner="media"), store)
    assert body["Status"] == "SUCCESS"
    assert body["PhysicalResourceId"] == "sluice-routes:media:sluice-worker-media"
    assert {p: (r.function, r.owner) for p, r in store.routes.items()} == {
        "thumbnails": ("sluice-worker-media", "media"), "thumbs-big": ("sluice-worker-media", "media")}
    assert store.routes["thumbnails"].schemas == {"thumbnails": SCHEMA}


def test_update_with_a_prefix_replaces_the_exact_routes_it_covers() -> None:
    store = FakeRouteStore()
    run(event("Create", Owner="media"), store)
    body = run(event("Update", Owner="media", Patterns=["thumbs-*"]), store)
    assert body["Status"] == "SUCCESS" and body["Data"]["Removed"] == "thumbs-big"
    assert set(store.routes) == {"thumbnails", "thumbs-*"}


def test_a_queue_another_team_routes_fails_the_deploy_and_writes_nothing() -> None:
    store = FakeRouteStore([Route("thumbnails", "sluice-worker-other", "other")])
    body = run(event("Create", Owner="media"), store)
    assert body["Status"] == "FAILED" and "RouteConflict" in body["Reason"] and "other" in body["Reason"]
    assert store.writes == 0


def test_a_schema_that_is_not_json_schema_fails_the_deploy_and_writes_nothing() -> None:
    store = FakeRouteStore()
    body = run(event("Create", Owner="media"), store, team_app({"type": "objet"}))
    assert body["Status"] == "FAILED" and "InvalidSchema" in body["Reason"] and store.writes == 0


def test_delete_removes_this_functions_routes_only() -> None:
    store = FakeRouteStore([Route("video", "sluice-worker-video", "video")])
    run(event("Create", Owner="media"), store)
    body = run(event("Delete", Owner="media"), store)
    assert body["Status"] == "SUCCESS"
    assert body["PhysicalResourceId"] == "sluice-routes:media:sluice-worker-media"
    assert set(store.routes) == {"video"}


def test_only_cloudformation_requests_are_taken_for_one() -> None:
    assert routes_resource.is_custom_resource(event("Create"))
    assert not routes_resource.is_custom_resource({"queues": ["thumbnails"], "batch": 10})
