"""One thread that keeps every lease this worker holds alive.

Leases are renewed from a dedicated thread, never from the handler's thread, so a
handler that never yields (a tight CPU loop holding the GIL) cannot starve them:
CPython forces a GIL hand-off every ``sys.getswitchinterval()`` (5 ms), which is
ample for a renewal every lease/3. This is BullMQ's "could not renew lock" failure,
designed out.

Jobs are tracked from the moment they are leased, not from when they start, so
jobs waiting in a local batch keep their leases too. When a renewal says the lease
is gone (``LeaseLost``/``StaleToken``) the job's ``lease_lost`` event is set and the
job is no longer renewed; the runtime then neither writes nor acks it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sluice.core import bus as ev
from sluice.core.errors import JobNotFound, LeaseLost
from sluice.core.models import LeasedJob
from sluice.core.policy import lease_plan
from sluice.core.ports import JobQueue
from sluice.worker.runtime.context import LeaseState
from sluice.worker.runtime.telemetry import JobLogger


@dataclass(eq=False)
class Tracked:
    leased: LeasedJob
    state: LeaseState
    interval_s: float
    next_due: float
    log: JobLogger
    active: bool = True


class Heartbeat:
    def __init__(self, queue: JobQueue, *, heartbeat_fraction: float = 1 / 3,
                 clock: Callable[[], float] = time.monotonic, events: ev.EventBus) -> None:
        """``events``: the drain's bus (``Renewed``, ``LeaseGone``), which its metrics and logs observe."""
        self._queue = queue
        self._events = events
        self._fraction = heartbeat_fraction
        self._clock = clock
        self._cond = threading.Condition()
        self._tracked: set[Tracked] = set()
        self._thread: threading.Thread | None = None
        self._stopping = False

    # -- registration (any thread) ------------------------------------------------------------

    def track(self, leased: LeasedJob, leased_at: float, log: JobLogger) -> Tracked:
        """Start renewing ``leased``; ``leased_at`` is the monotonic time the lease call began."""
        interval = lease_plan(leased.lease_ms, heartbeat_fraction=self._fraction).heartbeat_s
        state = LeaseState(deadline_ms=leased.deadline_ms, expires_at=leased_at + leased.lease_ms / 1000)
        if leased.cancel_requested:
            state.cancel_requested.set()
        tracked = Tracked(leased, state, interval, leased_at + interval, log)
        with self._cond:
            self._tracked.add(tracked)
            self._cond.notify()
        return tracked

    def untrack(self, tracked: Tracked) -> None:
        with self._cond:
            tracked.active = False
            self._tracked.discard(tracked)

    def __len__(self) -> int:
        with self._cond:
            return len(self._tracked)

    def held(self) -> list[Tracked]:
        """Every lease still being renewed (leased, and neither finished nor lost)."""
        with self._cond:
            return list(self._tracked)

    # -- the thread -------------------------------------------------------------------------------

    def start(self) -> None:
        with self._cond:
            if self._thread is not None:
                return
            self._stopping = False
            self._thread = threading.Thread(target=self._run, name="sluice-heartbeat", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
            thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._stopping:
                    return
                now = self._clock()
                due = [x for x in self._tracked if x.next_due <= now]
                if not due:
                    nxt = min((x.next_due for x in self._tracked), default=now + 1.0)
                    self._cond.wait(timeout=max(0.001, nxt - now))
                    continue
            for tracked in sorted(due, key=lambda x: x.next_due):
                self.beat(tracked)

    def beat(self, tracked: Tracked) -> None:
        """Renew one lease now (the thread calls this; tests may call it directly)."""
        if not tracked.active:
            return
        job = tracked.leased
        started = self._clock()
        try:
            extended = ev.timed(self._events, lambda: self._queue.extend(job.queue, job.job_id,
                                                                          job.lease_token, job.lease_ms),
                                ev.Renewed, {"job": job.job_id, "queue": job.queue, "lease": job.lease_token},
                                details=lambda e: {"deadline_ms": e.deadline_ms})
        except (LeaseLost, JobNotFound) as exc:  # NOT_FOUND: the new holder acked it
            self._lost(tracked, f"extend refused: {exc}")
            return
        except Exception as exc:  # Redis unreachable, timeouts: keep trying until the lease lapses
            if self._clock() >= tracked.state.expires_at:
                self._lost(tracked, f"lease lapsed while renewals failed: {exc}")
                return
            tracked.log.warning("heartbeat failed, retrying: %s", exc)
            with self._cond:
                tracked.next_due = self._clock() + tracked.interval_s / 3
            return
        with self._cond:
            if not tracked.active:
                return
            tracked.state.deadline_ms = extended.deadline_ms
            tracked.state.expires_at = started + job.lease_ms / 1000
            tracked.next_due = started + tracked.interval_s
        if extended.cancel_requested and not tracked.state.cancel_requested.is_set():
            tracked.log.info("cancel requested")
            tracked.state.cancel_requested.set()

    def _lost(self, tracked: Tracked, why: str) -> None:
        with self._cond:
            if not tracked.active:  # finished (acked, failed) while this renewal was in flight
                return
            tracked.active = False
            self._tracked.discard(tracked)
        tracked.state.lease_lost.set()
        job = tracked.leased
        self._events.emit(ev.LeaseGone(job=job.job_id, queue=job.queue, lease=job.lease_token,
                                       attempt=job.attempt, why=why))
