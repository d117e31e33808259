"""A worker function answering a ``Custom::SluiceRoutes`` request itself (the layer before issue 31).

Since issue 31 no template sends a worker this request to register: Sluice's default worker's
routes and declared schedules are registered by Sluice's registrar function (template.yaml's
``RegistrarFunction`` answering ``DefaultWorkerRegistration``; ``sluice.entry.registrar``), and a
team's by its team's registrar (infra/team.yaml, issue 27). A worker whose configuration names no
routes table (every worker the current templates deploy) refuses a Create or Update and answers a
Delete by removing nothing (``NoRoutesTable``): a stack moving to the registrar creates the new
resource, then deletes the old one (``DefaultWorkerRoutes``, ``Routes``), whose ServiceToken was the
worker, and that Delete must not remove what the registrar just registered.

A worker still deployed by an older template.yaml (``SLUICE_ROUTES_TABLE`` set, ``DefaultWorkerRoutes``'
ServiceToken the worker) registers its own routes as it did: its handlers module's queues and typed
queues' JSON Schemas, to ``context.function_name``. Create and Update replace the function's routes
(``store.routes.register``); Delete removes them. Every check runs before any write. Properties:
``Owner`` (default the function's name), ``Patterns`` (extra queue prefixes such as ``thumbs-*``),
``Declarations`` (the digest of the code's queues, schemas and schedules; refused if not the code's).
Such a worker has no Scheduler rights, so a module that declares schedules is refused
(``DEFAULT_WORKER_SCHEDULES``): the current template's registrar registers them.
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
# A worker function runs handler code, so it holds no Scheduler rights (docs/security.md): a worker
# registering its own routes (an older template.yaml) cannot register the schedules its module declares.
DEFAULT_WORKER_SCHEDULES = (
    "the handlers module declares schedules (app.schedule), which Sluice's default worker does not "
    "register itself (it runs handler code and holds no Scheduler rights): Sluice's registrar function "
    "does (template.yaml's RegistrarFunction, answering DefaultWorkerRegistration): deploy the current "
    "template.yaml, or create them with `sluice schedules create`; nothing was written")


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
    """A worker with no routes table: a team's (issue 27) or, since issue 31, Sluice's default worker.
    It writes no routes, its registrar does. A Create or Update is refused with that reason; a Delete
    (a stack still naming the worker as its ServiceToken, being replaced by the registrar's
    ``TeamRoutes`` or ``DefaultWorkerRegistration``) succeeds and removes nothing, so it cannot
    remove what the registrar registered."""

    def list_routes(self) -> list[Any]:
        return []  # so a Delete removes nothing; a Create's put_routes refuses

    def put_routes(self, owner: str, routes: Any, stale: Any) -> None:
        if routes:
            raise _refused()

    def delete_route(self, pattern: str, owner: str | None) -> Any:
        raise _refused()


def _refused() -> Exception:
    from sluice.core.errors import RegistrationRefused

    return RegistrationRefused("a worker does not register its own routes: its registrar does (a team's: "
                               "infra/team.yaml, ServiceToken the export <SluiceStackName>-team-<team>-"
                               "RegistrarArn; Sluice's default worker's: template.yaml's RegistrarFunction, "
                               "ServiceToken of DefaultWorkerRegistration). Nothing was written")


def handle(event: Mapping[str, Any], context: Any, app: Worker,
           settings: Settings | None = None) -> dict[str, Any]:
    """The worker Lambda's answer to a ``Custom::SluiceRoutes`` request for ``app``, its handlers
    module's Worker (``entry.worker.prepare``). Only a default worker an older template.yaml gives
    the routes table registers its own routes; every other worker has no routes table and no right
    to one, and refuses (a Delete: removes nothing)."""
    from sluice.backends.dynamodb.routes import DynamoRouteStore
    from sluice.entry import root as wiring

    s = settings or wiring.settings()
    if not s.routes_table:
        return respond(event, str(context.function_name), app, NoRoutesTable(), put)
    return respond(event, str(context.function_name), app,
                   DynamoRouteStore.from_settings(s, client=wiring.dynamodb(s)), put,
                   wiring.code_schedules(s))
