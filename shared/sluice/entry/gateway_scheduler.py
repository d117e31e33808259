"""The firings function's calls (template.yaml ``FiringsFunction``, ``functions/firings/app.py``):
EventBridge Scheduler's invoke with a schedule's firing (issue 17); every other shape is refused.

The event is the target's constant input plus the firing's time (``sluice.core.schedules``:
``FIRE_KEY``, ``queue``, ``scheduled_time``); only Scheduler's role may invoke the function with
it. A firing's job gets a plain caller's limits (``Caller.sluice``). A refusal (4xx: a deleted
schedule, a queue no longer routed) answers, so Scheduler does not retry it; an outage (5xx) or a
refusal that may pass (429: the queue at a cap, or held by the memory guard) raises, so it does, for a
day, and then sends the firing to the firings dead-letter queue (issue 29, ``schedules.target_retry``).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Mapping
from typing import Any, Final

from sluice.core.caller import Caller
from sluice.core.errors import InvalidSchedule, SluiceError
from sluice.core.schedules import FIRE_KEY, SCHEDULED_TIME
from sluice.gateway.http import problems
from sluice.gateway.schedules import Schedules

log = logging.getLogger(__name__)

# Refusals that may pass (429): answered, Scheduler would take the firing as delivered and lose it.
RETRIED: Final = frozenset({429})


def is_firing(event: Mapping[str, Any]) -> bool:
    return FIRE_KEY in event and "httpMethod" not in event


def scheduled_ms(text: object) -> int:
    """Scheduler's ``<aws.scheduler.scheduled-time>`` (ISO 8601, UTC) as ms."""
    if not isinstance(text, str) or text == SCHEDULED_TIME:
        raise InvalidSchedule(f"invalid scheduled_time {text!r}: an ISO 8601 time is expected")
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidSchedule(f"invalid scheduled_time {text!r}: an ISO 8601 time is expected") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return int(moment.timestamp() * 1000)


def fire(schedules: Schedules, event: Mapping[str, Any]) -> dict[str, Any]:
    """Enqueue the firing's job (``Schedules.fire``'s errors propagate)."""
    name, queue = event.get(FIRE_KEY), event.get("queue")
    at = scheduled_ms(event.get("scheduled_time"))
    accepted = schedules.fire(queue if isinstance(queue, str) else "", name if isinstance(name, str) else "",
                              at, Caller.sluice(schedules.api.max_caller_priority))
    if accepted is None:
        return {"statusCode": 200, "skipped": "paused"}
    return {"statusCode": 202, "job_id": accepted.job_id}


def handle(schedules: Callable[[], Schedules], event: dict[str, Any]) -> dict[str, Any]:
    try:
        return fire(schedules(), event)
    except SluiceError as exc:
        p = problems.from_exception(exc)
        if p.status in RETRIED or p.status >= 500:
            log.warning("schedule firing %r not taken now; Scheduler retries it: %s", event.get(FIRE_KEY),
                        exc)
            raise
        log.warning("schedule firing %r refused: %s", event.get(FIRE_KEY), exc)
        return {"statusCode": p.status, "error": {"code": exc.code, "message": str(exc)}}
