"""The gateway's schedule-firing use case (issue 17): one firing of a schedule becomes one job.

Reached by the gateway function's Scheduler entry (an EventBridge Scheduler target invoke) and,
locally, by ``sluice dev``'s scheduler. The job passes every check a caller's enqueue passes
(``sluice.gateway.pipeline``: reserved and malformed queue names, payload size, priority, routes
and schemas) and admission. Its id is derived from the schedule's name and the scheduled time
(``schedules.firing_id``, keyless), not minted, so a firing delivered twice (Scheduler is at least
once), even across a key rotation, appends one id twice and the relay drops the repeat: one job.
A firing at a time the schedule's expression does not produce is refused (``FiringRefused``).

A failed append is not withdrawn (unlike ``Api.enqueue``): the id is the firing's for good, and
withdrawing it would cancel the retry that Scheduler makes after the error.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Annotated, Any, Protocol

from pydantic import ConfigDict, Field

from sluice.core import schedules, traces
from sluice.core.base import Model
from sluice.core.models import validate_public_queue
from sluice.core.ports import ScheduleTrigger, create_fired
from sluice.core.wire import Accepted, EnqueueRequest

if TYPE_CHECKING:
    from sluice.core.caller import Caller
    from sluice.gateway.api import Api

log = logging.getLogger("sluice.gateway.api")


def fire(api: Api, schedule: schedules.Schedule, scheduled_ms: int, caller: Caller | None = None) -> Accepted:
    """Enqueue ``schedule``'s job for its firing at ``scheduled_ms`` (the same id on every call).

    Only at a time the schedule's expression produces (``schedules.firing_time``: FiringRefused,
    400, before anything is written); the id is derived from that time, keyless, so a key rotation
    between two deliveries gives one id. ``caller``: the Scheduler entry's (None: ``Api.anonymous``,
    a plain caller's limits)."""
    pipeline, request = api.pipeline, EnqueueRequest(payload=schedule.payload)
    with traces.span(api.spans, "fire", None, schedule.queue) as span:  # each firing: a trace of its own
        at = schedules.firing_time(schedule, scheduled_ms, api.clock())
        pipeline.check(schedule.queue, request, caller or api.anonymous())
        pipeline.admit(schedule.queue, [request])
        job_id = schedules.firing_id(schedule.name, schedule.queue, at)
        span.set(job=job_id, schedule=schedule.name)
        pipeline.append([pipeline.spec(schedule.queue, request, api.clock(), None, job_id=job_id,
                                       traceparent=span.traceparent)])
        return Accepted(job_id=job_id, queue=schedule.queue)


# -- the routes' models ------------------------------------------------------------------------

class ScheduleRequest(Model):
    """A new schedule of the path's queue: every firing enqueues ``payload`` on it."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    name: str = Field(description="1-64 of A-Z a-z 0-9 _ -, starting with a letter or digit; unique "
                                  "within the queue (another queue may use the same name).")
    expression: str = Field(description="EventBridge Scheduler's rate(...) or cron(...) (UTC); at most "
                                        "once a minute; L, W and # are refused.")
    payload: Annotated[Any, Field(description="Any JSON value: every firing's job payload.")]


class ScheduleView(Model):
    name: str
    expression: str
    queue: str
    payload: Any
    paused: bool
    created_at_ms: int
    next_firing_ms: int | None = Field(description="The next firing (UTC ms); null when paused or none.")
    declared_by: str = Field("", description="The team whose handlers' code declares it (app.schedule), "
                                             "or `sluice` for Sluice's default worker's code; their "
                                             "deploys update and remove it. Empty for one created "
                                             "through this API.")


class ScheduleList(Model):
    schedules: list[ScheduleView]


# -- ports -------------------------------------------------------------------------------------

class ScheduleStore(Protocol):
    """Where schedules are kept (DynamoDB items in AWS), keyed by queue and name."""

    def create(self, schedule: schedules.Schedule) -> None:
        """Store a new schedule; ``ScheduleExists`` if its queue has the name."""

    def get(self, queue: str, name: str) -> schedules.Schedule:
        """The schedule, or ``ScheduleNotFound``."""

    def all(self, queue: str) -> list[schedules.Schedule]:
        """The queue's schedules."""

    def set_paused(self, queue: str, name: str, paused: bool) -> schedules.Schedule:
        """The schedule with its new flag, or ``ScheduleNotFound``."""

    def delete(self, queue: str, name: str) -> None:
        """Forget the schedule, or ``ScheduleNotFound``."""


