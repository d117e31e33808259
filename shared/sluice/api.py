"""The gateway's use-cases: enqueue, enqueue_batch, status, cancel, stats.

Pure orchestration over the ports (``JobLog``, ``JobStore``, ``JobQueue``) and an
idempotency guard; no client library is imported here. The HTTP layer
(``sluice.http.app``) parses and validates, then calls exactly one method.

Enqueue order, and why:

1. Build the specs (server-side job ids) and check payload sizes. Nothing written yet.
2. Append to Kafka and, *at the same time*, create the status items (``record_accepted``).
   Overlapping the two writes hides the faster one's latency.
3. Only after Kafka acknowledged every record is the job reported accepted.
   If Kafka failed or timed out, the record may or may not have landed, so the status
   items are moved to ``cancelled``: the relay skips final jobs, so a 503 means the job
   will not run, and a client retry cannot make it run twice. Nobody has seen these job
   ids yet, so nobody ever observes the brief ``accepted`` state.
4. If the status write failed but Kafka acknowledged, the job is durable and will run
   (the relay's ``mark_queued`` creates a missing item); the answer is still 202.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from sluice.errors import AlreadyFinished, JobNotFound, SluiceError
from sluice.http.jsonguard import PayloadTooLarge
from sluice.http.models import (
    Accepted,
    BatchAccepted,
    BatchRequest,
    CancelAccepted,
    EnqueueRequest,
    JobView,
    QueueView,
)
from sluice.models import JobSpec, JobState, dump_json, validate_job_id, validate_queue_name
from sluice.ports import JobLog, JobQueue, JobStore

log = logging.getLogger(__name__)

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_job_id(now_ms: int, entropy: bytes | None = None) -> str:
    """A ULID: 48-bit millisecond time + 80 random bits, 26 Crockford base32 characters.

    Time-ordered, so ids sort by acceptance time and DynamoDB/Kafka keys spread evenly
    (the random tail, not the clock, picks the partition).
    """
    rand = entropy if entropy is not None else os.urandom(10)
    value = ((now_ms & (2**48 - 1)) << 80) | int.from_bytes(rand[:10], "big")
    return "".join(_CROCKFORD[(value >> shift) & 31] for shift in range(125, -1, -5))


class Idempotency(Protocol):
    """Runs an action at most once per key (see ``sluice.http.idempotency``)."""

    def run(self, key: str, fingerprint: Mapping[str, Any], action: Callable[[], dict[str, Any]],
            remaining_ms: Callable[[], int] | None = None) -> tuple[dict[str, Any], bool]:
        """Return (result, replayed).

        Raises IdempotencyConflict when the key was used with a different fingerprint,
        InProgress while the first request with the key is still running, and
        BackendUnavailable when the key store cannot be reached.
        """
        ...


@dataclass(frozen=True, slots=True)
class Outcome:
    """What an enqueue returns; ``replayed`` means an earlier request with the key made it."""

    body: Accepted | BatchAccepted
    replayed: bool = False


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Api:
    def __init__(self, log: JobLog, store: JobStore, queue: JobQueue, *,
                 idempotency: Idempotency | None = None, max_payload_bytes: int = 256 * 1024,
                 clock: Callable[[], int] = _now_ms, new_id: Callable[[int], str] = new_job_id,
                 status_writers: int = 8) -> None:
        self.log = log
        self.store = store
        self.queue = queue
        self.idempotency = idempotency
        self.max_payload_bytes = max_payload_bytes
        self.clock = clock
        self.new_id = new_id
        # Created once per container: status writes overlap the Kafka append (module docstring).
        self._pool = ThreadPoolExecutor(max_workers=status_writers, thread_name_prefix="sluice-status")

    # -- enqueue ---------------------------------------------------------------------------

    def enqueue(self, queue: str, request: EnqueueRequest, *, idempotency_key: str | None = None,
                remaining_ms: Callable[[], int] | None = None) -> Outcome:
        validate_queue_name(queue)
        self._check_size(request, index=None)

        def action() -> dict[str, Any]:
            spec = self._spec(queue, request, self.clock(), idempotency_key)
            self._accept([spec])
            return Accepted(job_id=spec.job_id, queue=queue).model_dump(mode="json")

        if idempotency_key is None or self.idempotency is None:
            return Outcome(Accepted.model_validate(action()))
        fingerprint = {"op": "enqueue", "queue": queue, "request": request.model_dump(mode="json")}
        result, replayed = self.idempotency.run(idempotency_key, fingerprint, action, remaining_ms)
        return Outcome(Accepted.model_validate(result), replayed)

    def enqueue_batch(self, queue: str, request: BatchRequest, *, idempotency_key: str | None = None,
                      remaining_ms: Callable[[], int] | None = None) -> Outcome:
        validate_queue_name(queue)
        for index, job in enumerate(request.jobs):
            self._check_size(job, index=index)

        def action() -> dict[str, Any]:
            now = self.clock()
            specs = [self._spec(queue, job, now, idempotency_key) for job in request.jobs]
            self._accept(specs)
            accepted = [Accepted(job_id=s.job_id, queue=queue) for s in specs]
            return BatchAccepted(queue=queue, jobs=accepted).model_dump(mode="json")

        if idempotency_key is None or self.idempotency is None:
            return Outcome(BatchAccepted.model_validate(action()))
        fingerprint = {"op": "enqueue_batch", "queue": queue, "request": request.model_dump(mode="json")}
        result, replayed = self.idempotency.run(idempotency_key, fingerprint, action, remaining_ms)
        return Outcome(BatchAccepted.model_validate(result), replayed)

    def _check_size(self, request: EnqueueRequest, index: int | None) -> None:
        size = len(dump_json(request.payload).encode("utf-8"))
        if size > self.max_payload_bytes:
            where = "payload" if index is None else f"job {index}: payload"
            raise PayloadTooLarge(f"{where} is {size} bytes as JSON; the limit is {self.max_payload_bytes}",
                                  index=index)

    def _spec(self, queue: str, request: EnqueueRequest, now_ms: int, key: str | None) -> JobSpec:
        return JobSpec(
            job_id=self.new_id(now_ms),
            queue=queue,
            payload=request.payload,
            priority=request.priority,
            max_attempts=request.max_attempts,
            lease_ms=request.lease_seconds * 1000,
            run_at_ms=now_ms + request.delay_seconds * 1000 if request.delay_seconds else 0,
            enqueued_at_ms=now_ms,
            idempotency_key=key,
        )

    def _accept(self, specs: Sequence[JobSpec]) -> None:
        recorded = [self._pool.submit(self.store.record_accepted, spec) for spec in specs]
        try:
            self.log.append(specs)
        except BaseException:
            self._withdraw(specs, recorded)
            raise
        for spec, future in zip(specs, recorded, strict=True):
            exc = future.exception()
            if exc is not None:  # durable in Kafka; the relay will create the item (step 4)
                log.warning("status item for accepted job %s not written: %r", spec.job_id, exc)

    def _withdraw(self, specs: Sequence[JobSpec], recorded: Sequence[Future[None]]) -> None:
        """Kafka did not acknowledge: make sure these jobs never run (module docstring, step 3)."""
        for spec, future in zip(specs, recorded, strict=True):
            if future.exception() is not None:
                continue  # no item was created; if the record landed anyway, see docs/api.md
            try:
                self.store.request_cancel(spec.job_id)
            except SluiceError as exc:
                log.error("could not withdraw unacknowledged job %s: %r", spec.job_id, exc)

    # -- reads and cancel ------------------------------------------------------------------

    def status(self, job_id: str) -> JobView:
        validate_job_id(job_id)
        record = self.store.get_job(job_id)
        return JobView(
            job_id=record.job_id, queue=record.queue, status=record.status, attempts=record.attempts,
            created_at_ms=record.created_at_ms, updated_at_ms=record.updated_at_ms,
            finished_at_ms=record.finished_at_ms, cancel_requested=record.cancel_requested,
            result=record.result, result_ref=record.result_ref, last_error=record.last_error,
        )

    def cancel(self, job_id: str) -> CancelAccepted:
        """Raises JobNotFound (404) or AlreadyFinished (409)."""
        validate_job_id(job_id)
        record = self.store.request_cancel(job_id)  # the store decides; Redis follows
        leased = record.status is JobState.LEASED
        try:
            self.queue.cancel(record.queue, job_id)
        except (JobNotFound, AlreadyFinished):
            pass  # not in Redis (still in Kafka: the relay skips final jobs) or it just ended
        except SluiceError as exc:
            if leased:
                # Only Redis can tell a running worker (on its next heartbeat). Fail with 503:
                # repeating the request is safe, flagging a leased job twice changes nothing.
                raise
            # The store says cancelled, so a worker's grant refuses the job; removing it
            # from Redis is housekeeping.
            log.warning("cancelled job %s not removed from its Redis queue: %r", job_id, exc)
        return CancelAccepted(job_id=job_id, status="cancel_requested" if leased else "cancelled")

    def stats(self, queue: str) -> QueueView:
        validate_queue_name(queue)
        stats = self.queue.stats(queue)
        config = stats.config  # read in the same atomic script as the depths
        return QueueView(
            queue=queue, ready=stats.ready, delayed=stats.delayed, leased=stats.leased, dead=stats.dead,
            oldest_ready_age_ms=stats.oldest_ready_age_ms, paused=config.paused,
            rate_per_s=config.rate_per_s, burst=config.burst, max_in_flight=config.max_in_flight,
            high_watermark=config.high_watermark, low_watermark=config.low_watermark,
        )
