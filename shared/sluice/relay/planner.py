"""The push planner: which buffered records to push now. Pure: no I/O, no clock of its own.

Per queue: nothing while it is held (``QueueState.blocked``: paused, over its high watermark,
at its dead cap, over its byte budget) or under the Redis memory guard; no more than the
watermark leaves room for; no delayed record past the queue's delayed cap; then the rate
bucket's grant (asked for through the ``take_rate`` it is handed), split fairly over the
partitions so none starves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from itertools import islice

from sluice.core import limits
from sluice.core.models import DecodedJob
from sluice.relay.config import RelayConfig
from sluice.relay.state import Item, OwnedPartition, QueueState


def share(allowed: int, partitions: list[OwnedPartition], queue: str, batch: int,
          rotation: int) -> list[tuple[OwnedPartition, int]]:
    """Split a queue's allowance fairly over partitions, so none starves under a rate limit."""
    if allowed <= 0 or not partitions:
        return []
    k = rotation % len(partitions)
    order = partitions[k:] + partitions[:k]
    caps = [min(len(o.pending[queue]), batch) for o in order]
    counts = [0] * len(order)
    fair = -(-allowed // len(order))
    for i, cap in enumerate(caps):  # everyone's fair share first, then the leftovers in order
        counts[i] = min(cap, fair, allowed)
        allowed -= counts[i]
    for i, cap in enumerate(caps):
        extra = min(cap - counts[i], allowed)
        counts[i] += extra
        allowed -= extra
    return [(o, n) for o, n in zip(order, counts, strict=True) if n > 0]


def delayed(records: Iterable[tuple[int, DecodedJob]], n: int, now_ms: int) -> list[bool]:
    """For the first ``n`` records: is each one delayed (due after ``now_ms``)?"""
    return [spec.run_at_ms > now_ms for _, spec in islice(records, n)]


def waiting(owned: Iterable[OwnedPartition]) -> dict[str, list[OwnedPartition]]:
    """The partitions with records buffered, per queue."""
    by_queue: dict[str, list[OwnedPartition]] = {}
    for o in owned:
        for queue, q in o.pending.items():
            if q:
                by_queue.setdefault(queue, []).append(o)
    return by_queue


class Planner:
    """Plans one push round; remembers only its rotation and whether the last round was throttled."""

    def __init__(self, config: RelayConfig) -> None:
        self.config = config
        self.rotation = 0
        self.throttled = False  # the last plan got less from a rate bucket than it asked for
        # the queues the last plan held: blocked, under the memory guard, or granted fewer of their
        # records than it asked for (rate, watermark, delayed cap); their overflow is parked
        # (relay/parking.py)
        self.held: set[str] = set()

    def plan(self, by_queue: Mapping[str, list[OwnedPartition]], states: Mapping[str, QueueState],
             memory: float | None, now_ms: int, take_rate: Callable[[str, int], int]) -> list[Item]:
        """``states`` holds a fresh state for every queue of ``by_queue``; a plan's delayed
        records are counted into their queue's ``delayed`` at once."""
        plan: list[Item] = []
        self.throttled = False
        self.held = held = set()
        batch, lim = self.config.batch, self.config.limits
        for queue, partitions in by_queue.items():
            state = states[queue]
            if state.blocked or lim.memory_hold(memory, state.ready_estimate + state.delayed):
                held.add(queue)
                continue
            cfg = state.config
            wanted = asked = sum(min(len(o.pending[queue]), batch) for o in partitions)
            if cfg.high_watermark > 0:  # stop at the mark, not a batch past it
                wanted = min(wanted, max(0, cfg.high_watermark - state.ready_estimate + 1))
            room = limits.delayed_room(lim, cfg, state.delayed)
            if room is not None:  # up to each partition's first delayed record over the cap
                fits = [limits.take_within(delayed(o.pending[queue], batch, now_ms), room)
                        for o in partitions]
                wanted = min(wanted, sum(fits))
            allowed = take_rate(queue, wanted) if cfg.rate_per_s > 0 and wanted else wanted
            self.throttled |= allowed < wanted
            if allowed < asked:
                held.add(queue)
            self.rotation += 1
            for owned, n in share(allowed, partitions, queue, batch, self.rotation):
                q = owned.pending[queue]
                take = [q[i] for i in range(n)]
                if room is not None:  # over the delayed cap, a delayed record waits in Kafka
                    late = delayed(take, n, now_ms)
                    take = take[:limits.take_within(late, room)]
                    room -= sum(late[:len(take)])
                    state.delayed += sum(late[:len(take)])
                if take:
                    plan.append((owned, queue, take))
        return plan
