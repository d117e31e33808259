"""The gateway's use-cases: enqueue, enqueue_batch, status, cancel, stats.

Pure orchestration over the ports (``JobLog``, ``JobStore``, ``JobQueue``) and an
idempotency guard; no client library is imported here. The HTTP layer
(``sluice.gateway.http.app``) parses and validates, then calls exactly one method.

Enqueue, and why it writes nothing but the Kafka record:

1. Build the specs and check payload sizes. Nothing written yet. Job ids are minted
   here and verify themselves (``sluice.core.ids``: ULID, queue, HMAC with the gateway's
   secret), so no status item is needed for ``GET`` to work right after the 202.
2. Append to Kafka; answer 202 only once Kafka acknowledged every record. That single
   acknowledged append is the whole happy path: a DynamoDB write per job would cost more
   than the append itself. The relay's ``mark_queued`` creates the status item later.
3. If Kafka failed or timed out, the outcome is unknown: the record may have landed.
   Each job is withdrawn (``JobStore.cancel_unrecorded``: a ``cancelled`` item), so the
   relay skips it (``final_job_ids``) and a worker's ``grant`` refuses it, and the answer
   is 503. A job that a relay and a worker already started before the withdrawal runs;
   a failed withdrawal is logged. The client retries with the same Idempotency-Key.

Reads: a job with a status item is answered from it. A job without one whose id
verifies, minted within ``id_horizon_ms`` (Kafka's retention), is ``accepted``: the
gateway issued it, Kafka acknowledged it, and the relay has not recorded it yet.
Everything else is 404.

Reserved queues (``models.RESERVED_QUEUE_PREFIX``) are Sluice's own: enqueueing into one,
or reading one's stats, is a 400 naming the prefix; a job of one reads and cancels as 404.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from sluice.core import ids, policy
from sluice.core.bus import EventBus, JobEnded
from sluice.core.clock import wall_ms
from sluice.core.errors import (
    AlreadyFinished,
    JobNotFound,
    NoRoute,
    PayloadInvalid,
    PayloadTooLarge,
    PriorityNotAllowed,
    SluiceError,
)
from sluice.core.families import Countdown, FamilyAccepted, FamilyRequest
from sluice.core.lazy import Lazy, resolve
from sluice.core.limits import Limits
from sluice.core.models import (
    MAX_PRIORITY,
    PAYLOAD_CHECKED,
    JobRecord,
    JobSpec,
    JobState,
    dump_json,
    is_reserved_queue,
    validate_job_id,
    validate_public_queue,
)
from sluice.core.pools import LazyPool
from sluice.core.ports import JobLog, JobQueue, JobStore
from sluice.core.routes import Route, RouteCache, RouteTable, payload_errors, unrouted_refused
from sluice.core.wire import (
    Accepted,
    BatchAccepted,
    BatchRequest,
    CancelAccepted,
    EnqueueRequest,
    JobView,
    QueueRoute,
    QueueView,
)
from sluice.gateway import families as api_families

log = logging.getLogger(__name__)

# Default Kafka retention: an unrelayed record older than this is gone from the log.
DEFAULT_ID_HORIZON_MS: Final = 7 * 24 * 3600 * 1000
NOT_ACKNOWLEDGED: Final = "not acknowledged by Kafka"
CANCELLED_BEFORE_RELAY: Final = "cancelled before the relay took it"
KEY_REFRESH_MS = 60_000  # at most one re-read of the job id keys a minute (ids.Verifier)
new_job_id = ids.ulid  # an unsigned ULID: tests and benchmarks that need a well-formed unknown id


class Idempotency(Protocol):
    """Runs an action at most once per key (see ``sluice.gateway.http.idempotency``)."""

    def run(self, key: str, fingerprint: Mapping[str, Any], action: Callable[[], dict[str, Any]],
            remaining_ms: Callable[[], int] | None = None) -> tuple[dict[str, Any], bool]:
        """Return (result, replayed).

        Raises IdempotencyConflict when the key was used with a different fingerprint,
        InProgress while the first request with the key is still running, and
        BackendUnavailable when the key store cannot be reached.
        """
        ...


class Admission(Protocol):
    """Refuses jobs a queue may not take now (``sluice.gateway.admission``: QueueFull, QueueNotAllowed)."""

    def check(self, queue: str, jobs: int, delayed: int) -> None: ...


@dataclass(frozen=True, slots=True)
class Enqueued:
    """What an enqueue returns; ``replayed`` means an earlier request with the key made it."""

    body: Accepted | BatchAccepted
    replayed: bool = False


ENQUEUED_NOTHING = "; nothing was enqueued"  # what an enqueue refused at its checks left undone


class Api:
    def __init__(self, log: JobLog, store: JobStore | Lazy[JobStore], queue: JobQueue | Lazy[JobQueue], *,
                 job_id_key: bytes,
                 previous_job_id_keys: Sequence[bytes] = (),
                 refresh_keys: Callable[[], tuple[bytes, Sequence[bytes]]] | None = None,
                 idempotency: Idempotency | None = None, max_payload_bytes: int = 256 * 1024,
                 clock: Callable[[], int] = wall_ms, new_id: Callable[[int], str] | None = None,
                 id_horizon_ms: int = DEFAULT_ID_HORIZON_MS, withdraw_workers: int = 8,
                 admission: Admission | None = None, limits: Limits | None = None,
                 max_caller_priority: int = MAX_PRIORITY, operators: Sequence[str] = (),
                 events: EventBus | None = None, routes: RouteCache | None = None,
                 refuse_unrouted: bool = True) -> None:
        self.log = log
        self.events = events if events is not None else EventBus()  # JobEnded when a cancel ends a job
        # Either may be held lazily (``sluice.core.lazy``): the gateway builds them on first use.
        self._store, self._queue = store, queue
        self.idempotency = idempotency
        self.max_payload_bytes = max_payload_bytes
        self.clock = clock
        # Mints with the current key, verifies with it and the previous one; ``refresh_keys``
        # re-reads both (at most once a KEY_REFRESH_MS) when an id names a key this gateway does
        # not hold: another container may already mint with a key rotated in since this one started.
        self.verifier = ids.Verifier(job_id_key, previous_job_id_keys, refresh=refresh_keys, clock=clock,
                                     refresh_ms=KEY_REFRESH_MS)
        self.id_horizon_ms = id_horizon_ms
        self.max_caller_priority, self.operators = max_caller_priority, tuple(operators)
        # None: mint self-verifying ids. A callable (now_ms -> id) names jobs itself (the chaos
        # workload does, so that an enqueue with an unknown outcome is named in its history);
        # such ids do not verify, so GET answers 404 for them until the relay records them.
        self.new_id = new_id
        self._pool = LazyPool(withdraw_workers, "sluice-withdraw")
        self.admission = admission  # None: no caps (unit tests, the chaos workload)
        self.limits = limits or Limits()
        # The routes (sluice.core.routes): once any is known, a queue no route covers is refused
        # (NoRoute, 404) unless ``refuse_unrouted`` is off; a typed queue's payloads are checked
        # against its JSON Schema (PayloadInvalid, 400) before anything is written.
        self.routes, self.refuse_unrouted = routes, refuse_unrouted

    @property
    def store(self) -> JobStore:
        return resolve(self._store)

    @property
    def queue(self) -> JobQueue:
        return resolve(self._queue)

    # -- enqueue ---------------------------------------------------------------------------

    def enqueue(self, queue: str, request: EnqueueRequest, *, idempotency_key: str | None = None,
                remaining_ms: Callable[[], int] | None = None, principal: str = "") -> Enqueued:
        """``principal``: the caller's IAM ARN as API Gateway verified it ("" if none)."""
        self._check_request(queue, request, index=None, principal=principal)

        def accept() -> Accepted:
            self._admit(queue, [request])  # inside: a replay returns its stored answer
            key = idempotency_key if self.idempotency is not None else None
            spec = self._spec(queue, request, self.clock(), key)
            self._accept([spec])
            return Accepted(job_id=spec.job_id, queue=queue)

        return self._once(idempotency_key, "enqueue", queue, request, accept, Accepted, remaining_ms)

    def enqueue_batch(self, queue: str, request: BatchRequest, *, idempotency_key: str | None = None,
                      remaining_ms: Callable[[], int] | None = None, principal: str = "") -> Enqueued:
        validate_public_queue(queue)
        for index, job in enumerate(request.jobs):
            self._check_size(job, index=index)
            self._check_priority(job, principal, index=index)
        self._check_route(queue, request.jobs, batch=True)

        def accept() -> BatchAccepted:
            self._admit(queue, request.jobs)
            now = self.clock()
            specs = [self._spec(queue, job, now, idempotency_key) for job in request.jobs]
            self._accept(specs)
            return BatchAccepted(queue=queue, jobs=[Accepted(job_id=s.job_id, queue=queue) for s in specs])

        return self._once(idempotency_key, "enqueue_batch", queue, request, accept, BatchAccepted,
                          remaining_ms)

    def _once(self, key: str | None, op: str, queue: str, request: EnqueueRequest | BatchRequest,
              accept: Callable[[], Accepted | BatchAccepted], model: type[Accepted] | type[BatchAccepted],
              remaining_ms: Callable[[], int] | None) -> Enqueued:
        """``accept()`` now, or at most once per Idempotency-Key (a replay returns the stored body).

        The fingerprint is built only for a keyed request: the plain path stays free of it.
        """
        if key is None or self.idempotency is None:
            return Enqueued(accept())
        fingerprint = {"op": op, "queue": queue, "request": request.model_dump(mode="json")}
        result, replayed = self.idempotency.run(key, fingerprint, lambda: accept().model_dump(mode="json"),
                                                remaining_ms)
        return Enqueued(model.model_validate(result), replayed)

    def _admit(self, queue: str, requests: Sequence[EnqueueRequest]) -> None:
        if self.admission is not None:
            self.admission.check(queue, len(requests), sum(1 for r in requests if r.delay_seconds))

    def _check_request(self, queue: str, request: EnqueueRequest, *, index: int | None,
                       principal: str = "", then: str = ENQUEUED_NOTHING) -> None:
        """Every check of one job before anything is written: a caller's enqueue, a child's and a
        schedule's (``then``: what a route or schema refusal says was left undone)."""
        validate_public_queue(queue)
        self._check_size(request, index=index)
        self._check_priority(request, principal, index=index)
        self._check_route(queue, [request], batch=index is not None, offset=index or 0, then=then)

    def _check_size(self, request: EnqueueRequest, index: int | None) -> None:
        size = len(dump_json(request.payload).encode("utf-8"))
        if size > self.max_payload_bytes:
            where = "payload" if index is None else f"job {index}: payload"
            raise PayloadTooLarge(f"{where} is {size} bytes as JSON; the limit is {self.max_payload_bytes}",
                                  index=index)

    def route_table(self) -> RouteTable | None:
        """The routes as this container last read them (at most ``ttl_s`` old); None without any.

        If the routes table cannot be read, the last table read is used (empty before one):
        a registry outage must not stop enqueues.
        """
        if self.routes is None:
            return None
        try:
            return self.routes.table()
        except SluiceError as exc:
            log.warning("could not read the routes, using the last ones read: %s", exc)
            return self.routes.last()

    def _check_route(self, queue: str, requests: Sequence[EnqueueRequest], *, batch: bool,
                     offset: int = 0, then: str = ENQUEUED_NOTHING) -> None:
        route = self._route(queue, then=then)
        if route is None:
            return  # the default worker takes it: no payload schema
        schema = route.schemas.get(queue)
        if schema is None:
            return
        errors: list[tuple[str, str, int | None]] = []
        for index, request in enumerate(requests, start=offset):
            where = f"/jobs/{index}/payload" if batch else "/payload"
            found = payload_errors(schema, request.payload, where)
            errors += [(p, m, index if batch else None) for p, m in found]
        if errors:
            (pointer, message, _i), more = errors[0], len(errors) - 1
            raise PayloadInvalid(f"the payload does not match queue {queue!r}'s schema: {pointer}: {message}"
                                 f"{f' (and {more} more)' if more else ''}{then}",
                                 queue=queue, errors=errors)

    def _check_priority(self, request: EnqueueRequest, principal: str, index: int | None) -> None:
        highest = self.max_caller_priority
        if not policy.priority_allowed(request.priority, principal, max_caller_priority=highest,
                                       operators=self.operators):
            where = "priority" if index is None else f"job {index}: priority"
            raise PriorityNotAllowed(f"{where} {request.priority} is above {highest}, the highest a "
                                     "caller may use; higher ones are for operators")

    def _job_id(self, now_ms: int, queue: str) -> str:
        return ids.mint(now_ms, queue, self.job_id_key) if self.new_id is None else self.new_id(now_ms)

    def _spec(self, queue: str, request: EnqueueRequest, now_ms: int, key: str | None, *,
              job_id: str | None = None) -> JobSpec:
        """The record for ``request``, whose payload ``_check_size`` has serialised already: on the
        gateway a payload becomes canonical JSON once (then the record's own JSON, to Kafka).
        ``job_id``: a child's derived id (``sluice.gateway.families``); None mints one."""
        return JobSpec.model_validate({
            "job_id": job_id or self._job_id(now_ms, queue),
            "queue": queue,
            "payload": request.payload,
            "priority": request.priority,
            "max_attempts": request.max_attempts,
            "lease_ms": request.lease_seconds * 1000,
            "run_at_ms": now_ms + request.delay_seconds * 1000 if request.delay_seconds else 0,
            "enqueued_at_ms": now_ms,
            "idempotency_key": key,
        }, context={PAYLOAD_CHECKED: True})

    def _accept(self, specs: Sequence[JobSpec]) -> None:
        try:
            self.log.append(specs)
        except Exception:  # unavailable, timed out, or a bug: either way the outcome is unknown
            self._withdraw(specs)
            raise

    def _withdraw(self, specs: Sequence[JobSpec]) -> None:
        """Kafka did not acknowledge; the records may be there anyway. Stop them from running."""
        self._pool.map(self._withdraw_one, specs)

    def _withdraw_one(self, spec: JobSpec) -> None:
        try:
            self.store.cancel_unrecorded(spec.job_id, spec.queue, NOT_ACKNOWLEDGED, spec.enqueued_at_ms)
        except AlreadyFinished:
            log.warning("unacknowledged job %s had already finished: Kafka had it after all", spec.job_id)
        except Exception as exc:  # never mask the append's own error (the 503)
            # If the record did land, this job runs although the client was told 503.
            log.error("could not withdraw unacknowledged job %s: %r", spec.job_id, exc)

    # -- families (sluice.core.families; the gateway function's direct-invoke entry) ---------------------

    def enqueue_children(self, request: FamilyRequest) -> FamilyAccepted:
        """A leased job's children (and continuation); see ``sluice.gateway.families``."""
        return api_families.enqueue_children(self, request)

    def release_continuation(self, continuation: str) -> bool:
        return api_families.release_continuation(self, continuation)

    def _count_down(self, event: JobEnded) -> None:
        """A cancel ended a child: count it on its continuation here, in the gateway.

        Called for this Api's own ending, not subscribed: the bus may be the process's one bus,
        which outlives this Api and carries the worker's and the relay's endings (they count
        theirs). A failure is logged, not raised: the cancel stands, and the jobs table's
        stream counts the child again (``CountdownFunction``)."""
        store = self.store
        if not hasattr(store, "continuation_of"):
            return
        try:
            Countdown(api_families.families_of(self), self.release_continuation).on_ended(event)
        except SluiceError as exc:
            log.warning("could not count cancelled job %s on its continuation: %s", event.job, exc)

    # -- reads and cancel ------------------------------------------------------------------

    def minted(self, job_id: str) -> ids.Minted | None:
        """Queue and acceptance time of an id this gateway issued within the horizon, else None."""
        found = self.verifier.verify(job_id)
        if found is None or self.clock() - found.accepted_at_ms > self.id_horizon_ms:
            return None
        if is_reserved_queue(found.queue):  # minted before the prefix was reserved: not a caller's job
            raise JobNotFound(f"no job {job_id}")
        return found

    @property
    def job_id_key(self) -> bytes:
        return self.verifier.key

    @property
    def previous_job_id_keys(self) -> tuple[bytes, ...]:
        return self.verifier.previous

    def status(self, job_id: str) -> JobView:
        validate_job_id(job_id)
        try:
            record = self.store.get_job(job_id)
        except JobNotFound:
            minted = self.minted(job_id)
            if minted is None:
                raise
            # Issued by us and acknowledged by Kafka (the 202 came after the ack; a failed
            # append leaves a cancelled item), not yet recorded by the relay.
            return JobView(job_id=job_id, queue=minted.queue,
                           status=self._accepted_or_queued(minted.queue, job_id), attempts=0,
                           created_at_ms=minted.accepted_at_ms, updated_at_ms=minted.accepted_at_ms)
        if is_reserved_queue(record.queue):
            raise JobNotFound(f"no job {job_id}")  # Sluice's own jobs are nobody's to read
        if record.remaining is not None:  # a continuation: its children are in its family's record
            record.waits_for = api_families.families_of(self).waits_for(job_id)
        status = record.status
        if status is JobState.ACCEPTED:
            status = self._accepted_or_queued(record.queue, job_id)
        return JobView(
            job_id=record.job_id, queue=record.queue, status=status, attempts=record.attempts,
            created_at_ms=record.created_at_ms, updated_at_ms=record.updated_at_ms,
            finished_at_ms=record.finished_at_ms, cancel_requested=record.cancel_requested,
            result=record.result, result_ref=record.result_ref, last_error=record.last_error,
            progress=record.progress, progress_detail=record.progress_detail,
            progress_at_ms=record.progress_at_ms,
            parent_id=record.parent_id, children=record.children, continuations=record.continuations,
            continuation=record.continuation, waits_for=record.waits_for, remaining=record.remaining,
        )

    def _accepted_or_queued(self, queue: str, job_id: str) -> JobState:
        """``queued`` if Redis holds the job: the relay's status write is best effort and drops
        what it cannot write at full rate (``relay/status.py``). Redis unreachable: ``accepted``,
        which is still true (a read must not fail for want of a detail)."""
        try:
            return JobState.QUEUED if self.queue.holds(queue, job_id) else JobState.ACCEPTED
        except SluiceError:
            return JobState.ACCEPTED

    def cancel(self, job_id: str) -> CancelAccepted:
        """Raises JobNotFound (404) or AlreadyFinished (409)."""
        validate_job_id(job_id)
        record = self._cancel_in_store(job_id)  # the store decides; Redis follows
        if is_reserved_queue(record.queue):  # only a job from before the prefix was reserved
            raise JobNotFound(f"no job {job_id}")
        leased = record.status is JobState.LEASED
        try:
            # The store says leased: if Redis has it waiting (its holder died, the lease was
            # reclaimed), the removal records a settle entry, so the item ends even if we die.
            outcome = self.queue.cancel(record.queue, job_id, settle=leased)
        except JobNotFound:
            outcome = "gone"  # not in Redis (still in Kafka: the relay skips final jobs), or ended
        except AlreadyFinished:
            if leased:  # dead-lettered in Redis, not yet settled in the store: too late to cancel
                raise AlreadyFinished(f"job {job_id} already ended in its queue (dead-lettered)",
                                      job_id=job_id, status=JobState.DEAD.value) from None
            outcome = "gone"
        except SluiceError as exc:
            if leased:
                # Only Redis can tell a running worker (on its next heartbeat). Fail with 503:
                # repeating the request is safe, flagging a leased job twice changes nothing.
                raise
            # The store says cancelled, so a worker's grant refuses the job; removing it
            # from Redis is housekeeping.
            log.warning("cancelled job %s not removed from its Redis queue: %r", job_id, exc)
            outcome = "kept"
        if leased and outcome != "requested":
            # Nobody holds it and nobody will lease it again: end it now. Safe, since a grant
            # refuses a cancel-requested job; a job that finished meanwhile answers 409.
            record = self.store.honour_cancel(job_id)
            leased = False
        if not leased and record.status is JobState.CANCELLED:
            ended = JobEnded(job=job_id, queue=record.queue, state=JobState.CANCELLED.value,
                             source="cancel", redrive_gen=record.redrive_gen, token=record.token,
                             attempts=record.attempts, created_at_ms=record.created_at_ms,
                             ended_at_ms=record.finished_at_ms or self.clock())
            self.events.emit(ended)
            self._count_down(ended)
        return CancelAccepted(job_id=job_id, status="cancel_requested" if leased else "cancelled")

    def _cancel_in_store(self, job_id: str) -> JobRecord:
        minted = self.minted(job_id)
        if minted is None:
            return self.store.request_cancel(job_id)
        # Ours and possibly not recorded yet: a cancelled item, created if the relay has not
        # made one (it then skips the job); an existing item is cancelled as request_cancel does.
        return self.store.cancel_unrecorded(job_id, minted.queue, CANCELLED_BEFORE_RELAY,
                                            minted.accepted_at_ms)

    def stats(self, queue: str) -> QueueView:
        validate_public_queue(queue)
        route = self._route_view(queue)
        stats = self.queue.stats(queue)
        config = stats.config  # read in the same atomic script as the depths
        return QueueView(
            queue=queue, ready=stats.ready, delayed=stats.delayed, leased=stats.leased, dead=stats.dead,
            oldest_ready_age_ms=stats.oldest_ready_age_ms, paused=config.paused,
            rate_per_s=config.rate_per_s, burst=config.burst, max_in_flight=config.max_in_flight,
            high_watermark=config.high_watermark, low_watermark=config.low_watermark,
            max_delayed=self.limits.caps(config)[0], max_dead=self.limits.caps(config)[1],
            route=route,
        )

    def _route(self, queue: str, *, then: str = "") -> Route | None:
        """The route covering ``queue``; None: the default worker takes it (no routes known, or
        unrouted queues go to it). Raises NoRoute when routes are known, none covers the queue and
        unrouted queues are refused (``then``: what the refusal left undone)."""
        table = self.route_table()
        route = None if table is None else table.resolve(queue)
        if unrouted_refused(table, route, self.refuse_unrouted):
            raise NoRoute(f"no deployed worker handles queue {queue!r}: no route covers it "
                          f"(sluice routes list){then}", queue=queue)
        return route

    def _route_view(self, queue: str) -> QueueRoute | None:
        """The queue's route; None: the default worker. A queue no route covers, when routes are
        known and unrouted queues are refused, is 404 NO_ROUTE here as at enqueue: nobody runs it,
        and "the default worker" would say otherwise."""
        route = self._route(queue)
        if route is None:
            return None
        return QueueRoute(pattern=route.pattern, function=route.function, owner=route.owner,
                          payload_schema=route.schemas.get(queue))
