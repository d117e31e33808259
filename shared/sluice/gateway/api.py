"""The gateway's use-cases: enqueue, enqueue_batch, status, cancel, stats.

Pure orchestration over the ports (``JobLog``, ``JobStore``, ``JobQueue``) and an
idempotency guard; no client library is imported here. The HTTP layer
(``sluice.gateway.http.app``) parses and validates, then calls exactly one method.

Enqueue, and why it writes nothing but the Kafka record:

1. Check and build the specs (``sluice.gateway.pipeline``, the one pipeline every job the
   gateway writes passes through). Nothing written yet. Job ids are minted
   there and verify themselves (``sluice.core.ids``: ULID, queue, HMAC with the gateway's
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from sluice.core import ids, traces
from sluice.core.bus import EventBus, JobEnded
from sluice.core.caller import Caller
from sluice.core.clock import wall_ms
from sluice.core.errors import AlreadyFinished, JobNotFound, SluiceError
from sluice.core.lazy import Lazy, resolve
from sluice.core.limits import Limits
from sluice.core.models import (
    MAX_PRIORITY,
    JobRecord,
    JobSpec,
    JobState,
    is_reserved_queue,
    validate_job_id,
    validate_public_queue,
)
from sluice.core.pools import LazyPool
from sluice.core.ports import JobLog, JobQueue, JobStore, ParkedState
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
from sluice.gateway.keyed import KeyedRequest, KeyStore, Once
from sluice.gateway.pipeline import (
    DEFAULT_ID_HORIZON_MS,
    ENQUEUED_NOTHING,
    Admission,
    EnqueuePipeline,
    IdMinting,
    Intake,
)
from sluice.gateway.throttle import Throttle

if TYPE_CHECKING:  # the families' models and use cases come with the first family call (cold start)
    from sluice.core.families import FamilyAccepted, FamilyRequest, FamilyStore

log = logging.getLogger(__name__)

NOT_ACKNOWLEDGED: Final = "not acknowledged by Kafka"
CANCELLED_BEFORE_RELAY: Final = "cancelled before its first attempt"
new_job_id = ids.ulid  # an unsigned ULID: tests and benchmarks that need a well-formed unknown id
__all__ = ["DEFAULT_ID_HORIZON_MS", "ENQUEUED_NOTHING", "Admission", "Api", "Backends", "Enqueued",
           "IdMinting", "Intake", "KeyStore", "Policy", "new_job_id"]


@dataclass(frozen=True, slots=True)
class Backends:
    """Where the gateway writes and reads. The store and the queue may be held lazily
    (``sluice.core.lazy``): the gateway builds them on first use. ``events``: JobEnded when a cancel
    ends a job. ``withdraw_workers``: the store writes of one failed append's withdrawal at once."""

    log: JobLog
    store: JobStore | Lazy[JobStore]
    queue: JobQueue | Lazy[JobQueue]
    events: EventBus
    withdraw_workers: int = 8
    # The jobs table's families (``sluice.gateway.families``), on the same table as ``store``;
    # None: this gateway starts no children (nor counts a cancelled one down).
    families: FamilyStore | Lazy[FamilyStore] | None = None
    # The enqueue span, the one span started around a call (its context is sealed into the records):
    # ``sluice.backends.otel`` where tracing is on; else none, and a caller's traceparent goes on as is.
    spans: traces.EnqueueSpans = traces.NO_SPANS


@dataclass(frozen=True, slots=True)
class Policy:
    """Whom the deployment trusts more: ``operators`` (IAM ARNs) may use the priorities above
    ``max_caller_priority`` and call the operator API (``sluice.gateway.admin``)."""

    operators: Sequence[str] = ()
    max_caller_priority: int = MAX_PRIORITY
    # Each caller's request and byte rate (``sluice.gateway.throttle``, issue 27 item 5); None: no limit.
    throttle: Throttle | None = None


@dataclass(frozen=True, slots=True)
class Enqueued:
    """What an enqueue returns; ``replayed`` means an earlier request with the key made it."""

    body: Accepted | BatchAccepted
    replayed: bool = False


