"""The parking lot's calls, off the relay's step: one in flight per lane, outcomes applied on the step.

A park write or a page read on DynamoDB is a round trip (tens of ms; seconds on a loaded moto). Made
inside the step, it delayed every queue's push by that much whenever one queue was held: the tenant
nemesis measured the other tenants' p99 at 5 to 7 times their quiet p99. So a turn hands each call
to a thread and goes on; the relay's state is changed only by the call's ``then``, run on the
relay's own thread by ``collect`` (at the next turn, or at once if the call is already done).

One call per key at a time (a read: its partition and queue; a park: those and its first offset, so
that a lane has several parks in flight, relay/parking.py): a lane with a read in flight is
left alone until its outcome is applied, so a turn decides about it on what it knows (the records a
park took stay buffered and uncommitted until then; a read's page is applied before anything else is
parked or read there). Memory stays bounded: records waiting for their park count in the partition's
buffer, whose fetching pauses at ``max_pending``.

``threads`` 0 runs each call at once on the caller's thread (the unit tests' deterministic relay).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Executor, Future, ThreadPoolExecutor, wait
from typing import Any, TypeVar

from sluice.core.errors import SluiceError

log = logging.getLogger("sluice.relay")
R = TypeVar("R")


def _guarded(call: Callable[[], R]) -> Callable[[], R | SluiceError]:
    """A SluiceError becomes the outcome (the lot could not be reached: ``then`` says so); any other
    error is a bug and re-raises on the relay's thread when collected."""
    def run() -> R | SluiceError:
        try:
            return call()
        except SluiceError as exc:
            return exc
    return run


class LotCalls:
    """The lot's calls in flight, by key; ``collect`` applies the finished ones in the order sent."""

    def __init__(self, threads: int, executor: Executor | None = None) -> None:
        self.threads = threads
        self.executor = executor  # a test's own (tests/unit/test_relay_parking.py steps one by hand)
        self._flying: dict[Hashable, tuple[Future[Any], Callable[[Any], None]]] = {}

    def busy(self, key: Hashable) -> bool:
        return key in self._flying

    @property
    def in_flight(self) -> int:
        return len(self._flying)

    def submit(self, key: Hashable, call: Callable[[], R], then: Callable[[R | SluiceError], None]) -> None:
        """Run ``call`` (on a thread, or now); ``then`` gets its outcome at a ``collect``."""
        assert key not in self._flying, key
        run = _guarded(call)
        pool = self._pool()
        if pool is None:
            done: Future[Any] = Future()
            try:
                done.set_result(run())
            except Exception as exc:  # as a thread's would: raised at ``collect``
                done.set_exception(exc)
            self._flying[key] = (done, then)
        else:
            self._flying[key] = (pool.submit(run), then)

    def collect(self, *, wait_s: float | None = 0.0) -> int:
        """Apply the outcomes of the calls finished by now (``wait_s``: waiting up to that for all of
        them; None: as long as they take). Returns how many were applied."""
        if wait_s != 0.0 and self._flying:
            wait([f for f, _ in self._flying.values()], timeout=wait_s)
        n = 0
        for key, (future, then) in list(self._flying.items()):
            if not future.done():
                continue
            del self._flying[key]  # before ``then``: a bug it raises must not apply it twice
            then(future.result())
            n += 1
        return n

    def settle(self, wait_s: float | None = None) -> None:
        """Wait for the calls in flight (up to ``wait_s``; None: all of them) and apply what they did
        (``Relay.stop``, before the last commit: records parked by then are committed past). A call
        still out after that is abandoned: its records were never committed past, so the next owner
        takes them from Kafka again (a park is an idempotent put). A bug a ``then`` raises is logged."""
        deadline = None if wait_s is None else time.monotonic() + wait_s
        while self._flying:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                log.warning("%d parking lot calls still in flight at the relay's stop: abandoned",
                            len(self._flying))
                self._flying.clear()
                return
            try:
                self.collect(wait_s=left)
            except Exception:  # the relay is stopping: its partitions are given back either way
                log.exception("a parking lot call's outcome could not be applied")

    def close(self, wait_s: float | None = None) -> None:
        self.settle(wait_s)
        if isinstance(self.executor, ThreadPoolExecutor) and self.threads:
            self.executor.shutdown(wait=False)  # an abandoned call finishes on its own
            self.executor = None

    def _pool(self) -> Executor | None:
        if self.executor is None and self.threads:
            self.executor = ThreadPoolExecutor(max_workers=self.threads,
                                               thread_name_prefix="sluice-relay-park")
        return self.executor
