"""Finishing one attempt: write and ack, or record the failure and hand the job back.

"Finish" is the worker's word; "settle" is only the relay's (copying an ending Redis made
into the jobs table). See the glossary in docs/design.md.

Order matters. The durable record (DynamoDB) is written first and Redis second, so
a crash in between leaves a job that Redis will hand out again, never a job that
Redis forgot while the store still says "leased". A write that is rejected for a
stale token proves another worker was granted the job: nothing further is sent
for it, not even an ack, because our Redis lease token may by then name someone
else's lease (Redis tokens can repeat after a failover; see docs/worker.md).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from sluice.core import bus as ev
from sluice.core import policy
from sluice.core.clock import wall_ms
from sluice.core.errors import (
    AlreadyFinished,
    BackendUnavailable,
    JobCancelled,
    JobNotFound,
    LeaseLost,
    SluiceError,
    StaleToken,
)
from sluice.core.models import JobState, LeasedJob, WriteOutcome
from sluice.core.ports import JobQueue, JobStore
from sluice.worker.runtime.heartbeat import Heartbeat, Tracked
from sluice.worker.runtime.outcomes import Outcome
from sluice.worker.runtime.telemetry import JobLogger

T = TypeVar("T")

# What the engine says when our Redis lease is gone: taken over, reclaimed, or the job acked by
# its new holder (its hash deleted).
GONE = (LeaseLost, JobNotFound)


@dataclass(frozen=True, slots=True)
class Attempt:
    """One granted attempt: the lease, its fencing token, its bound logger, and its handler's retry
    policy (None: no handler, or one without a policy)."""

    tracked: Tracked
    token: int
    log: JobLogger
    retry: policy.RetryPolicy | None = None

    @property
    def max_attempts(self) -> int:
        """The job's attempts, its caller's and its handler's policy's combined (``attempts_allowed``)."""
        return policy.attempts_allowed(self.leased.max_attempts,
                                       None if self.retry is None else self.retry.max_attempts)

    @property
    def leased(self) -> LeasedJob:
        return self.tracked.leased


class Finisher:
    def __init__(self, queue: JobQueue, store: JobStore, heartbeat: Heartbeat,
                 *, attempts: int = 3, rng: random.Random | None = None,
                 retry_base_ms: int = policy.BASE_BACKOFF_MS,
                 retry_cap_ms: int = policy.MAX_BACKOFF_MS, events: ev.EventBus) -> None:
        self.queue = queue
        self.store = store
        self.heartbeat = heartbeat
        self._attempts = attempts
        self._rng = rng
        self._backoff = (retry_base_ms, retry_cap_ms)
        self.events = events  # the drain's bus: its metrics and lifecycle logs observe it

    def retrying(self, call: Callable[[], T]) -> T:
        """``call`` again after BackendUnavailable; only for calls that are safe to repeat."""
        for i in range(self._attempts):
            try:
                return call()
            except BackendUnavailable:
                if i == self._attempts - 1:
                    raise
                time.sleep(0.05 * 2**i)
        raise AssertionError("unreachable")

    # -- observed calls: one event per call (each retry too), as the call returned or raised -------

    def _redis(self, kind: type[ev.LeaseCall], job: LeasedJob, call: Callable[[], T],
               ok: Callable[[T], str] = lambda _r: "ok") -> T:
        fields = {"job": job.job_id, "queue": job.queue, "lease": job.lease_token}
        return self.retrying(lambda: ev.timed(self.events, call, kind, fields, ok=ok))

    def _ack(self, job: LeasedJob) -> None:
        self._redis(ev.Acked, job, lambda: self.queue.ack(job.queue, job.job_id, job.lease_token))

    def _finished(self, a: Attempt, outcome: Outcome, detail: str = "",
                  retry_after_ms: int | None = None) -> Outcome:
        job = a.leased
        self.events.emit(ev.Finished(job=job.job_id, queue=job.queue, lease=job.lease_token,
                                     attempt=job.attempt, token=a.token, outcome=outcome.value,
                                     detail=detail, retry_after_ms=retry_after_ms))
        return outcome

    def _lease_gone(self, a: Attempt, why: str, *, again: bool = False) -> None:
        job = a.leased
        self.events.emit(ev.LeaseGone(job=job.job_id, queue=job.queue, lease=job.lease_token,
                                      attempt=job.attempt, token=a.token, why=why, again=again))

    def _ended(self, a: Attempt, state: JobState) -> None:
        job = a.leased
        self.events.emit(ev.JobEnded(job=job.job_id, queue=job.queue, state=state.value, source="worker",
                                     redrive_gen=job.redrive_gen, token=a.token, attempts=job.attempt,
                                     created_at_ms=job.enqueued_at_ms,
                                     ended_at_ms=wall_ms()))

    # -- success --------------------------------------------------------------------------------

    def succeed(self, a: Attempt, result: Any) -> Outcome:
        if a.tracked.state.lease_lost.is_set():
            return self.lost(a, "result discarded: the lease was lost while the handler ran")
        job = a.leased
        self.events.emit(ev.ResultWriting(job=job.job_id, queue=job.queue, token=a.token))
        fields = {"job": job.job_id, "token": a.token, "result": result}
        try:
            written = self.retrying(lambda: ev.timed(
                self.events, lambda: self.store.write_result(job.job_id, a.token, result), ev.ResultWritten,
                fields, ok=str, refused=ev.ResultRefused))
        except StaleToken as exc:
            return self.lost(a, f"fenced write rejected: token {exc.mine} is stale, current is {exc.current}")
        except JobCancelled:
            return self.cancelled_meanwhile(a)
        except SluiceError as exc:
            return self.unsettled(a, f"result write failed: {exc}")
        if written is WriteOutcome.WRITTEN:
            self._ended(a, JobState.SUCCEEDED)
        self.events.emit(ev.Acking(job=job.job_id, queue=job.queue, lease=job.lease_token, token=a.token))
        self.heartbeat.untrack(a.tracked)  # the ack ends the lease; a late renewal must not cry "lost"
        try:
            self._ack(job)
        except GONE as exc:
            # The result is stored; the job will run again and write an equal result.
            self._lease_gone(a, f"ack rejected after the result was written ({exc}); the job will run again")
        except SluiceError as exc:
            a.log.error("ack failed after the result was written (%s); the lease will lapse", exc)
        return self._finished(a, Outcome.SUCCEEDED, str(written))

    # -- failure --------------------------------------------------------------------------------

    def fail(self, a: Attempt, error: str, *, kind: str, retry_after_ms: int | None = None) -> Outcome:
        """``kind``: "error" and "retry" follow the retry policy, "failed" and "dead" are final."""
        if a.tracked.state.cancel_requested.is_set():
            return self.cancel(a, f"cancelled: {error}")
        job = a.leased
        status, outcome = JobState.QUEUED, Outcome.RETRIED
        if kind == "failed":
            status, outcome = JobState.FAILED, Outcome.FAILED
        elif kind == "dead" or policy.retry_or_dead(job.attempt, a.max_attempts) == "dead":
            status, outcome = JobState.DEAD, Outcome.DEAD
        elif retry_after_ms is None:
            window = None if a.retry is None else a.retry.backoff_window_ms()
            base_ms, cap_ms = window or self._backoff
            retry_after_ms = policy.backoff_ms(job.attempt, base_ms=base_ms, cap_ms=cap_ms, rng=self._rng)
        ended = self._record(a, error, status)
        if ended is not None:
            return ended
        self.heartbeat.untrack(a.tracked)
        permanent = status in (JobState.FAILED, JobState.DEAD)
        if permanent:
            self._ended(a, status)
        try:
            self._redis(ev.FailReported, job, lambda: self.queue.fail(
                job.queue, job.job_id, job.lease_token, error,
                retry_after_ms=None if permanent else retry_after_ms, permanent=permanent), ok=str)
        except GONE as exc:
            self._lease_gone(a, f"fail rejected ({exc})")
            return self._finished(a, Outcome.LEASE_LOST, f"fail rejected ({exc})")
        except SluiceError as exc:
            a.log.error("could not hand the job back (%s); the lease will lapse", exc)
            return Outcome.UNSETTLED
        return self._finished(a, outcome, error, retry_after_ms)

    def cancel(self, a: Attempt, why: str) -> Outcome:
        ended = self._record(a, why, JobState.CANCELLED)
        if ended is not None:
            return ended
        self._ended(a, JobState.CANCELLED)
        return self.cancelled_meanwhile(a)

    def cancelled_meanwhile(self, a: Attempt) -> Outcome:
        """The store says cancelled: drop the job from Redis (an ack removes it)."""
        self.heartbeat.untrack(a.tracked)
        try:
            self._ack(a.leased)
        except SluiceError as exc:
            a.log.warning("could not remove the cancelled job from the queue: %s", exc)
        return self._finished(a, Outcome.CANCELLED)

    def _record(self, a: Attempt, error: str, status: JobState) -> Outcome | None:
        """Write the failure to the store first. None if recorded, else how the attempt ended."""
        try:
            job = a.leased
            self.retrying(lambda: ev.timed(
                self.events, lambda: self.store.record_failure(job.job_id, a.token, error, status.value),
                ev.FailureRecorded, {"job": job.job_id, "token": a.token, "status": status.value}))
            return None
        except StaleToken as exc:
            return self.lost(a, f"fenced failure record rejected: token {exc.mine} "
                                f"is stale, current is {exc.current}")
        except JobCancelled:
            return self.cancelled_meanwhile(a)
        except AlreadyFinished:
            return self.succeeded_before(a.tracked, a.log, "its failure is not recorded")
        except SluiceError as exc:
            return self.unsettled(a, f"could not record the failure: {exc}")

    def succeeded_before(self, tracked: Tracked, log: JobLogger, what: str) -> Outcome:
        """A re-run of a job that already succeeded (its worker died before the ack) ended
        without a result: the stored result stands, so the job is done; an ack removes it."""
        refused = self._tell_redis(tracked, log, "ack of an already succeeded job", self._ack)
        if refused is not None:
            return refused
        log.info("re-run of an already succeeded job ended; %s, the stored result stands", what)
        return Outcome.SUCCEEDED

    def finished_before(self, tracked: Tracked, log: JobLogger, exc: AlreadyFinished) -> Outcome:
        """The grant refused a job whose item is already failed or dead (no newer redrive): an
        earlier attempt wrote that verdict and died before Redis heard of it, so its lease
        lapsed and the job came back. It must not run again; Redis gets the same verdict
        (dead-lettered, no settle entry: the store already knows), so an operator can still
        redrive it. Nothing loops: the job leaves the ready set for good."""
        def dead_letter(job: LeasedJob) -> None:
            self._redis(ev.FailReported, job, lambda: self.queue.fail(
                job.queue, job.job_id, job.lease_token, f"not run again: {exc}", permanent=True), ok=str)

        refused = self._tell_redis(tracked, log, "dead-lettering an already finished job", dead_letter)
        if refused is not None:
            return refused
        log.warning("job already %s in the store: not run again, dead-lettered in Redis",
                    exc.details.get("status"))
        return Outcome.DEAD

    def _tell_redis(self, tracked: Tracked, log: JobLogger, what: str,
                    call: Callable[[LeasedJob], None]) -> Outcome | None:
        """End the lease of a job whose verdict the store already holds with ``call``: None once
        Redis took it, else how the attempt ended (lease lost, or unsettled: the lease lapses)."""
        self.heartbeat.untrack(tracked)
        try:
            call(tracked.leased)
        except GONE as exc:
            log.warning("lease lost: %s rejected (%s)", what, exc)
            return Outcome.LEASE_LOST
        except SluiceError as exc:
            log.error("%s failed (%s); the lease will lapse", what, exc)
            return Outcome.UNSETTLED
        return None

    # -- no verdict -------------------------------------------------------------------------------

    def lost(self, a: Attempt, why: str) -> Outcome:
        self.heartbeat.untrack(a.tracked)
        again = a.tracked.state.lease_lost.is_set()  # the heartbeat (or the handler) saw it first
        a.tracked.state.lease_lost.set()
        self._lease_gone(a, why, again=again)
        return self._finished(a, Outcome.LEASE_LOST, why)

    def unsettled(self, a: Attempt, why: str) -> Outcome:
        """Neither store nor queue can be trusted right now: let the lease lapse; reap retries it."""
        self.heartbeat.untrack(a.tracked)
        return self._finished(a, Outcome.UNSETTLED, why)

    def release(self, tracked: Tracked, log: JobLogger, token: int | None, why: str) -> Outcome:
        """Give a lease back without using up an attempt (Redis, and the store if granted)."""
        self.heartbeat.untrack(tracked)
        if tracked.state.lease_lost.is_set():
            return Outcome.LEASE_LOST
        job = tracked.leased
        try:
            if token is not None:
                granted = token
                self.retrying(lambda: ev.timed(self.events, lambda: self.store.release(job.job_id, granted),
                                               ev.GrantReleased, {"job": job.job_id, "token": granted}))
            self._redis(ev.Released, job, lambda: self.queue.release(job.queue, job.job_id, job.lease_token))
        except AlreadyFinished:
            return self.succeeded_before(tracked, log, "it was not finished again")
        except GONE as exc:
            log.warning("lease lost: release rejected (%s)", exc)
            return Outcome.LEASE_LOST
        except SluiceError as exc:
            log.error("release failed (%s); the lease will lapse", exc)
            return Outcome.UNSETTLED
        return self._finished(Attempt(tracked, token or 0, log), Outcome.RELEASED, why)