Trigger = ScheduleTrigger  # what fires the schedules (EventBridge Scheduler in AWS); optional locally


# -- the use case --------------------------------------------------------------------------------

WROTE_NOTHING, CHANGED_NOTHING = "; nothing was written", "; nothing was changed"


class Schedules:
    """Create, read, pause, resume and delete one queue's schedules, and fire one (the Scheduler entry).

    The queue is every call's first argument (the route's path), and a name is unique within its
    queue only, so a caller allowed one queue's paths never reaches another queue's schedules.
    Every check runs before the first write, so a refused request writes nothing: the name, the
    expression (``schedules.parse``), and the queue and payload as an enqueue checks them (reserved
    names, size, priority, a queue no deployed worker handles, its schema).
    """

    def __init__(self, api: Api, store: ScheduleStore, trigger: Trigger | None = None) -> None:
        self.api, self.store, self.trigger = api, store, trigger

    def view(self, schedule: schedules.Schedule) -> ScheduleView:
        upcoming = None if schedule.paused else schedule.next_after(self.api.clock())
        return ScheduleView(name=schedule.name, expression=schedule.expression, queue=schedule.queue,
                            payload=schedule.payload, paused=schedule.paused,
                            created_at_ms=schedule.start_ms, next_firing_ms=upcoming,
                            declared_by=schedule.owner)

    def _queue(self, queue: str, then: str = "") -> str:
        """The path's queue, as an enqueue checks it (400 malformed or reserved, 404 unrouted;
        ``then``: what a refusal left undone)."""
        validate_public_queue(queue)
        self.api.pipeline.check_route(queue, [], batch=False, then=then)  # no payload: only whether routed
        return queue

    def create(self, queue: str, request: ScheduleRequest) -> ScheduleView:
        schedule = schedules.Schedule.create(request.name, request.expression, queue,
                                             request.payload, self.api.clock())
        # Checked as its firings will be: Sluice's own enqueue, a plain caller's limits.
        self.api.pipeline.check(schedule.queue, EnqueueRequest(payload=schedule.payload),
                                self.api.anonymous(), then=WROTE_NOTHING)
        create_fired(self.store, self.trigger, schedule)
        return self.view(schedule)

    def get(self, queue: str, name: str) -> ScheduleView:
        return self.view(self.store.get(self._queue(queue), schedules.check_name(name)))

    def list(self, queue: str) -> ScheduleList:
        found = self.store.all(self._queue(queue))
        return ScheduleList(schedules=[self.view(s) for s in sorted(found, key=lambda s: s.name)])

    def set_paused(self, queue: str, name: str, paused: bool) -> ScheduleView:
        queue = self._queue(queue, CHANGED_NOTHING)
        schedule = self.store.set_paused(queue, schedules.check_name(name), paused)
        if self.trigger is not None:
            self.trigger.set_paused(schedule)
        return self.view(schedule)

    def delete(self, queue: str, name: str) -> None:
        schedules.check_name(name)
        self.store.get(self._queue(queue, CHANGED_NOTHING), name)  # 404 before touching the trigger
        if self.trigger is not None:
            self.trigger.delete(queue, name)
        self.store.delete(queue, name)

    def fire(self, queue: str, name: str, scheduled_ms: int, caller: Caller | None = None) -> Accepted | None:
        """The job of ``queue``'s schedule ``name`` firing at ``scheduled_ms``; None if it is paused."""
        schedule = self.store.get(validate_public_queue(queue), schedules.check_name(name))
        if schedule.paused:
            log.info("schedule %s/%s is paused: firing at %d skipped", queue, name, scheduled_ms)
            return None
        return fire(self.api, schedule, scheduled_ms, caller)
