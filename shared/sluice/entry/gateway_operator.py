"""The operator function's calls (template.yaml ``OperatorFunction``, ``functions/operator/app.py``):
API Gateway proxy events for ``/v1/admin/...``, schedule CRUD included; every other shape is refused.

The caller is checked first (``sluice.gateway.admin.authorize``: an IAM caller, on the operator
allow-list, which names nobody while it is empty), then the body, then the route: a caller who
is not an operator learns nothing but 403, and nothing is written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sluice.core.errors import SluiceError
from sluice.entry.gateway_api import caller_of
from sluice.gateway.admin import authorize
from sluice.gateway.api import Api
from sluice.gateway.http import admin as admin_routes
from sluice.gateway.http import problems
from sluice.gateway.http.app import HttpGateway, problem_event


def is_operator_call(event: Mapping[str, Any]) -> bool:
    return str(event.get("path") or "").startswith(admin_routes.PREFIX)


def handle(http: HttpGateway, api: Callable[[], Api], event: dict[str, Any], context: Any) -> dict[str, Any]:
    try:
        use_cases = api()
        caller = caller_of(event, use_cases)
        authorize(caller.principal, use_cases.operators)
    except SluiceError as exc:
        return problem_event(problems.from_exception(exc, instance=str(event.get("path") or "")))
    return http.handle(event, context, caller)
