"""Each queue's parked counter in the durable registry, kept from the bus (issue 28, items 1 and 2).

Operators see how many records of a queue wait in the parking lot (``sluice queues``, the operator
API, the console) without a request counting the lot (``ParkingLot.count`` pages through every
item). ``ParkedCounts`` observes ``Parked`` (+n, and when) and ``Unparked`` (-released: the sweep
deleted them) and adds the sums to the queues table's ``state`` map (``ParkedCounter``) once per
relay step: on ``Committed``, after the push round, never on the push path (a step with nothing
parked or released writes nothing); in the relay Lambda on a thread of its own, so the step never
waits for it. A failed write keeps its sums for the next step. A counter, not a count: a record
parked again (a relay that died before its commit) is counted twice until the sweep releases it
once, so the view says "about"; ``ParkingLot.count`` is the exact, slow answer.

After each write, each written counter's new value is the per-queue metric ``QueueParked``
(EMF, dimension ``queue``; sent when it changes: alarm on its Maximum).

The sweep emits from its own thread: the sums are taken under a lock.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout

from sluice.core import bus as ev
from sluice.core.clock import wall_ms
from sluice.core.errors import SluiceError
from sluice.core.ports import Metrics
from sluice.relay.ports import ParkedCounter

log = logging.getLogger("sluice.relay")
PARKED_METRIC = "QueueParked"


class ParkedCounts:
    """The bus's parking events summed per queue, written by ``flush``. ``background``: each step's
    write runs on a thread of its own (one at a time; sums gathered meanwhile go with the next), so a
    slow registry never holds up the relay's step; ``close`` waits for it and writes what is left."""

    def __init__(self, counter: ParkedCounter, now_ms: Callable[[], int] = wall_ms,
                 metrics: Metrics | None = None, *, background: bool = False) -> None:
        self.counter, self.now_ms, self.metrics = counter, now_ms, metrics
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._at: dict[str, int] = {}
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sluice-relay-parked") \
            if background else None
        self._writing: Future[None] | None = None

    def __call__(self, e: ev.Event) -> None:
        if isinstance(e, ev.Parked) and e.n:
            with self._lock:
                self._counts[e.queue] += e.n
                self._at[e.queue] = self.now_ms()
        elif isinstance(e, ev.Unparked) and e.released:
            with self._lock:
                self._counts[e.queue] -= e.released
        elif isinstance(e, ev.Committed):
            if self._pool is None:
                self.flush()
            elif self._writing is None or self._writing.done():
                self._writing = self._pool.submit(self.flush)

    def close(self, wait_s: float | None = None) -> None:
        """Wait for a write in flight, then write what is left (the relay's stop). ``wait_s``: for at
        most that long in all (the time the invocation has left); a write still out then finishes on
        its own or dies with the process (the counter is "about": a lost sum is only off by it)."""
        if self._pool is None:
            self.flush()
            return
        pool, self._pool = self._pool, None
        last = pool.submit(self.flush)  # after the write in flight: one thread
        pool.shutdown(wait=False)
        try:
            last.result(timeout=wait_s)
        except FuturesTimeout:
            log.warning("parked counters' last write still out at the relay's stop: left to finish")

    def flush(self) -> None:
        with self._lock:
            counts = {q: n for q, n in self._counts.items() if n}
            at, self._counts, self._at = self._at, Counter(), {}
        if not counts and not at:
            return
        try:
            now = self.counter.add_parked({**dict.fromkeys(at, 0), **counts}, at)
        except SluiceError as exc:  # kept: the next step adds them
            log.warning("parked counters not written (tried again next step): %s", exc)
            with self._lock:
                self._counts.update(counts)
                self._at = {**at, **self._at}
            return
        if self.metrics is not None:
            for queue, n in now.items():
                self.metrics.count(PARKED_METRIC, max(0, n), queue=queue)


def observe(bus: ev.EventBus, counter: ParkedCounter, metrics: Metrics | None = None, *,
            background: bool = False) -> Callable[..., None]:
    """Attach a ``ParkedCounts`` to ``bus`` (``background``: its writes off the step, as the relay
    Lambda has them); returns the detach, which writes what is left."""
    counts = ParkedCounts(counter, metrics=metrics, background=background)
    detach = bus.subscribe(counts, ev.Parked, ev.Unparked, ev.Committed)

    def undo(wait_s: float | None = None) -> None:
        detach()
        counts.close(wait_s)

    return undo
