"""The routes table: one item per route pattern, and the registration that writes it.

Layout: partition key ``pattern`` (a queue name or a ``prefix*``), attributes ``function``,
``owner``, ``schemas`` (JSON text: queue -> JSON Schema) and ``updated_at_ms``. A team's IAM
policy can scope its writes to its own patterns with ``dynamodb:LeadingKeys``
(infra/worker.yaml). The table is small (one item per routed queue or prefix): the relay and
the gateway read it whole (``Scan``) at most every 30 s per container (``routes.RouteCache``).

``register`` checks everything first (patterns, schemas, the function exists, no other owner
routes an overlapping pattern), then writes every route and deletes the function's stale
ones in one transaction, each put conditional on nobody else owning its pattern: a
registration lands whole or not at all.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

from botocore.exceptions import ClientError

from sluice.backends.aws.clients import OnLambda
from sluice.backends.dynamodb.client import OnTable
from sluice.backends.dynamodb.errors import error_code, translate
from sluice.backends.dynamodb.scan import scan_all
from sluice.core.clock import wall_ms
from sluice.core.errors import InvalidInput, SluiceError, StoreError
from sluice.core.routes import Route, RouteConflict, UnknownFunction, check_new


class RouteStore(Protocol):
    """The port: where routes are kept."""

    def list_routes(self) -> list[Route]: ...
    def put_routes(self, owner: str, routes: Sequence[Route], stale: Sequence[Route]) -> None: ...
    def delete_route(self, pattern: str, owner: str | None) -> Route: ...


class FunctionDirectory(Protocol):
    """Which worker functions exist (Lambda ``GetFunction``)."""

    def exists(self, function: str) -> bool: ...


class DynamoRouteStore(OnTable):
    """``RouteStore`` over the routes table."""

    setting = "routes_table"

    def list_routes(self) -> list[Route]:
        items = scan_all(self.client, self.table_name)
        try:
            return [_route(item) for item in items]
        except (KeyError, ValueError, SluiceError) as exc:
            raise StoreError(f"a route item in {self.table_name} is malformed: {exc}") from exc

    def put_routes(self, owner: str, routes: Sequence[Route], stale: Sequence[Route]) -> None:
        ops: list[dict[str, Any]] = [{"Put": {
            "TableName": self.table_name, "Item": _item(r),
            "ConditionExpression": "attribute_not_exists(#p) OR #o = :owner",
            "ExpressionAttributeNames": {"#p": "pattern", "#o": "owner"},
            "ExpressionAttributeValues": {":owner": {"S": owner}}}} for r in routes]
        ops += [{"Delete": {
            "TableName": self.table_name, "Key": {"pattern": {"S": r.pattern}},
            "ConditionExpression": "attribute_not_exists(#p) OR #o = :owner",
            "ExpressionAttributeNames": {"#p": "pattern", "#o": "owner"},
            "ExpressionAttributeValues": {":owner": {"S": owner}}}} for r in stale]
        if not ops:
            return
        try:
            self.client.transact_write_items(TransactItems=ops)  # type: ignore[arg-type]
        except ClientError as exc:
            if error_code(exc) == "TransactionCanceledException":
                reasons = exc.response.get("CancellationReasons", [])
                codes = [str(r.get("Code", "")) for r in reasons]
                if "ConditionalCheckFailed" in codes:
                    at = codes.index("ConditionalCheckFailed")
                    pattern = routes[at].pattern if at < len(routes) else stale[at - len(routes)].pattern
                    raise RouteConflict(f"queue pattern {pattern!r} is routed by another owner (registered "
                                        "meanwhile); nothing was written", pattern=pattern) from exc
            raise translate(exc, f"transact_write_items {self.table_name}") from exc

    def delete_route(self, pattern: str, owner: str | None) -> Route:
        """Delete one route; with ``owner``, only if that owner holds it. Returns what was deleted."""
        kwargs: dict[str, Any] = {"TableName": self.table_name, "Key": {"pattern": {"S": pattern}},
                                  "ReturnValues": "ALL_OLD", "ConditionExpression": "attribute_exists(#p)",
                                  "ExpressionAttributeNames": {"#p": "pattern"}}
        if owner is not None:
            kwargs["ConditionExpression"] += " AND #o = :owner"
            kwargs["ExpressionAttributeNames"]["#o"] = "owner"
            kwargs["ExpressionAttributeValues"] = {":owner": {"S": owner}}
        try:
            old = self.client.delete_item(**kwargs)
        except ClientError as exc:
            if error_code(exc) == "ConditionalCheckFailedException":
                whose = f" owned by {owner!r}" if owner else ""
                raise InvalidInput(f"no route {pattern!r}{whose}") from exc
            raise translate(exc, f"delete_item {self.table_name}") from exc
        return _route(old["Attributes"])


def _item(r: Route) -> dict[str, Any]:
    return {"pattern": {"S": r.pattern}, "function": {"S": r.function}, "owner": {"S": r.owner},
            "schemas": {"S": json.dumps(dict(r.schemas), separators=(",", ":"), sort_keys=True)},
            "updated_at_ms": {"N": str(r.updated_at_ms)}}


def _route(item: dict[str, Any]) -> Route:
    return Route(pattern=item["pattern"]["S"], function=item["function"]["S"], owner=item["owner"]["S"],
                 schemas=json.loads(item.get("schemas", {}).get("S") or "{}"),
                 updated_at_ms=int(item.get("updated_at_ms", {}).get("N") or 0))


class LambdaFunctions(OnLambda):
    """``FunctionDirectory`` over Lambda's ``GetFunction`` (the local stack's Lambda API answers it)."""

    def exists(self, function: str) -> bool:
        try:
            self.client.get_function(FunctionName=function)
        except ClientError as exc:
            if error_code(exc) == "ResourceNotFoundException":
                return False
            raise translate(exc, f"get_function {function}") from exc
        except Exception as exc:  # BotoCoreError: unreachable
            raise translate(exc, f"get_function {function}") from exc
        return True


def register(store: RouteStore, functions: FunctionDirectory | None, routes: Sequence[Route], *,
             owner: str, function: str) -> list[Route]:
    """Write ``routes`` for ``function`` (replacing what it registered before); returns the stale
    routes it deleted. Nothing is written unless every check passes.

    ``functions`` None skips the existence check: the caller is the function itself (its
    deployment's custom resource).
    """
    for r in routes:
        if r.function != function:
            raise InvalidInput(f"route {r.pattern!r} names {r.function}, not {function}")
    if functions is not None and not functions.exists(function):
        raise UnknownFunction(f"worker function {function!r} does not exist: deploy it before routing "
                              "queues to it", function=function)
    stale = check_new(store.list_routes(), routes, owner=owner, replaces_function=function)
    stamped = [Route(r.pattern, r.function, r.owner, r.schemas, r.updated_at_ms or wall_ms()) for r in routes]
    store.put_routes(owner, stamped, stale)
    return stale


def unregister(store: RouteStore, *, owner: str, function: str) -> list[Route]:
    """Delete every route ``owner`` holds for ``function`` (its stack is being deleted)."""
    mine = [r for r in store.list_routes() if r.owner == owner and r.function == function]
    store.put_routes(owner, [], mine)
    return mine
