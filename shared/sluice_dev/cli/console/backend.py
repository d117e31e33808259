"""What the console reads and changes, and the history its sparklines draw.

``Backend`` is the port: ``sluice.Client`` (the public and operator APIs, SigV4-signed against
a deployment, so the console's server holds the credentials and the browser never sees them)
fits it as it is. ``Watched`` is the set of queues the console shows: those named with
``--queue`` (only those), else every queue ``GET /v1/admin/queues`` lists; plus any added in
the page.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, NamedTuple, Protocol

from sluice.core.depth import DepthHistory
from sluice.core.listing import JobPage
from sluice.core.models import DeadJob, QueueConfig, QueueStats
from sluice.core.wire import JobView

SAMPLES = 60  # polls kept per queue for its sparkline


class Backend(Protocol):
    def queue_rows(self) -> list[dict[str, Any]]: ...
    def queue_row(self, queue: str) -> dict[str, Any]: ...
    def status(self, job_id: str) -> JobView: ...
    def pause(self, queue: str) -> QueueConfig: ...
    def resume(self, queue: str) -> QueueConfig: ...
    def set_rate(self, queue: str, per_second: float, burst: int | None = None) -> QueueConfig: ...
    def dead_letters(self, queue: str, limit: int = 100) -> list[DeadJob]: ...
    def list_jobs(self, queue: str, state: str = "ready", *, limit: int = 50, cursor: str | None = None,
                  prefix: str | None = None) -> JobPage: ...
    def timeline(self, queue: str, job_id: str) -> list[dict[str, Any]]: ...
    def depth_history(self, queue: str) -> DepthHistory: ...
    def redrive(self, queue: str, job_id: str | None = None) -> dict[str, Any]: ...
    def purge_dead(self, queue: str) -> int: ...
    def schedules(self, queue: str) -> list[dict[str, Any]] | None: ...
    def pause_schedule(self, queue: str, name: str) -> dict[str, Any]: ...
    def resume_schedule(self, queue: str, name: str) -> dict[str, Any]: ...
    def delete_schedule(self, queue: str, name: str) -> None: ...


@dataclass
class Watched:
    """``names``: the queues named at start or added in the page. ``every``: also show every
    queue the operator API lists (no ``--queue`` was given)."""

    names: set[str] = field(default_factory=set)
    every: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, name: str) -> None:
        with self._lock:
            self.names.add(name)

    def all(self) -> list[str]:
        with self._lock:
            return sorted(self.names)


class Rates(NamedTuple):
    """Jobs finished per second over one poll interval: ``finished`` (succeeded + dead, the
    latter counting the handler's Fail too) and ``dead`` alone."""

    finished: float
    dead: float


def _rates(t0: float, f0: int, d0: int, t1: float, f1: int, d1: int) -> Rates:
    """Per second between two samples of the cumulative counts. A drop of the total means Redis
    lost the counters and began again at 0: what they hold now finished since."""
    dt = max(t1 - t0, 1e-6)
    if f1 < f0:
        return Rates(f1 / dt, d1 / dt)
    return Rates((f1 - f0) / dt, max(0, d1 - d0) / dt)


@dataclass
class History:
    """Each queue's cumulative finished counts (``QueueStats.finished``) at its last polls, oldest
    first; ``rates`` are the differences between neighbours per second. Reading the counters takes
    nothing from them (they only go up), so any number of consoles and the relay's metrics can
    read them. Polls closer than ``min_gap_s`` (two tabs open) keep the earlier sample."""

    min_gap_s: float = 1.0
    clock: Callable[[], float] = time.monotonic
    samples: dict[str, deque[tuple[float, int, int]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, stats: QueueStats) -> None:
        done = stats.finished
        now = self.clock()
        with self._lock:
            kept = self.samples.setdefault(stats.queue, deque(maxlen=SAMPLES))
            if kept and now - kept[-1][0] < self.min_gap_s:
                return
            kept.append((now, done.succeeded + done.dead, done.dead))

    def rates(self, queue: str) -> list[Rates]:
        with self._lock:
            kept = list(self.samples.get(queue, ()))
        return [_rates(*before, *after) for before, after in pairwise(kept)]
