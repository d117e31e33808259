"""The worker's metrics and lifecycle logs: two subscribers of its events, not calls in its code.

The runner, the finisher and the heartbeat say what happened (``sluice.core.bus``); these
turn it into the EMF metrics the alarms and the dashboard read (names in
``runtime.telemetry``) and the log lines docs/worker.md lists ("job succeeded", "job running",
"job retried: ...", "lease lost: ...", "lease released: ..."), each with the job's keys.
A drain attaches both to its session's bus (``Worker``); a ``Heartbeat`` or ``Finisher`` built
alone attaches them to its own.

A job that succeeds writes one INFO line, "job succeeded", with its handler's ``duration_ms``
(issue 33: CloudWatch Logs bills each line, and "job started" at INFO was a second line for
every job, ~40% of a plain job's log bytes, ``benchmarks/bench_log_bytes.py``). "job started"
is DEBUG; a job still running at its first lease renewal says "job running" at INFO, once, so
the jobs an operator looks for (long, stuck, or in an invocation that died) keep a line naming
them before their end.

What stays a direct log call: the diagnostics of one branch (an ack or a release the
queue refused after the verdict, a heartbeat retrying): their text says which branch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from sluice.core import bus as ev
from sluice.worker.runtime import telemetry as t
from sluice.worker.runtime.telemetry import LogSink, Telemetry, WorkerMetrics

# Finished.outcome -> the count it adds; lease_lost is counted from LeaseGone, unsettled is not.
FINISHED_METRIC = {
    "succeeded": t.JOBS_SUCCEEDED,
    "retried": t.JOBS_RETRIED,
    "failed": t.JOBS_FAILED,
    "dead": t.JOBS_DEAD_LETTERED,
    "cancelled": t.JOBS_CANCELLED,
    "released": t.LEASES_RELEASED,
}


class MetricsObserver:
    """Counts and timings of the worker's events into ``WorkerMetrics`` (EMF in Lambda)."""

    def __init__(self, metrics: WorkerMetrics) -> None:
        self.metrics = metrics

    def __call__(self, e: ev.Event) -> None:
        name = self._count_of(e)
        if name is not None:
            self.metrics.count(name)
        elif isinstance(e, ev.HandlerStarted) and e.queue_wait_ms is not None:
            self.metrics.observe_ms(t.QUEUE_WAIT, e.queue_wait_ms)
        elif isinstance(e, ev.HandlerEnded):
            self.metrics.observe_ms(t.JOB_DURATION, e.duration_ms)
            if e.stale_token:  # one of the handler's own fenced writes was refused
                self.metrics.count(t.FENCED_WRITES_REJECTED)

    @staticmethod
    def _count_of(e: ev.Event) -> str | None:
        """The count ``e`` adds one to, if any."""
        if isinstance(e, ev.Renewed):
            return t.LEASE_EXTENSIONS if e.outcome == "ok" else None
        if isinstance(e, ev.ResultRefused | ev.FailureRecorded):
            # rejected: a newer fencing token exists, this holder is stale
            return t.FENCED_WRITES_REJECTED if e.outcome == "rejected" else None
        if isinstance(e, ev.LeaseGone):
            return None if e.again else t.LEASES_LOST
        if isinstance(e, ev.Finished):
            return FINISHED_METRIC.get(e.outcome)
        return None


RUNNING_KEPT = 1024  # handlers a LogObserver remembers at once (one lease call hands out at most 1,000)


