"""The internal function's calls (template.yaml ``InternalFunction``, ``functions/internal/app.py``):
a worker starts children (and a continuation), the relay or the countdown releases a continuation
(``sluice.core.families``: ``family_event``), a worker has its scripts loaded into Redis after a
NOSCRIPT (``sluice.core.script_loads``: only shipped worker scripts); every other shape is refused.

Its resource policy admits only the roles of this deployment's workers, teams' workers, the relay
and the countdown (docs/security.md, One function per caller), whose children get a plain caller's
limits (``Caller.sluice``): nothing in the event names a caller.
Answers ``{"statusCode", "family"}`` (``"released"``, ``"loaded"``) or ``{"statusCode", "error": {"code",
"message", "details"}}``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from sluice.core import script_loads
from sluice.core.caller import Caller
from sluice.core.errors import ConfigError, InvalidInput, SluiceError
from sluice.core.models import describe_validation
from sluice.core.script_loads import ScriptIntake
from sluice.core.wire import INTERNAL
from sluice.gateway.api import Api
from sluice.gateway.http import problems


def is_internal(event: Mapping[str, Any]) -> bool:
    return INTERNAL in event and "httpMethod" not in event


def handle(api: Callable[[], Api], event: dict[str, Any],
           scripts: Callable[[], ScriptIntake] | None = None) -> dict[str, Any]:
    """``scripts``: the load of a worker's scripts (None: this gateway loads none, a harness's)."""
    # The families' models and use cases on this path only: the gateway and operator functions,
    # which refuse these events, never load them (cold start, docs/deploy.md).
    from sluice.core import families as flows

    try:
        if script_loads.is_load_scripts(event):
            if scripts is None:
                raise ConfigError("this gateway loads no worker scripts")
            return {"statusCode": 200, "loaded": scripts()(event)}
        request = flows.family_event(event)
        use_cases = api()
        if isinstance(request, flows.ReleaseRequest):
            released = use_cases.release_continuation(request.continuation)
            return {"statusCode": 200, "released": released}
        assert request is not None
        accepted = use_cases.enqueue_children(request, Caller.sluice(use_cases.max_caller_priority))
        return {"statusCode": 202, "family": accepted.model_dump(mode="json")}
    except ValidationError as exc:
        error: SluiceError = InvalidInput(f"invalid family request ({describe_validation(exc)})")
    except SluiceError as exc:
        error = exc
    p = problems.from_exception(error)
    return {"statusCode": p.status, "error": {"code": error.code, "message": str(error),
                                              "details": _jsonable(error.details)}}


def _jsonable(details: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in details.items() if isinstance(v, str | int | float | bool) or v is None}
