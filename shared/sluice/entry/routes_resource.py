"""Sluice's default worker registering its own routes: the CloudFormation custom resource.

Only template.yaml's ``DefaultWorkerRoutes`` uses this (Sluice's own stack, owner ``sluice``). A
team's routes are registered by its team's registrar (``sluice.entry.registrar``, issue 27); a
team's worker has no routes table and refuses such a request (``NoRoutesTable``).

Sluice's stack declares ``Custom::SluiceRoutes`` with its worker function as the
``ServiceToken``. The function loads its handlers module anyway (once per
container), so it knows its queues and the typed queues' JSON Schemas (``app.schemas()``), and
``context.function_name`` is its name: nothing is copied into the template by hand, and the
routes can never name a function that does not exist. Create and Update replace the function's
routes (``store.routes.register``); Delete removes them. Every check runs before any write.

Properties: ``Owner`` (the team; default the function's name), ``Patterns`` (extra queue
prefixes such as ``thumbs-*``, optional), ``Declarations`` (the digest of the code's queues, schemas
and schedules, so a change to them re-registers; optional, and refused if it is not the code's).

The schedules the handlers module declares (``app.schedule``, issue 31) are registered with the
routes, owned by ``Owner`` (``registrar.schedules``), as a team's registrar registers a team's.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sluice.backends.dynamodb.routes import RouteStore
    from sluice.core.config import Settings
    from sluice.registrar.schedules import CodeSchedules
    from sluice.worker.registry import Worker

log = logging.getLogger(__name__)
Send = Callable[[str, bytes], None]
# Sluice's default worker holds no Scheduler rights (the operator function alone does: docs/security.md),
# so it cannot register the schedules its module declares; sluice dev refuses them the same way.
DEFAULT_WORKER_SCHEDULES = (
    "the handlers module declares schedules (app.schedule), which Sluice's default worker does not "
    "register (it holds no Scheduler rights; the operator function alone does): deploy these handlers "
    "as a team's worker (infra/worker.yaml), whose registrar registers them, or create them with "
    "`sluice schedules create`; nothing was written")


def is_custom_resource(event: object) -> bool:
    return isinstance(event, dict) and {"RequestType", "ResponseURL", "StackId"} <= event.keys()


def apply(event: Mapping[str, Any], function: str, app: Worker, store: RouteStore,
          schedules: CodeSchedules | None = None) -> tuple[str, dict[str, str]]:
    """The routes change one request asks for, and the schedules ``app`` declares (issue 31);
    returns (physical id, data). Raises on refusal, before any write."""
    from sluice.backends.dynamodb.routes import register, unregister
    from sluice.core.declared import SchedulePlan, digest
    from sluice.core.errors import InvalidInput, RegistrationRefused
    from sluice.core.routes import RouteTable, app_schemas, routes_for
    from sluice.registrar.register import check_digest
    from sluice.registrar.schedules import plan_declared

    props = event.get("ResourceProperties") or {}
    owner = str(props.get("Owner") or function)
    patterns = props.get("Patterns") or []
    if isinstance(patterns, str):
        patterns = [p.strip() for p in patterns.split(",") if p.strip()]
    if not isinstance(patterns, list):
        raise InvalidInput("Patterns must be a list of queue prefixes like thumbs-*")
    physical = f"sluice-routes:{owner}:{function}"
    if event["RequestType"] == "Delete":
        # The id CloudFormation knows names the owner it was created with (an Update that
        # changed the owner deletes the old routes through this).
        known = str(event.get("PhysicalResourceId") or physical)
        _prefix, old_owner, old_function = [*known.split(":", 2), "", ""][:3]
        gone = unregister(store, owner=old_owner or owner, function=old_function or function)
        dropped = SchedulePlan() if schedules is None else schedules.remove_all(old_owner or owner)
        return known, {"Removed": ",".join(r.pattern for r in gone), **dropped.data(())}
    declared = app.declared_schedules()
    if declared and schedules is None:
        raise RegistrationRefused(DEFAULT_WORKER_SCHEDULES)
    check_digest(props, digest(app.handlers, app_schemas(app), declared))
    wanted = routes_for(function, owner, app.handlers, app_schemas(app), [str(p) for p in patterns])
    changes = plan_declared(schedules, owner, None, declared, RouteTable(wanted))
    stale = register(store, None, wanted, owner=owner, function=function)
    if schedules is not None:
        schedules.apply(changes)
    return physical, {"Routes": ",".join(r.pattern for r in wanted),
                      "Typed": ",".join(sorted(q for r in wanted for q in r.schemas)),
                      "Removed": ",".join(r.pattern for r in stale), **changes.data(declared)}


def respond(event: Mapping[str, Any], function: str, app: Worker, store: RouteStore,
            send: Send, schedules: CodeSchedules | None = None) -> dict[str, Any]:
    """Run ``apply`` and tell CloudFormation (``send(url, body)``), whatever happened."""
    physical, status, reason = f"sluice-routes:{function}", "SUCCESS", ""
    data: dict[str, str] = {}
    try:
        physical, data = apply(event, function, app, store, schedules)
    except Exception as exc:  # a refusal or a backend error must still reach CloudFormation
        status, reason = "FAILED", f"{type(exc).__name__}: {exc}"
        log.error("routes %s for %s refused: %s", event.get("RequestType"), function, reason)
    if event.get("RequestType") == "Delete" and event.get("PhysicalResourceId"):
        physical = str(event["PhysicalResourceId"])
    body = {"Status": status, "Reason": (reason or "see the function's log")[:900],
            "PhysicalResourceId": physical[:1000], "StackId": event["StackId"],
            "RequestId": event["RequestId"], "LogicalResourceId": event["LogicalResourceId"], "Data": data}
    send(str(event["ResponseURL"]), json.dumps(body).encode())
    return body


def put(url: str, body: bytes) -> None:
    """PUT the answer to CloudFormation's pre-signed S3 URL (signed with an empty Content-Type)."""
    import urllib.request

    request = urllib.request.Request(url, data=body, method="PUT", headers={"Content-Type": ""})
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()