class Api:
    """The gateway's use cases over ``backends``; every job they write passes ``self.pipeline``
    (``sluice.gateway.pipeline``: ``minting``'s keys, ``intake``'s checks), for callers whose
    entry verified them (``sluice.core.caller``; ``policy`` says whom the deployment trusts more)."""

    def __init__(self, backends: Backends, minting: IdMinting, *, intake: Intake | None = None,
                 policy: Policy | None = None, idempotency: KeyStore | Lazy[KeyStore] | None = None,
                 clock: Callable[[], int] = wall_ms) -> None:
        policy = policy or Policy()
        # Every job passes through it: an enqueue's, a child's, a firing's.
        self.pipeline = EnqueuePipeline(backends.log, minting, intake, clock=clock)
        self.events = backends.events
        self.spans = backends.spans
        self._store, self._queue = backends.store, backends.queue
        self._families = backends.families
        # Idempotency-Keys (``sluice.gateway.keyed``); None: keys are ignored.
        self.idempotency = idempotency  # another Api over the same backends may share it (tests)
        self._once = None if idempotency is None else Once(idempotency, self.pipeline, self._withdraw, clock,
                                                           self.events)
        self.clock = clock
        self.id_horizon_ms = minting.horizon_ms
        # Read per request by the entries that build callers (``sluice.entry.gateway``).
        self.max_caller_priority, self.operators = policy.max_caller_priority, tuple(policy.operators)
        self.throttle = policy.throttle  # checked by the API entry before a request is parsed
        self._pool = LazyPool(backends.withdraw_workers, "sluice-withdraw")

    @property
    def store(self) -> JobStore:
        return resolve(self._store)

    @property
    def queue(self) -> JobQueue:
        return resolve(self._queue)

    @property
    def families(self) -> FamilyStore | None:
        return None if self._families is None else resolve(self._families)

    @property
    def log(self) -> JobLog:
        return self.pipeline.log

    @property
    def verifier(self) -> ids.Verifier:
        return self.pipeline.verifier

    @property
    def new_id(self) -> Callable[[int], str] | None:
        return self.pipeline.new_id

    @new_id.setter
    def new_id(self, new_id: Callable[[int], str] | None) -> None:
        self.pipeline.new_id = new_id

    @property
    def limits(self) -> Limits:
        return self.pipeline.limits

    def anonymous(self) -> Caller:
        """A caller without a verified principal: a plain caller's priorities."""
        return Caller.sluice(self.max_caller_priority)

    # -- enqueue ---------------------------------------------------------------------------

    def enqueue(self, queue: str, request: EnqueueRequest, *, idempotency_key: str | None = None,
                remaining_ms: Callable[[], int] | None = None, caller: Caller | None = None,
                traceparent: str | None = None) -> Enqueued:
        """``caller``: as its entry verified it (None: ``anonymous``); ``traceparent``: the caller's
        span (``sluice.core.traces.carried``: a valid one, or None), parent of the enqueue span."""
        pipeline = self.pipeline
        with traces.span(self.spans, "enqueue", traceparent, queue) as span:
            pipeline.check(queue, request, caller or self.anonymous())

            key = idempotency_key if self._once is not None else None

            def build(now_ms: int, job_id_of: Callable[[int], str] | None) -> list[JobSpec]:
                return [pipeline.spec(queue, request, now_ms, key, traceparent=span.traceparent,
                                      job_id=None if job_id_of is None else job_id_of(0))]

            def answer(specs: Sequence[JobSpec]) -> Accepted:
                span.set(job=specs[0].job_id)
                return Accepted(job_id=specs[0].job_id, queue=queue)

            return self._enqueue(key, "enqueue", queue, request, [request], build, answer, Accepted,
                                 remaining_ms)

    def enqueue_batch(self, queue: str, request: BatchRequest, *, idempotency_key: str | None = None,
                      remaining_ms: Callable[[], int] | None = None,
                      caller: Caller | None = None, traceparent: str | None = None) -> Enqueued:
        """``enqueue`` for 1..100 jobs, all or nothing: one enqueue span, whose context they all carry."""
        pipeline = self.pipeline
        with traces.span(self.spans, "enqueue_batch", traceparent, queue) as span:
            pipeline.check_batch(queue, request.jobs, caller or self.anonymous())

            key = idempotency_key if self._once is not None else None

            def build(now_ms: int, job_id_of: Callable[[int], str] | None) -> list[JobSpec]:
                return [pipeline.spec(queue, job, now_ms, key, traceparent=span.traceparent,
                                      job_id=None if job_id_of is None else job_id_of(i))
                        for i, job in enumerate(request.jobs)]

            def answer(specs: Sequence[JobSpec]) -> BatchAccepted:
                span.set(jobs=len(specs))
                return BatchAccepted(queue=queue,
                                     jobs=[Accepted(job_id=s.job_id, queue=queue) for s in specs])

            return self._enqueue(key, "enqueue_batch", queue, request, request.jobs, build, answer,
                                 BatchAccepted, remaining_ms)

    def _enqueue(self, key: str | None, op: str, queue: str, request: EnqueueRequest | BatchRequest,
                 jobs: Sequence[EnqueueRequest],
                 build: Callable[[int, Callable[[int], str] | None], list[JobSpec]],
                 answer: Callable[[Sequence[JobSpec]], Accepted | BatchAccepted],
                 model: type[Accepted] | type[BatchAccepted],
                 remaining_ms: Callable[[], int] | None) -> Enqueued:
        """Admit, build and append ``request``'s jobs now, or at most once per Idempotency-Key
        (``sluice.gateway.keyed``: a repeat answers the same jobs). The plain path builds no
        fingerprint and touches no key store."""
        if key is None or self._once is None:
            self.pipeline.admit(queue, jobs)
            specs = build(self.clock(), None)
            self._accept(specs)
            return Enqueued(answer(specs))
        made, replayed = self._once.run(KeyedRequest(
            key, op, queue, request.model_dump(mode="json"), lambda: self.pipeline.admit(queue, jobs), build),
            remaining_ms)
        return Enqueued(model.model_validate(made) if isinstance(made, dict) else answer(made), replayed)

    def _accept(self, specs: Sequence[JobSpec]) -> None:
        try:
            self.pipeline.append(specs)
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

    def enqueue_children(self, request: FamilyRequest, caller: Caller | None = None) -> FamilyAccepted:
        """A leased job's children (and continuation); see ``sluice.gateway.families``. They join the
        parent's trace: the enqueue span's parent is the parent's handler span (``request.traceparent``,
        ignored unless valid), and every child and the continuation carry the enqueue span's."""
        from sluice.gateway import families as family_cases

        first = request.jobs[0].queue if request.jobs else request.then.queue if request.then else ""
        with traces.span(self.spans, "enqueue_children", traces.carried(request.traceparent), first) as span:
            span.set(parent=request.parent_id, jobs=len(request.jobs))
            return family_cases.enqueue_children(self, request, caller or self.anonymous(),
                                                 traceparent=span.traceparent)

    def release_continuation(self, continuation: str) -> bool:
        from sluice.gateway import families as family_cases

        return family_cases.release_continuation(self, continuation)

    def _count_down(self, event: JobEnded) -> None:
        """A cancel ended a child: count it on its continuation here, in the gateway.

        Called for this Api's own ending, not subscribed: the bus may be the process's one bus,
        which outlives this Api and carries the worker's and the relay's endings (they count
        theirs). A failure is logged, not raised: the cancel stands, and the jobs table's
        stream counts the child again (``CountdownFunction``)."""
        if self._families is None:
            return
        from sluice.core.families import Countdown
        from sluice.gateway import families as family_cases

        try:
            Countdown(family_cases.families_of(self), self.release_continuation).on_ended(event)
        except SluiceError as exc:
            log.warning("could not count cancelled job %s on its continuation: %s", event.job, exc)

    # -- reads and cancel ------------------------------------------------------------------

    def minted(self, job_id: str, *, held: bool = False) -> ids.Minted | None:
        """Queue and acceptance time of an id this gateway issued within the horizon, else None.

        ``held``: else, of an id of a minted or keyless shape that its queue holds live in Redis
        (``_held``). Raises the queue's errors then."""
        found = self.verifier.verify(job_id)
        if found is not None and self.clock() - found.accepted_at_ms <= self.id_horizon_ms:
            if is_reserved_queue(found.queue):  # minted before the prefix was reserved: not a caller's job
                raise JobNotFound(f"no job {job_id}")
            return found
        return self._held(job_id) if held else None

    def _held(self, job_id: str) -> ids.Minted | None:
        """The job behind an id its queue holds live in Redis, whatever the horizon and the keys.

        The relay writes no ``queued`` item for a keyed id (issue 33, ``relay.status.needs_item``), so
        until its grant a job has none; one that waits longer than the horizon (a queue held for
        weeks), or past two key rotations, would otherwise read and cancel as 404 while it is still
        to run. Redis holding it is the proof: the relay checked its id (or its seal) when it pushed
        it. Its acceptance time is its id's ULID's."""
        queue = ids.shaped_queue(job_id)
        if queue is None or is_reserved_queue(queue) or not self.queue.holds(queue, job_id):
            return None
        accepted = ids.ulid_time_ms(job_id.split(".", 1)[0])
        return ids.Minted(queue, min(accepted or 0, self.clock()))

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
            minted = self.minted(job_id, held=True)
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
            from sluice.gateway import families as family_cases

            families = family_cases.families_of(self)
            record.waits_for = families.waits_for(job_id)
            left = families.children_left(job_id)  # its item's remaining counts buckets (issue 30)
            record.remaining = record.remaining if left is None else left
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
            # The store says cancelled: a job Redis dead-lettered meanwhile goes too (item 8).
            outcome = self.queue.cancel(record.queue, job_id, settle=leased,
                                        cancelled=record.status is JobState.CANCELLED)
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
            try:
                return self.store.request_cancel(job_id)
            except JobNotFound:
                minted = self.minted(job_id, held=True)  # still waiting in Redis, with no item
                if minted is None:
                    raise
        # Ours and possibly not recorded yet: a cancelled item, created if the relay has not
        # made one (it then skips the job); an existing item is cancelled as request_cancel does.
        return self.store.cancel_unrecorded(job_id, minted.queue, CANCELLED_BEFORE_RELAY,
                                            minted.accepted_at_ms)

    def stats(self, queue: str) -> QueueView:
        validate_public_queue(queue)
        route = self._route_view(queue)
        stats = self.queue.stats(queue)
        config = stats.config  # read in the same atomic script as the depths
        registry = self.pipeline.registry  # the relay's parked counter: one item, never the lot
        parked = registry.parked_of(queue) if registry is not None else ParkedState()
        return QueueView(
            queue=queue, ready=stats.ready, delayed=stats.delayed, leased=stats.leased, dead=stats.dead,
            oldest_ready_age_ms=stats.oldest_ready_age_ms, paused=config.paused,
            rate_per_s=config.rate_per_s, burst=config.burst, max_in_flight=config.max_in_flight,
            max_in_flight_per_group=config.max_in_flight_per_group,
            high_watermark=config.high_watermark, low_watermark=config.low_watermark,
            max_delayed=self.limits.caps(config)[0], max_dead=self.limits.caps(config)[1],
            used_bytes=stats.used_bytes, budget_bytes=self.limits.budget(config), route=route,
            parked=parked.parked, parked_at_ms=parked.parked_at_ms,
        )

    def _route_view(self, queue: str) -> QueueRoute | None:
        """The queue's route; None: the default worker. A queue no route covers, when routes are
        known and unrouted queues are refused, is 404 NO_ROUTE here as at enqueue: nobody runs it,
        and "the default worker" would say otherwise."""
        route = self.pipeline.route(queue)
        if route is None:
            return None
        return QueueRoute(pattern=route.pattern, function=route.function, owner=route.owner,
                          payload_schema=route.schemas.get(queue))
