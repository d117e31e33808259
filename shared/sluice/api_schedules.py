"""The gateway's schedule-firing use case (issue 17): one firing of a schedule becomes one job.

Reached by the gateway function's Scheduler entry (an EventBridge Scheduler target invoke) and,
locally, by ``sluice dev``'s scheduler. The job passes every check a caller's enqueue passes
(``Api._check_request``: reserved and malformed queue names, payload size, priority, routes and
schemas) and admission. Its id is derived from the schedule's name and the scheduled time
(``schedules.firing_id``), not minted, so a firing delivered twice (Scheduler is at least once)
appends one id twice and the relay drops the repeat: one job.

A failed append is not withdrawn (unlike ``Api.enqueue``): the id is the firing's for good, and
withdrawing it would cancel the retry that Scheduler makes after the error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice import schedules
from sluice.wire import Accepted, EnqueueRequest

if TYPE_CHECKING:
    from sluice.api import Api


def fire(api: Api, schedule: schedules.Schedule, scheduled_ms: int) -> Accepted:
    """Enqueue ``schedule``'s job for its firing at ``scheduled_ms`` (the same id on every call)."""
    request = EnqueueRequest(payload=schedule.payload)
    api._check_request(schedule.queue, request, index=None)
    api._admit(schedule.queue, [request])
    job_id = schedules.firing_id(schedule.name, schedule.queue, scheduled_ms, api.verifier.key)
    spec = api._spec(schedule.queue, request, api.clock(), None, job_id=job_id)
    api.log.append([spec])
    return Accepted(job_id=job_id, queue=schedule.queue)
