"""The operator API's routes, ``/v1/admin/queues/{queue}/...`` (docs/api.md, Operator API).

The gateway checks the caller (``sluice.gateway.admin.authorize``) before it routes or validates an
admin request, so a caller who is not an operator learns nothing but 403, and nothing is
written. In AWS these routes take SigV4 only (the template's ``sigv4`` security on each), even
when the API also takes API keys.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Annotated, Any, Final

from pydantic import ConfigDict, Field

from sluice.core import listing
from sluice.core.base import Model
from sluice.core.models import JOB_ID_PATTERN, QUEUE_NAME_PATTERN, QueueConfig
from sluice.gateway.admin import MAX_LISTED, Admin
from sluice.gateway.http.router import APPLICATION_JSON, Body, Path, Query, Response, Router

PREFIX: Final = "/v1/admin/"
SHAPES: Final = (  # for 405 vs 404 (app._unrouted)
    (re.compile(r"^/v1/admin/queues/?$"), ("GET",)),
    (re.compile(r"^/v1/admin/queues/(?P<queue>[^/]*)/?$"), ("GET",)),
    (re.compile(r"^/v1/admin/queues/(?P<queue>[^/]*)/caps/?$"), ("PUT",)),
    (re.compile(r"^/v1/admin/queues/(?P<queue>[^/]*)/(pause|resume)/?$"), ("POST",)),
    (re.compile(r"^/v1/admin/queues/(?P<queue>[^/]*)/(rate|max-in-flight|watermarks|sensitive)/?$"),
     ("PUT",)),
    (re.compile(r"^/v1/admin/queues/(?P<queue>[^/]*)/dlq/?$"), ("GET", "DELETE")),
    (re.compile(r"^/v1/admin/queues/(?P<queue>[^/]*)/dlq/redrive/?$"), ("POST",)),
    (re.compile(r"^/v1/admin/queues/(?P<queue>[^/]*)/jobs/?$"), ("GET",)),
    (re.compile(r"^/v1/admin/queues/(?P<queue>[^/]*)/jobs/[^/]*/timeline/?$"), ("GET",)),
    (re.compile(r"^/v1/admin/queues/(?P<queue>[^/]*)/depth/?$"), ("GET",)),
)

AdminQueue = Annotated[str, Path(pattern=QUEUE_NAME_PATTERN, description="Queue name.")]
AdminJobId = Annotated[str, Path(pattern=JOB_ID_PATTERN, description="Job id.")]


class _Request(Model):
    model_config = ConfigDict(extra="forbid", strict=True)


def _count(most: int, description: str) -> Any:
    """An optional count from 0 to ``most``; left out (None), the request does not set it."""
    return Field(default=None, ge=0, le=most, description=description)


class RateRequest(_Request):
    per_second: float = Field(ge=0, le=10_000_000, allow_inf_nan=False,
                              description="Jobs per second pushed into Redis; 0 = no limit.")
    burst: int | None = _count(10_000_000, "Jobs that may go at once (default: one second's worth).")


class MaxInFlightRequest(_Request):
    max_in_flight: int | None = _count(10_000_000, "Most jobs leased at once; 0 = no limit.")
    max_in_flight_per_group: int | None = _count(
        10_000_000, "Most jobs of one group (a job's group) leased at once; 0 = no limit.")


class WatermarksRequest(_Request):
    high: int = Field(ge=0, le=10_000_000, description="Pause pushing above this ready depth; 0 = off.")
    low: int | None = _count(10_000_000, "Resume below this (default high/2).")


class CapsRequest(_Request):
    max_delayed: int | None = _count(1_000_000_000, "Delayed jobs the queue may hold; 0 = the default.")
    max_dead: int | None = _count(1_000_000_000,
                                  "Dead jobs at which the queue takes no more; 0 = the default.")
    max_bytes: int | None = _count(1 << 50, "Bytes its jobs may take in Redis (its byte budget); "
                                            "0 = the deployment's default.")


class SensitiveRequest(_Request):
    fields: list[str] = Field(max_length=listing.MAX_SENSITIVE, description=(
        "Payload fields the listing shows as [redacted]: JSON pointers (/card/number; a segment * is "
        "every item of a list; \"\" the whole payload) or top-level names (password); [] marks none. "
        "Replaces the queue's list."))


class RedriveRequest(_Request):
    job_id: str | None = Field(default=None, pattern=JOB_ID_PATTERN, description="One dead job.")
    all: bool = Field(default=False, description="Every dead job of the queue.")


def _json(status: int, body: Any) -> Response[Any]:
    return Response(status, APPLICATION_JSON, json.dumps(body, separators=(",", ":")))


def _config(queue: str, config: QueueConfig) -> Response[Any]:
    # ``sensitive`` only when set: a client older than it refuses an answer that carries it (its
    # QueueConfig forbids extra fields), so it keeps working with every queue that marks none
    unset = set() if config.sensitive else {"sensitive"}
    return _json(200, {"queue": queue, **config.model_dump(mode="json", exclude=unset)})


def register(app: Router, admin: Callable[[], Admin],  # noqa: C901 - a closure per route
             responses: dict[int, Any]) -> None:
    """Add the operator routes to ``app``; ``admin()`` gives the use-cases for one request."""
    tags = ["operator"]

    @app.get("/v1/admin/queues", operation_id="admin_queues", tags=tags, responses=responses,
             summary="Every queue: depths, overdue leases, config and route (sluice queues, sluice top).")
    def list_queues() -> Response[Any]:
        return _json(200, {"queues": admin().all_queues()})

    @app.get("/v1/admin/queues/<queue>", operation_id="admin_queue", tags=tags, responses=responses,
             summary="One queue: depths, overdue leases, config and route.")
    def one_queue(queue: AdminQueue) -> Response[Any]:
        return _json(200, admin().queue_stats(queue))

    @app.put("/v1/admin/queues/<queue>/caps", operation_id="admin_caps", tags=tags, responses=responses,
             summary="The queue's own caps on delayed and dead jobs and its byte budget in Redis.")
    def set_caps(queue: AdminQueue, body: Annotated[CapsRequest, Body()]) -> Response[Any]:
        return _config(queue, admin().set_caps(queue, body.max_delayed, body.max_dead, body.max_bytes))

    @app.post("/v1/admin/queues/<queue>/pause", operation_id="admin_pause", tags=tags, responses=responses,
              summary="Stop pushing the queue's jobs into Redis (Kafka holds the backlog).")
    def pause(queue: AdminQueue) -> Response[Any]:
        return _config(queue, admin().pause(queue))

    @app.post("/v1/admin/queues/<queue>/resume", operation_id="admin_resume", tags=tags,
              responses=responses, summary="Resume pushing the queue's jobs.")
    def resume(queue: AdminQueue) -> Response[Any]:
        return _config(queue, admin().resume(queue))

    @app.put("/v1/admin/queues/<queue>/rate", operation_id="admin_rate", tags=tags, responses=responses,
             summary="Limit how fast the relays push the queue's jobs.")
    def rate(queue: AdminQueue, body: Annotated[RateRequest, Body()]) -> Response[Any]:
        return _config(queue, admin().set_rate(queue, body.per_second, body.burst))

    @app.put("/v1/admin/queues/<queue>/max-in-flight", operation_id="admin_max_in_flight", tags=tags,
             responses=responses, summary="Cap how many of the queue's jobs run at once.")
    def max_in_flight(queue: AdminQueue, body: Annotated[MaxInFlightRequest, Body()]) -> Response[Any]:
        return _config(queue, admin().set_max_in_flight(queue, body.max_in_flight,
                                                        body.max_in_flight_per_group))

    @app.put("/v1/admin/queues/<queue>/watermarks", operation_id="admin_watermarks", tags=tags,
             responses=responses, summary="Backpressure on the queue's ready depth.")
    def watermarks(queue: AdminQueue, body: Annotated[WatermarksRequest, Body()]) -> Response[Any]:
        return _config(queue, admin().set_watermarks(queue, body.high, body.low))

    @app.put("/v1/admin/queues/<queue>/sensitive", operation_id="admin_sensitive", tags=tags,
             responses=responses, summary="The payload fields the listing redacts, for any queue.")
    def sensitive(queue: AdminQueue, body: Annotated[SensitiveRequest, Body()]) -> Response[Any]:
        caller = app.context.get("caller")  # logged with the change: who unmarked a field
        return _config(queue, admin().set_sensitive(queue, body.fields,
                                                    by=getattr(caller, "principal", "") or ""))

    @app.get("/v1/admin/queues/<queue>/dlq", operation_id="admin_dlq_list", tags=tags, responses=responses,
             summary="The queue's dead jobs, oldest first, with their last error.")
    def dlq_list(queue: AdminQueue,
                 limit: Annotated[int, Query(ge=1, le=MAX_LISTED)] = 100) -> Response[Any]:
        dead = admin().dead_letters(queue, limit)
        return _json(200, {"queue": queue, "jobs": [d.model_dump(mode="json") for d in dead]})

    @app.get("/v1/admin/queues/<queue>/jobs", operation_id="admin_jobs", tags=tags, responses=responses,
             summary="The queue's jobs in one state, newest first, a page at a time (sensitive payload "
                     "fields redacted).")
    def jobs(queue: AdminQueue,
             state: Annotated[str, Query(pattern=listing.STATE_PATTERN, description=(
                 "ready, delayed, leased, dead, or finished (the last jobs acked).")),
             ] = "ready",
             limit: Annotated[int, Query(ge=1, le=listing.MAX_PAGE)] = listing.DEFAULT_PAGE,
             cursor: Annotated[str | None, Query(pattern=listing.CURSOR_PATTERN, description=(
                 "The `next` of the page before."))] = None,
             prefix: Annotated[str | None, Query(pattern=listing.PREFIX_PATTERN, description=(
                 "Only ids that start with this."))] = None) -> Response[Any]:
        page = admin().list_jobs(queue, state, limit, cursor, prefix)
        return _json(200, page.model_dump(mode="json"))

    @app.post("/v1/admin/queues/<queue>/dlq/redrive", operation_id="admin_redrive", tags=tags,
              responses=responses, summary="Put one dead job, or all of them, back in the ready queue.")
    def redrive(queue: AdminQueue, body: Annotated[RedriveRequest, Body()]) -> Response[Any]:
        report = admin().redrive(queue, body.job_id, body.all)
        return _json(200, {"queue": queue, "moved": report.moved, "refused": report.refused})

    register_timeline(app, admin, responses, tags)

    @app.delete("/v1/admin/queues/<queue>/dlq", operation_id="admin_purge", tags=tags, responses=responses,
                summary="Delete every dead job of the queue from Redis (their status stays dead).")
    def purge(queue: AdminQueue) -> Response[Any]:
        return _json(200, {"queue": queue, "purged": admin().purge(queue)})


def register_timeline(app: Router, admin: Callable[[], Admin], responses: dict[int, Any],
                      tags: list[str]) -> None:
    """A job's timeline (issue 32 item 2; ``sluice.core.timeline``)."""

    @app.get("/v1/admin/queues/<queue>/jobs/<job_id>/timeline", operation_id="admin_job_timeline", tags=tags,
             responses=responses, summary="A job's timeline: its workers' leases, grants, renewals, writes "
                                          "(accepted or refused by the fence) and acks, oldest first.")
    def job_timeline(queue: AdminQueue, job_id: AdminJobId) -> Response[Any]:
        return _json(200, {"queue": queue, "job_id": job_id, "steps": admin().timeline(queue, job_id)})

    @app.get("/v1/admin/queues/<queue>/depth", operation_id="admin_queue_depth", tags=tags,
             responses=responses, summary="The queue's ready, delayed, leased and dead counts over the last "
                                          "hour, as the relay sampled them, with the enqueue-to-start wait "
                                          "(p50, p99) of the jobs started.")
    def queue_depth(queue: AdminQueue) -> Response[Any]:
        return _json(200, admin().depth(queue).model_dump(mode="json"))
