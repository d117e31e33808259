"""The gateway function's API callers: API Gateway REST proxy events (enqueue, jobs, queues).

API Gateway verified the caller before the event reached the function: with SigV4, its IAM
principal is ``requestContext.identity.userArn``; with an API key, ``apiKeyId`` names it. Nothing
deeper in the gateway reads the request context: the routes get this ``Caller``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sluice.core.caller import Caller
from sluice.gateway.api import Api
from sluice.gateway.http.app import HttpGateway


def principal(event: Mapping[str, Any]) -> str:
    """The caller's IAM ARN as API Gateway verified its signature; "" without SigV4 (API keys)."""
    identity = (event.get("requestContext") or {}).get("identity") or {}
    return str(identity.get("userArn") or "")


def idempotency_scope(event: Mapping[str, Any]) -> str:
    """Whom Idempotency-Keys are scoped to: two tenants may pick the same key."""
    identity = (event.get("requestContext") or {}).get("identity") or {}
    return str(identity.get("userArn") or identity.get("apiKeyId") or "")


def caller_of(event: Mapping[str, Any], api: Api) -> Caller:
    """The proxy event's caller, with the deployment's operators (read per request)."""
    return Caller.verified(principal(event), idempotency_scope(event), operators=api.operators,
                           max_caller_priority=api.max_caller_priority)


def handle(http: HttpGateway, api: Callable[[], Api], event: dict[str, Any], context: Any) -> dict[str, Any]:
    return http.handle(event, context, caller_of(event, api()))