class NoRoutesTable:
    """A team's worker (issue 27): it writes no routes, its team's registrar does. A Create or
    Update is refused with that reason; a Delete (a stack still naming the worker as its
    ServiceToken, being replaced by the registrar's ``TeamRoutes``) succeeds and removes nothing,
    so it cannot remove what the registrar registered."""

    def list_routes(self) -> list[Any]:
        return []  # so a Delete removes nothing; a Create's put_routes refuses

    def put_routes(self, owner: str, routes: Any, stale: Any) -> None:
        if routes:
            raise _refused()

    def delete_route(self, pattern: str, owner: str | None) -> Any:
        raise _refused()


def _refused() -> Exception:
    from sluice.core.errors import RegistrationRefused

    return RegistrationRefused("a team's worker does not register its own routes: its team's registrar "
                               "does (infra/team.yaml; ServiceToken: the export "
                               "<SluiceStackName>-team-<team>-RegistrarArn). Nothing was written")


def handle(event: Mapping[str, Any], context: Any, app: Worker,
           settings: Settings | None = None) -> dict[str, Any]:
    """The worker Lambda's answer to a ``Custom::SluiceRoutes`` request for ``app``, its handlers
    module's Worker (``entry.worker.prepare``). Only Sluice's default worker, whose stack gives it
    the routes table (``DefaultWorkerRoutes``), registers its own routes; a team's worker has no
    routes table and no right to one, and refuses."""
    from sluice.backends.dynamodb.routes import DynamoRouteStore
    from sluice.entry import root as wiring

    s = settings or wiring.settings()
    if not s.routes_table:
        return respond(event, str(context.function_name), app, NoRoutesTable(), put)
    return respond(event, str(context.function_name), app,
                   DynamoRouteStore.from_settings(s, client=wiring.dynamodb(s)), put,
                   wiring.code_schedules(s))
