"""The gateway's cached view of each queue, and whether it takes more jobs (``sluice.core.limits``).

The gateway writes jobs only to Kafka, so nothing stops it from accepting more than a queue
may hold; it reads the queue's depths, the registry and Redis's memory from Redis instead, at
most once per queue per ``ttl_ms`` per container, so the enqueue path makes no Redis round
trip per request. The view can be up to ``ttl_ms`` old: what the gateway accepts over a cap in
that time the relay holds back in Kafka. If Redis cannot be read, the gateway accepts (Kafka
is the source of truth; the relay still enforces every cap) and logs it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from sluice.core import limits
from sluice.core.errors import QueueFull, QueueNotAllowed, SluiceError
from sluice.core.lazy import Lazy, resolve
from sluice.core.limits import Limits
from sluice.core.models import QueueConfig, QueueStats

log = logging.getLogger(__name__)


class ViewSource(Protocol):
    """What the gateway reads from Redis (``sluice.backends.redis.queue.RedisJobQueue``)."""

    def stats(self, queue: str) -> QueueStats: ...
    def registry(self, queue: str) -> tuple[bool, int]: ...
    def memory_percent(self) -> float | None: ...


@dataclass(frozen=True, slots=True)
class View:
    config: QueueConfig
    ready: int
    delayed: int
    dead: int
    registered: bool
    queues: int
    memory_percent: float | None
    read_at: float  # monotonic seconds


def _monotonic() -> float:
    return time.monotonic()


class Admission:
    """Refuses jobs a queue may not take now: QueueFull (429) or QueueNotAllowed (403)."""

    def __init__(self, source: ViewSource | Lazy[ViewSource], limits_: Limits, *, ttl_ms: int = 2_000,
                 clock: Callable[[], float] = _monotonic) -> None:
        self._source, self.limits, self.ttl_s, self.clock = source, limits_, ttl_ms / 1000, clock
        self._views: dict[str, View] = {}
        self._memory: tuple[float, float | None] = (float("-inf"), None)  # (read at, %), per container
        self._lock = threading.Lock()

    @property
    def source(self) -> ViewSource:
        """Redis, built on the first view if held lazily (``sluice.core.lazy``: the gateway's cold start)."""
        return resolve(self._source)

    def check(self, queue: str, jobs: int, delayed: int) -> None:
        """Raise unless ``queue`` may take ``jobs`` more jobs, ``delayed`` of them delayed."""
        self.limits.check_name(queue)
        view = self._view(queue)
        if view is None:
            return
        # A cheap early refusal from the view (no round trip for a flood within its life); the binding
        # decision is the reservation's, atomic in register.lua (``sluice.gateway.registry``).
        limit = self.limits.registry_limit(queue)
        if not view.registered and limit and view.queues >= limit:
            raise QueueNotAllowed(f"queue {queue!r} is new and {view.queues} queues are registered, the "
                                  "limit (SLUICE_MAX_QUEUES); an operator may raise it", queue=queue)
        why = limits.refusal(self.limits, view.config, (view.ready, view.delayed), view.dead,
                             view.memory_percent, delayed)
        if why is not None:
            retry = max(1, round(view.read_at + self.ttl_s - self.clock() + 0.5))
            raise QueueFull(f"queue {queue!r} takes no more of these jobs now: {why}", queue=queue,
                            retry_after_s=retry)
        if delayed:  # count them now: a burst within one view's life stops at the cap too
            self._views[queue] = View(view.config, view.ready, view.delayed + delayed, view.dead, True,
                                      view.queues, view.memory_percent, view.read_at)

    def _view(self, queue: str) -> View | None:
        now = self.clock()
        view = self._views.get(queue)
        if view is not None and now - view.read_at < self.ttl_s:
            return view
        with self._lock:  # one read per queue at a time, however many requests wait for it
            view = self._views.get(queue)
            if view is not None and now - view.read_at < self.ttl_s:
                return view
            try:
                registered, size = self.source.registry(queue)
                # A queue not registered has no keys (the registry goes first, and only a data loss
                # empties it): no depths to read, so a random name costs one round trip, not two.
                stats = self.source.stats(queue) if registered else QueueStats(
                    queue=queue, ready=0, delayed=0, leased=0, dead=0, oldest_ready_age_ms=None)
                if now - self._memory[0] >= self.ttl_s:
                    self._memory = (now, self.source.memory_percent())
            except SluiceError as exc:
                log.warning("no view of queue %s, accepting without one: %s", queue, exc)
                return None
            view = View(stats.config, stats.ready, stats.delayed, stats.dead, registered, size,
                        self._memory[1], now)
            if len(self._views) > 10_000:  # random names must not grow a container without bound
                self._views.clear()
            self._views[queue] = view
            return view
