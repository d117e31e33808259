"""The gateway function's API callers: API Gateway REST proxy events (enqueue, jobs, queues).

API Gateway verified the caller before the event reached the function: with SigV4, its IAM
principal is ``requestContext.identity.userArn``; with an API key, ``apiKeyId`` names it. Nothing
deeper in the gateway reads the request context: the routes get this ``Caller``. Each caller's
request and byte rate is checked here first (``throttled``; issue 27, item 5).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sluice.core.caller import Caller
from sluice.core.errors import CallerThrottled
from sluice.gateway.api import Api
from sluice.gateway.http import problems
from sluice.gateway.http.app import HttpGateway, problem_event
from sluice.gateway.throttle import body_size


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


def throttled(api: Api, caller: Caller, event: dict[str, Any]) -> dict[str, Any] | None:
    """The 429 answer when ``caller`` is over its limit (``sluice.gateway.throttle``), else None: checked
    once the caller is verified and before the body is parsed, so a refused request costs one Redis
    call and writes nothing (issue 27, item 5)."""
    if api.throttle is None:
        return None
    try:
        api.throttle.check(caller, body_size(event))
    except CallerThrottled as exc:
        return problem_event(problems.from_exception(exc, instance=str(event.get("path") or "")), exc)
    return None


def handle(http: HttpGateway, api: Callable[[], Api], event: dict[str, Any], context: Any) -> dict[str, Any]:
    use_cases = api()
    caller = caller_of(event, use_cases)
    return throttled(use_cases, caller, event) or http.handle(event, context, caller)
