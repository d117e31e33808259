"""Per-queue CloudWatch metrics (dimension ``Queue``), the way SQS users expect them.

Two observers of events, nothing counted inline:

- ``QueueDepthMetrics`` (the relay, which re-reads every queue's stats every ``refresh_s``):
  from ``QueueMeasured`` it publishes, once a period per queue, the depths (ready, delayed,
  in flight, dead), the age of the oldest ready job (SQS's ``ApproximateAgeOfOldestMessage``),
  the jobs relayed into Redis in the period and the bytes its jobs take there (against its
  byte budget, ``QueueBytesUsed``).
- ``QueueWorkMetrics`` (the worker, which measures each job's wait): from ``HandlerStarted``
  the time from enqueue to start, as raw values so CloudWatch computes p50/p99; from
  ``Finished`` the jobs succeeded, failed and dead.

Each metric of each queue is one CloudWatch custom metric ($0.30 a month), so only queues the
``QueueBound`` admits get them (docs/cost.md, "Per-queue metrics"). Lines are CloudWatch EMF
written to stdout (what Lambda ships to CloudWatch Logs, where EMF becomes metrics); one line
carries a queue's metrics for the period, with up to 100 values of a timing.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sluice.core import bus as ev

if TYPE_CHECKING:
    from sluice.core.config import Settings

NAMESPACE = "Sluice"
DIMENSION = "Queue"
PERIOD_S = 60.0
MAX_VALUES = 100  # EMF's limit on the values of one metric in one line

READY, DELAYED, IN_FLIGHT, DEAD = "QueueReady", "QueueDelayed", "QueueInFlight", "QueueDead"
OLDEST_AGE = "QueueOldestReadyAge"  # seconds; 0 when nothing is ready (so an alarm sees data)
RELAYED = "QueueJobsRelayed"
BYTES_USED = "QueueBytesUsed"  # bytes its jobs count against its byte budget in Redis (keys.used)
SUCCEEDED, FAILED, DEAD_LETTERED = "QueueJobsSucceeded", "QueueJobsFailed", "QueueJobsDead"
WAIT = "QueueWaitTime"  # ms, enqueue -> handler start; read as p50 / p99
DEPTH_METRICS = (READY, DELAYED, IN_FLIGHT, DEAD, OLDEST_AGE, RELAYED, BYTES_USED)
WORK_METRICS = (SUCCEEDED, FAILED, DEAD_LETTERED, WAIT)
ALL_METRICS = DEPTH_METRICS + WORK_METRICS  # each one custom metric per admitted queue
FINISHED = {"succeeded": SUCCEEDED, "failed": FAILED, "dead": DEAD_LETTERED}

Sink = Callable[[str], None]


def stdout_sink(line: str) -> None:
    print(line, flush=True)  # Lambda ships stdout to CloudWatch Logs, which reads EMF from it


class QueueBound:
    """Which queues get per-queue metrics: at most ``cap`` of them, the first this process sees,
    and only those in ``names`` when given (``metrics_queues``, else the queue allow-list).

    The first-seen rule bounds the bill, not the choice: two processes may pick different
    queues, so a deployment with more than ``cap`` queues should name the ones it watches.
    """

    def __init__(self, names: Iterable[str] | None = None, cap: int = 50) -> None:
        self.names = frozenset(names) if names else None
        self.cap = cap
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def admits(self, queue: str) -> bool:
        if self.names is not None and queue not in self.names:
            return False
        with self._lock:
            if queue in self._seen:
                return True
            if len(self._seen) < self.cap:
                self._seen.add(queue)
                return True
            return False

    @classmethod
    def from_settings(cls, settings: Settings) -> QueueBound:
        return cls(settings.metrics_queue_names(), settings.metrics_queue_cap)


def emf_line(queue: str, metrics: list[tuple[str, str, float | list[float]]], at_s: float,
             namespace: str = NAMESPACE) -> str:
    """One EMF line: ``metrics`` as (name, unit, value or values), all with ``Queue=queue``."""
    body: dict[str, object] = {
        "_aws": {"Timestamp": int(at_s * 1000),
                 "CloudWatchMetrics": [{"Namespace": namespace, "Dimensions": [[DIMENSION]],
                                        "Metrics": [{"Name": n, "Unit": u} for n, u, _ in metrics]}]},
        DIMENSION: queue}
    for name, _, value in metrics:
        body[name] = value
    return json.dumps(body, separators=(",", ":"))


@dataclass
class _Depth:
    last: ev.QueueMeasured
    relayed: int = 0
    published_at: float | None = None


class QueueDepthMetrics:
    """The relay's observer of ``QueueMeasured``: a queue's line at most once per ``period_s``
    (the first measure of a queue publishes at once), and the rest at ``flush``."""

    def __init__(self, bound: QueueBound, sink: Sink = stdout_sink, period_s: float = PERIOD_S) -> None:
        self.bound, self.sink, self.period_s = bound, sink, period_s
        self._queues: dict[str, _Depth] = {}

    def __call__(self, e: ev.Event) -> None:
        if not isinstance(e, ev.QueueMeasured) or not self.bound.admits(e.queue):
            return
        d = self._queues.get(e.queue)
        if d is None:
            d = self._queues[e.queue] = _Depth(e)
        d.last = e
        d.relayed += e.relayed
        if d.published_at is None or e.at - d.published_at >= self.period_s:
            self._publish(e.queue, d)

    def _publish(self, queue: str, d: _Depth) -> None:
        e, stats = d.last, d.last.stats
        age_s = (stats.oldest_ready_age_ms or 0) / 1000
        self.sink(emf_line(queue, [(READY, "Count", stats.ready), (DELAYED, "Count", stats.delayed),
                                   (IN_FLIGHT, "Count", stats.leased), (DEAD, "Count", stats.dead),
                                   (OLDEST_AGE, "Seconds", age_s), (RELAYED, "Count", d.relayed),
                                   (BYTES_USED, "Bytes", stats.used_bytes)], e.at))
        d.relayed, d.published_at = 0, e.at

    def flush(self) -> None:
        """Publish every queue measured since its last line (the relay's invocation ends)."""
        for queue, d in self._queues.items():
            if d.published_at is None or d.last.at > d.published_at:
                self._publish(queue, d)


@dataclass
class _Work:
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    waits: list[float] = field(default_factory=list)


class QueueWorkMetrics:
    """The worker's observer of ``HandlerStarted`` and ``Finished``: per queue, counts and wait
    times kept until ``flush`` (the drain ends) or until a queue holds ``MAX_VALUES`` waits.
    Thread-safe: a drain's slots emit concurrently."""

    def __init__(self, bound: QueueBound, sink: Sink = stdout_sink) -> None:
        self.bound, self.sink = bound, sink
        self._queues: dict[str, _Work] = {}
        self._lock = threading.Lock()

    def __call__(self, e: ev.Event) -> None:
        if isinstance(e, ev.HandlerStarted):
            if e.queue_wait_ms is None or not self.bound.admits(e.queue):
                return
            with self._lock:
                w = self._queues.setdefault(e.queue, _Work())
                w.waits.append(float(e.queue_wait_ms))
                if len(w.waits) >= MAX_VALUES:
                    self._publish(e.queue, w, e.at)
        elif isinstance(e, ev.Finished):
            name = FINISHED.get(e.outcome)
            if name is None or not self.bound.admits(e.queue):
                return
            with self._lock:
                self._queues.setdefault(e.queue, _Work()).counts[name] += 1

    def _publish(self, queue: str, w: _Work, at: float) -> None:
        metrics: list[tuple[str, str, float | list[float]]] = [
            (n, "Count", w.counts[n]) for n in (SUCCEEDED, FAILED, DEAD_LETTERED) if w.counts.get(n)]
        if w.waits:
            metrics.append((WAIT, "Milliseconds", w.waits))
        if metrics:
            self.sink(emf_line(queue, metrics, at))
        self._queues.pop(queue, None)

    def flush(self) -> None:
        with self._lock:
            now = ev.wall()
            for queue, w in list(self._queues.items()):
                self._publish(queue, w, now)
