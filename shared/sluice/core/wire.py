"""The public wire format of the gateway: request and response bodies.

Below both the use case (``api``) and the HTTP adapter (``http``), which import it; it
imports nothing from either.

The same classes validate requests, shape responses, and generate the OpenAPI
document, so the document cannot drift from what the code accepts. Request models
are strict: a boolean or a float where an integer belongs is an error, not a
coercion, and any field the API does not define (``job_id``, ``attempts``,
``token`` included) is refused.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import ConfigDict, Field

from sluice.core.base import Model
from sluice.core.models import (
    GROUP_PATTERN,
    JOB_ID_PATTERN,
    MAX_ATTEMPTS,
    MAX_LEASE_MS,
    MAX_PRIORITY,
    QUEUE_NAME_PATTERN,
    JobState,
)

MAX_DELAY_SECONDS: Final = 7 * 24 * 3600
MAX_LEASE_SECONDS: Final = MAX_LEASE_MS // 1000
MAX_BATCH: Final = 100
# The key of the gateway's direct-invoke events (``sluice.core.families.family_event``; never from API
# Gateway): here, below the families' models, so that telling such an event apart loads none of them.
INTERNAL: Final = "sluice_internal"


class EnqueueRequest(Model):
    """One job. Only ``payload`` is required; the job id is assigned by the gateway."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    payload: Annotated[Any, Field(description="Any JSON value; handed to the worker as is. An object with a "
                                              "top-level \"$sluice\" member is refused (400): Sluice's own "
                                              "payload pointers have that shape.")]
    delay_seconds: int = Field(default=0, ge=0, le=MAX_DELAY_SECONDS,
                               description="Run no earlier than this many seconds from now.")
    priority: int = Field(default=0, ge=0, le=MAX_PRIORITY, description="0 (default) to 9 (most urgent).")
    max_attempts: int | None = Field(
        default=None, ge=1, le=MAX_ATTEMPTS,
        description="Attempts before the job is dead-lettered. Absent: the handler's retry policy decides "
                    "(its max_attempts), else 5. Sent: at most this many; a handler's policy may lower "
                    "it, never raise it (the lower of the two wins).")
    lease_seconds: int = Field(default=30, ge=1, le=MAX_LEASE_SECONDS,
                               description="How long a worker holds the job between heartbeats.")
    group: str | None = Field(default=None, pattern=GROUP_PATTERN,
                              description="Its fair-share group in the queue (a tenant or customer id): "
                                          "groups are leased in turn, each within the queue's "
                                          "max_in_flight_per_group. Absent: the queue's default group.")


class BatchRequest(Model):
    """1..100 jobs for one queue, validated all-or-nothing."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    jobs: list[EnqueueRequest] = Field(min_length=1, max_length=MAX_BATCH)


class Accepted(Model):
    """A job durably appended to the log (Kafka acknowledged it)."""

    job_id: str = Field(pattern=JOB_ID_PATTERN)
    queue: str = Field(pattern=QUEUE_NAME_PATTERN)
    status: Literal["accepted"] = "accepted"


class BatchAccepted(Model):
    queue: str = Field(pattern=QUEUE_NAME_PATTERN)
    jobs: list[Accepted] = Field(description="One result per submitted job, in order.")


class JobView(Model):
    """A job's state as the jobs table records it."""

    job_id: str
    queue: str
    status: JobState
    attempts: int = Field(ge=0)
    created_at_ms: int
    updated_at_ms: int
    finished_at_ms: int | None = None
    cancel_requested: bool = False
    result: Any = None
    result_ref: str | None = Field(default=None, description="Where a result too large for the item is.")
    last_error: str | None = None
    progress: float | None = Field(default=None, ge=0, le=1,
                                   description="The handler's last ctx.progress (0..1), if it reported any.")
    progress_detail: str | None = None
    progress_at_ms: int | None = None
    parent_id: str | None = Field(default=None, description="The job whose handler started this one.")
    children: list[str] = Field(default_factory=list, description="The jobs this one's handler started.")
    continuations: list[str] = Field(default_factory=list,
                                     description="Continuations this one's handler started (then=).")
    continuation: str | None = Field(default=None, description="The continuation waiting for this job.")
    waits_for: list[str] = Field(default_factory=list,
                                 description="On a continuation: the children it runs after.")
    remaining: int | None = Field(default=None, description="On a continuation: children not ended yet.")


class CancelAccepted(Model):
    job_id: str
    status: Literal["cancelled", "cancel_requested"] = Field(
        description="cancelled: it will not run. cancel_requested: it is running; its worker is told.")


class QueueRoute(Model):
    """Which worker function drains a queue, and its payload schema if the queue is typed."""

    pattern: str = Field(description="The route: the queue's name, or a prefix ending in *.")
    function: str = Field(description="The worker function its jobs are dispatched to.")
    owner: str = Field(description="The team that registered the route.")
    payload_schema: dict[str, Any] | None = Field(
        default=None, description="JSON Schema (2020-12) every payload must match; null: any JSON value.")


class QueueView(Model):
    queue: str = Field(pattern=QUEUE_NAME_PATTERN)
    ready: int = Field(ge=0)
    delayed: int = Field(ge=0)
    leased: int = Field(ge=0)
    dead: int = Field(ge=0)
    oldest_ready_age_ms: int | None = Field(description="Age of the oldest ready job; null when none.")
    paused: bool
    rate_per_s: float = Field(ge=0, description="Relay push rate limit; 0 = unlimited.")
    burst: int = Field(ge=0)
    max_in_flight: int = Field(ge=0, description="0 = unlimited.")
    max_in_flight_per_group: int = Field(default=0, ge=0, description="Per fair group; 0 = unlimited.")
    high_watermark: int = Field(ge=0)
    low_watermark: int = Field(ge=0)
    max_delayed: int = Field(default=0, ge=0, description="Delayed jobs the queue may hold; 0 = no cap.")
    max_dead: int = Field(default=0, ge=0, description="Dead jobs at which it takes no more; 0 = no cap.")
    used_bytes: int = Field(default=0, ge=0, description="Bytes its jobs take in Redis, counted against its "
                                                          "budget.")
    budget_bytes: int = Field(default=0, ge=0, description="Its byte budget in Redis; 0 = none. Beyond it "
                                                            "the relay holds its jobs back.")
    parked: int = Field(default=0, ge=0, description="About how many of its records wait in the parking lot "
                                                     "(held back outside the shared partitions).")
    parked_at_ms: int = Field(default=0, ge=0, description="When one of its records last parked (epoch ms); "
                                                           "0 = never.")
    route: QueueRoute | None = Field(default=None, description="Its route; null: the default worker.")


class FieldError(Model):
    """One failing field: a JSON pointer into the request, and why."""

    pointer: str = Field(description="RFC 6901 pointer, e.g. /jobs/3/priority; path and header "
                                     "parameters are #/path/queue and #/header/idempotency-key.")
    detail: str
    index: int | None = Field(default=None, description="For a batch: the failing job's position.")


class Problem(Model):
    """An RFC 9457 problem document (application/problem+json)."""

    type: str
    title: str
    status: int
    detail: str
    instance: str | None = None
    code: str = Field(description="Stable machine-readable error code.")
    errors: list[FieldError] | None = None