class LogObserver:
    """One structured line per lifecycle step, keyed as docs/worker.md says: ``job_id``, ``queue``,
    ``attempt``, ``lease_token``, ``worker_id`` and, once granted, ``token``."""

    def __init__(self, logger: LogSink, worker_id: str = "") -> None:
        self.logger = logger
        self.worker_id = worker_id
        # (job, lease) of each handler running: its keys, whether "job running" was said; then the
        # handler's duration until the verdict. Bounded: a verdict the worker never reaches (a re-run
        # ending on a stored one) leaves an entry the oldest-first trim drops.
        self._running: dict[tuple[str, int], list[Any]] = {}
        # the same entries by (job, token): HandlerEnded names the token, not the lease, and a scan
        # of every running entry at each end cost a batch of 1,000 jobs a million steps
        self._by_token: dict[tuple[str, int], list[Any]] = {}
        self._lock = threading.Lock()

    def _keys(self, job: str, queue: str, attempt: int, lease: int, token: int | None,
              **more: Any) -> dict[str, Any]:
        keys: dict[str, Any] = {"job_id": job, "queue": queue, "attempt": attempt, "lease_token": lease}
        if self.worker_id:
            keys["worker_id"] = self.worker_id
        if token:  # 0 or None: no grant yet
            keys["token"] = token
        return {**keys, **more}

    def __call__(self, e: ev.Event) -> None:
        if isinstance(e, ev.HandlerStarted):
            keys = self._keys(e.job, e.queue, e.attempt, e.lease, e.token)
            self.logger.debug("job started", extra=keys)
            with self._lock:
                entry = self._running[(e.job, e.lease)] = [keys, False, None]
                self._by_token[(e.job, e.token)] = entry
                while len(self._running) > RUNNING_KEPT:
                    self._forget(next(iter(self._running)))
        elif isinstance(e, ev.Renewed):
            self._renewed(e)
        elif isinstance(e, ev.HandlerEnded):
            with self._lock:
                ended = self._by_token.get((e.job, e.token))
                if ended is not None:
                    ended[2] = round(e.duration_ms, 1)
        elif isinstance(e, ev.LeaseGone):
            self.logger.warning("lease lost: %s", e.why,
                                extra=self._keys(e.job, e.queue, e.attempt, e.lease, e.token))
        elif isinstance(e, ev.Finished):
            self._finished(e)

    def _forget(self, running: tuple[str, int]) -> list[Any] | None:
        """Drop a running entry from both maps (the caller holds the lock)."""
        entry = self._running.pop(running, None)
        if entry is not None:
            self._by_token.pop((running[0], entry[0].get("token")), None)
        return entry

    def _renewed(self, e: ev.Renewed) -> None:
        """The first renewal of a running handler's lease: "job running", once."""
        if e.outcome != "ok":
            return
        with self._lock:
            entry = self._running.get((e.job, e.lease))
            if entry is None or entry[1]:
                return
            entry[1] = True
        self.logger.info("job running", extra=entry[0])

    def _finished(self, e: ev.Finished) -> None:
        keys = self._keys(e.job, e.queue, e.attempt, e.lease, e.token)
        with self._lock:
            entry = self._forget((e.job, e.lease))
        log = self.logger
        if e.outcome == "succeeded":
            took = {} if entry is None or entry[2] is None else {"duration_ms": entry[2]}
            log.info("job succeeded", extra={**keys, "write": e.detail, **took})
        elif e.outcome in ("retried", "failed", "dead"):
            log.warning("job %s: %s", e.outcome, e.detail, extra={**keys, "retry_after_ms": e.retry_after_ms})
        elif e.outcome == "cancelled":
            log.info("job cancelled", extra=keys)
        elif e.outcome == "released":
            log.info("lease released: %s", e.detail, extra=keys)
        elif e.outcome == "unsettled":
            log.error("job left to its lease: %s", e.detail, extra=keys)
        # lease_lost: its LeaseGone said it


def observe(bus: ev.EventBus, telemetry: Telemetry, worker_id: str = "") -> Callable[[], None]:
    """Attach the metrics and the log observer of ``telemetry`` to ``bus``; returns a detach."""
    detach = (bus.subscribe(MetricsObserver(telemetry.metrics)),
              bus.subscribe(LogObserver(telemetry.logger, worker_id)))

    def undo() -> None:
        for d in detach:
            d()

    return undo

