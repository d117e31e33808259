"""One leased job from grant to verdict: the worker's per-job use case.

The Redis lease says who may work on the job right now; the grant from the jobs
table (DynamoDB) mints the fencing token that every write carries. Handler
outcomes map to states as follows (docs/worker.md has the table):

- returns a JSON-able value: result written with the token, then acked -> succeeded
- returns something JSON cannot hold: a handler error (InvalidInput message)
- raises ``Retry(after)``: queued again after ``after`` s (dead once attempts run out)
- raises ``Fail(reason)``: failed, no retries
- a typed queue's payload does not validate against its model: ``Fail`` with the errors
- its payload is in S3 (``sluice.core.payloads``) and cannot be read, or is not the object its
  record sealed: retried with backoff, dead at max_attempts; the handler is not called
- raises anything else, or overruns its hard timeout: retried with backoff, dead at max_attempts;
  an error its handler's ``RetryPolicy`` does not retry (``fail_on``, or not in ``retry_on``): failed
- max_attempts: the caller's and the handler's policy's, the lower (``policy.attempts_allowed``)
- no handler for the queue: dead, with that reason
- cancel requested before it starts: cancelled; while it runs and it then raises: cancelled
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sluice.core import bus as ev
from sluice.core import errors, payloads, policy
from sluice.core.clock import wall_ms
from sluice.core.families import FamilyGateway, FamilyStore
from sluice.core.lazy import Lazy, resolve
from sluice.core.models import Job, LeasedJob, dump_json
from sluice.core.ports import JobStore, PayloadStore
from sluice.core.traces import HandlerTraces
from sluice.worker.runtime.context import FencedTableFactory, JobContext
from sluice.worker.runtime.finish import Attempt, Finisher
from sluice.worker.runtime.heartbeat import Tracked
from sluice.worker.runtime.invoke import Invocation, invoke
from sluice.worker.runtime.options import HandlerSpec, WorkerOptions
from sluice.worker.runtime.outcomes import Fail, Outcome, Retry
from sluice.worker.runtime.progress import Progress


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class JobRunner:
    def __init__(self, finisher: Finisher, store: JobStore, options: WorkerOptions, worker_id: str, *,
                 fenced: FencedTableFactory | None = None, now_ms: Callable[[], int] = wall_ms,
                 family_gateway: FamilyGateway | None = None,
                 families: FamilyStore | Lazy[FamilyStore] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 payloads: PayloadStore | Lazy[PayloadStore] | None = None,
                 traces: HandlerTraces | None = None) -> None:
        self.finisher = finisher
        self.store = store
        self.options = options
        self.worker_id = worker_id
        self._fenced = fenced
        self._now_ms = now_ms
        self._family_gateway = family_gateway
        self._clock = clock  # monotonic seconds, the heartbeat's clock
        self._families = families  # the jobs table's families, for ctx.children(); None: none
        self._payloads = payloads  # where large payloads live; None: a pointer cannot be resolved
        self._traces = traces  # the handler spans' contexts (sluice.backends.otel); None: not traced here

    def run(self, tracked: Tracked, spec: HandlerSpec | None) -> Outcome:
        job = tracked.leased
        if tracked.state.lease_lost.is_set():
            return Outcome.LEASE_LOST  # lost while it waited in the local batch
        remaining_ms = (tracked.state.expires_at - self._clock()) * 1000
        if remaining_ms <= 0:
            # Lapsed unrenewed (the process was frozen, or Redis unreachable) and the heartbeat has
            # not said so yet. A grant now would only mint a token for a lease someone else may
            # hold, and make that holder's writes stale. So do not grant; the job comes back.
            return self.finisher.lost(Attempt(tracked, 0, tracked.log), "the lease lapsed before the grant")
        o = self.options
        if not policy.can_grant(remaining_ms, job.lease_ms, o.grant_margin_ms, o.heartbeat_fraction):
            # Still ours, but a grant might land after it lapsed and after another worker's
            # grant, making that worker stale (policy.grant_margin_ms). Give it back unrun.
            margin = policy.grant_margin_ms(job.lease_ms, o.grant_margin_ms, o.heartbeat_fraction)
            why = f"only {remaining_ms:.0f} ms of lease left, {margin} ms needed to grant"
            return self.finisher.release(tracked, tracked.log, None, why)
        try:
            token = self._grant(job)
        except errors.AlreadyFinished as exc:
            # Failed or dead in the store, yet back in Redis (its worker wrote the verdict and
            # died before telling Redis): finish what it started, without running it again.
            return self.finisher.finished_before(tracked, tracked.log, exc)
        except errors.JobCancelled:
            # Cancelled in the store while queued: the grant refused it; drop it from Redis.
            return self.finisher.cancelled_meanwhile(Attempt(tracked, 0, tracked.log))
        except errors.LeaseLost as exc:
            # A newer lease was granted (this worker paused past its margin and its lease was taken
            # over), or the job ran under a newer redrive since: its Redis lease is someone else's or
            # gone. Nothing to give back; nothing runs. (Were Redis still to say it is ours, the lease
            # lapses and is reclaimed as an attempt, rather than be released to be refused again.)
            return self.finisher.lost(Attempt(tracked, 0, tracked.log), f"the grant was refused: {exc}")
        except (errors.BackendUnavailable, errors.SluiceError) as exc:
            # A grant is not idempotent (it mints a token), so no blind retry: hand the job back.
            return self.finisher.release(tracked, tracked.log, None, f"grant failed: {exc}")
        a = Attempt(tracked, token, tracked.log.bind(token=token), None if spec is None else spec.retry)
        if self._clock() >= tracked.state.expires_at:
            return self.finisher.lost(a, "the lease lapsed while the grant was in flight")
        handed = self._handed(a, job, spec)
        if isinstance(handed, Outcome):
            return handed
        assert spec is not None  # _handed ended the attempt without one
        if handed.max_attempts != a.max_attempts:  # the caller's and the handler's policy's, combined
            handed = handed.model_copy(update={"max_attempts": a.max_attempts})
        timeout_ms = spec.timeout_for(self.options)
        ctx = JobContext(job_id=job.job_id, queue=job.queue, attempt=job.attempt,
                         max_attempts=a.max_attempts, token=token, lease_token=job.lease_token,
                         worker_id=self.worker_id, logger=a.log,
                         timeout_at=self._clock() + timeout_ms / 1000, _lease=tracked.state,
                         _fenced=self._fenced, _progress=self._progress(job.job_id, token),
                         _family_gateway=self._family_gateway, _families=self._families, _clock=self._clock,
                         _events=self.finisher.events, _trace=self._trace_of(job))
        waited = max(0, self._now_ms() - job.enqueued_at_ms) if job.enqueued_at_ms else None
        events = self.finisher.events
        events.emit(ev.HandlerStarted(job=job.job_id, queue=job.queue, token=token, attempt=job.attempt,
                                      lease=job.lease_token, queue_wait_ms=waited))
        inv = invoke(spec.call, handed, ctx, timeout_ms / 1000)
        if not inv.timed_out:  # a timed-out handler's thread lives on: its lease is given up
            self._flush_progress(ctx)
        outcome = "timed_out" if inv.timed_out else "returned" if inv.error is None else "raised"
        events.emit(ev.HandlerEnded(job=job.job_id, queue=job.queue, token=token, outcome=outcome,
                                    duration_ms=inv.duration_ms,
                                    error="" if inv.error is None else ev.error_text(inv.error),
                                    stale_token=isinstance(inv.error, errors.StaleToken)))
        return self._verdict(a, inv, timeout_ms)

    def _handed(self, a: Attempt, job: LeasedJob, spec: HandlerSpec | None) -> Job | Outcome:
        """The job as its handler sees it, its payload pointer resolved (``sluice.core.payloads``);
        or the attempt's outcome when there is no handler, a cancel came first, or the payload
        cannot be resolved (missing, mismatching, S3 unreachable: retried per policy). The
        handler is never called with anything but the payload the record sealed."""
        if spec is None:
            return self.finisher.fail(a, f"no handler registered for queue {job.queue!r}", kind="dead")
        if a.tracked.state.cancel_requested.is_set():
            return self.finisher.cancel(a, "cancelled before it started")
        try:
            if payloads.parse(job.payload) is None:
                return job.as_job()
            get = None if self._payloads is None else resolve(self._payloads).get
            payload = payloads.resolve(job.payload, job.queue, job.job_id, get)
        except errors.SluiceError as exc:
            return self.finisher.fail(a, f"payload: {exc}", kind="error")
        return job.model_copy(update={"payload": payload}).as_job()

    def _trace_of(self, job: LeasedJob) -> Callable[[], str | None]:
        """``JobContext.traceparent``: the handler span's, once it is started, else the job's own."""
        traces = self._traces
        if traces is None:
            return lambda: job.traceparent
        return lambda: traces.handler_traceparent(job.job_id) or job.traceparent

    def _progress(self, job_id: str, token: int) -> Progress:
        return Progress(self.store.write_progress, job_id, token, every_ms=self.options.progress_every_ms,
                        now_ms=self._now_ms)

    @staticmethod
    def _flush_progress(ctx: JobContext) -> None:
        """The throttle's kept-back report, before the verdict; a refusal changes no verdict
        (the verdict's own fenced write says whether this holder is stale)."""
        if ctx._progress is not None:
            try:
                ctx._progress.flush()
            except errors.SluiceError as exc:
                ctx.logger.warning("last progress report not written: %s", exc)

    def _grant(self, job: LeasedJob) -> int:
        return ev.timed(self.finisher.events,
                        lambda: self.store.grant(job.job_id, job.queue, self.worker_id, job.redrive_gen,
                                                 lease_token=job.lease_token),
                        ev.Granted, {"job": job.job_id, "queue": job.queue, "owner": self.worker_id},
                        details=lambda token: {"token": token})

    def _verdict(self, a: Attempt, inv: Invocation, timeout_ms: int) -> Outcome:
        s = self.finisher
        if inv.timed_out:
            # Stop renewing at once and tell a cooperative handler to stop; the thread lives on.
            s.heartbeat.untrack(a.tracked)
            a.tracked.state.lease_lost.set()
            why = f"hard timeout: the handler ran longer than {timeout_ms / 1000:g} s"
            return s.fail(a, why, kind="error")
        exc = inv.error
        if exc is None:
            try:
                dump_json(inv.result)
            except errors.InvalidInput as bad:
                return s.fail(a, f"InvalidInput: the handler's result cannot be stored: {bad}", kind="error")
            return s.succeed(a, inv.result)
        if isinstance(exc, Retry):
            return s.fail(a, exc.reason, kind="retry", retry_after_ms=exc.after_ms)
        if isinstance(exc, Fail):
            return s.fail(a, exc.reason, kind="failed")
        if isinstance(exc, errors.StaleToken):  # a FencedTable write of the handler was refused (counted)
            return s.lost(a, f"the handler's fenced write was rejected: {exc}")
        if isinstance(exc, errors.LeaseLost):
            return s.lost(a, f"the handler reported a lost lease: {exc}")
        if isinstance(exc, errors.JobCancelled):
            return s.cancel(a, f"cancelled while running: {exc}")
        a.log.error("handler raised %s", describe(exc), exc_info=exc)
        if a.retry is not None and a.retry.ends_at_once(exc):  # fail_on, or not in retry_on
            return s.fail(a, f"{describe(exc)} (not retried: the handler's RetryPolicy)", kind="failed")
        return s.fail(a, describe(exc), kind="error")
