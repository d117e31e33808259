"""The worker's countdown: a round's children counted together when the round ends (issue 30, item 2).

``core.families.Countdown`` counts each child as it ends: one conditional write on its bucket, 1 WCU a
child, a quarter of what a child cost. A drain's round leases up to a batch of jobs and runs them to
their end; the children among them whose continuation shares a bucket (``COUNT_BUCKET`` consecutive
slots, and a family's children are pushed in order) are counted by one write when the round ends
(``RoundEnded``, emitted by ``worker.registry``): ``FamilyReads.count_down_many``.

A child's count waits at most for the rest of its round. A process that dies before the round ends
loses nothing: the stream's countdown (``streams.countdown``) counts every child from its final
write's stream record, as it always did for a death between that write and the count.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from sluice.core.bus import EventBus, JobEnded, RoundEnded
from sluice.core.errors import SluiceError
from sluice.core.families import Countdown, FamilyReads

log = logging.getLogger(__name__)


class RoundCountdown(Countdown):
    """``Countdown`` whose counts wait for the end of the round that ended their children."""

    def __init__(self, store: FamilyReads, release: Callable[[str], object]) -> None:
        super().__init__(store, release)
        self._pending: dict[str, set[int]] = {}  # continuation -> the slots ended in this round
        self._lock = threading.Lock()  # a round's jobs may end on several of the drain's threads

    def subscribe(self, bus: EventBus) -> Callable[[], None]:
        counts = super().subscribe(bus)
        rounds = bus.subscribe(self.on_round, RoundEnded)

        def unsubscribe() -> None:
            counts()
            rounds()

        return unsubscribe

    def on_ended(self, event: JobEnded) -> None:
        found = self.store.continuation_of(event.job)
        if found is not None:
            continuation, slot = found
            with self._lock:
                self._pending.setdefault(continuation, set()).add(slot)

    def on_round(self, event: RoundEnded) -> None:
        self.flush()

    def flush(self) -> None:
        """Count every child ended since the last flush, one write per bucket; release what reached 0."""
        with self._lock:
            pending, self._pending = self._pending, {}
        for continuation, slots in pending.items():
            try:
                remaining = self.store.count_down_many(continuation, sorted(slots))
                if remaining == 0 or (remaining is None and self.store.unreleased(continuation)):
                    log.info("every child of %s has ended: releasing it", continuation)
                    self._release(continuation)
            except SluiceError as exc:  # the stream's countdown counts them from their final writes
                log.warning("could not count %d children of %s now: %s", len(slots), continuation, exc)
