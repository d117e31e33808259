"""What the console reads and changes, and the history its sparklines draw.

``Backend`` is the port: ``sluice.Client`` (the public and operator APIs, SigV4-signed against
a deployment, so the console's server holds the credentials and the browser never sees them)
fits it as it is. ``Watched`` is the set of queues the console shows: those given on the command
line or added in the page, plus any a ``discover`` callable finds (the local stack's Redis).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Protocol

from sluice.models import DeadJob, QueueConfig
from sluice.wire import JobView, QueueView

SAMPLES = 60  # polls kept per queue for its sparkline


class Backend(Protocol):
    def queue_stats(self, queue: str) -> QueueView: ...
    def status(self, job_id: str) -> JobView: ...
    def pause(self, queue: str) -> QueueConfig: ...
    def resume(self, queue: str) -> QueueConfig: ...
    def set_rate(self, queue: str, per_second: float, burst: int | None = None) -> QueueConfig: ...
    def dead_letters(self, queue: str, limit: int = 100) -> list[DeadJob]: ...
    def redrive(self, queue: str, job_id: str | None = None) -> dict[str, Any]: ...
    def purge_dead(self, queue: str) -> int: ...
    def schedules(self, queue: str) -> list[dict[str, Any]] | None: ...


@dataclass
class Watched:
    names: set[str] = field(default_factory=set)
    discover: Callable[[], Iterable[str]] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, name: str) -> None:
        with self._lock:
            self.names.add(name)

    def all(self) -> list[str]:
        found: set[str] = set()
        if self.discover is not None:
            try:
                found = set(self.discover())
            except Exception:  # a convenience: the named queues still show
                found = set()
        with self._lock:
            return sorted(self.names | found)


@dataclass
class History:
    """Each queue's backlog (ready + delayed + leased) at its last polls, oldest first.

    The drain rate between two polls is how much the backlog fell per second (never below 0):
    the API has no count of finished jobs, so this is what `sluice top` shows against a
    deployment. Polls closer than ``min_gap_s`` (two tabs open) keep the earlier sample."""

    min_gap_s: float = 1.0
    clock: Callable[[], float] = time.monotonic
    samples: dict[str, deque[tuple[float, int]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, view: QueueView) -> None:
        backlog = view.ready + view.delayed + view.leased
        now = self.clock()
        with self._lock:
            kept = self.samples.setdefault(view.queue, deque(maxlen=SAMPLES))
            if kept and now - kept[-1][0] < self.min_gap_s:
                return
            kept.append((now, backlog))

    def drains(self, queue: str) -> list[float]:
        with self._lock:
            kept = list(self.samples.get(queue, ()))
        return [max(0.0, (b0 - b1) / max(t1 - t0, 1e-6)) for (t0, b0), (t1, b1) in pairwise(kept)]
