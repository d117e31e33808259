"""The pure part of Redis-loss recovery: checkpoints, where to start reading, what is unfinished.

A partition's checkpoint (kept in DynamoDB, which survives Redis) says:

- ``epoch``: the Redis epoch the checkpoint was written under. Redis holds a random
  epoch key; a restart without persistence or a failover that lost writes loses the
  key too, so a different (or missing) epoch means Redis may have lost jobs.
- ``pending``: every record below ``high`` whose job was not yet final when the
  checkpoint was written, as (offset, job id), in offset order;
- ``low_water``: the first pending offset (or ``high``): every job below it is final;
- ``generation``: bumped by every replay, and folded into the relay's push owner token
  (``owner_token``), because Redis's own lease tokens start again from 1 after a loss
  and would otherwise look older than a stale relay's.

``plan_start`` decides, when a relay takes a partition, where it reads from:
the same epoch resumes at ``min(high, committed)`` knowing ``pending``; a new epoch
replays from ``low_water``. See docs/redis-loss.md.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from sluice.errors import InvalidInput

LEASE_TOKEN_BITS = 32
MAX_GENERATION = 2 ** (53 - LEASE_TOKEN_BITS) - 1  # owner tokens stay below Lua's 2**53


@dataclass(frozen=True, slots=True)
class Checkpoint:
    topic: str
    partition: int
    epoch: str
    generation: int
    low_water: int
    high: int
    pending: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True, slots=True)
class StartPlan:
    """Where a new session on a partition starts, what it knows, and what to save first."""

    start: int | None  # offset to read from; None = the committed offset (or the log start)
    replay: bool  # Redis lost data since the checkpoint: records from ``start`` are pushed again
    generation: int
    known: tuple[tuple[int, str], ...]  # pending records below ``start``, from the checkpoint
    save: Checkpoint | None  # write this before reading (first checkpoint, or the switch of epoch)
    expect_epoch: str | None  # ... on condition that the stored epoch is still this one


def plan_start(ckpt: Checkpoint | None, epoch: str, committed: int | None, topic: str,
               partition: int) -> StartPlan:
    if ckpt is None:
        # First time under recovery: trust the committed offset (docs/redis-loss.md, "Adoption").
        base = committed or 0
        first = Checkpoint(topic, partition, epoch, 1, base, base)
        return StartPlan(None, False, 1, (), first, None)
    if ckpt.epoch == epoch:
        start = ckpt.high if committed is None else min(ckpt.high, committed)
        known = tuple(e for e in ckpt.pending if e[0] < start)
        return StartPlan(start, False, ckpt.generation, known, None, None)
    if ckpt.generation >= MAX_GENERATION:
        raise InvalidInput(f"partition {partition} has used up its {MAX_GENERATION} replay generations")
    # Redis lost data after this checkpoint: push again everything not known final. The switch
    # says "nothing is known above low_water yet", so a relay dying mid-replay replays again.
    switched = Checkpoint(topic, partition, epoch, ckpt.generation + 1, ckpt.low_water, ckpt.low_water)
    return StartPlan(ckpt.low_water, True, switched.generation, (), switched, ckpt.epoch)


def owner_token(generation: int, lease_token: int) -> int:
    """The push owner token: the generation in the high bits, the Redis lease token below."""
    if not 0 < lease_token < 2**LEASE_TOKEN_BITS or not 0 < generation <= MAX_GENERATION:
        raise InvalidInput(f"cannot form an owner token from generation {generation} "
                           f"and lease token {lease_token}")
    return (generation << LEASE_TOKEN_BITS) | lease_token


class PartitionTracker:
    """The records of one partition this session has seen whose jobs may not be final yet."""

    def __init__(self, start: int, known: Iterable[tuple[int, str]] = ()) -> None:
        self.entries: deque[tuple[int, str]] = deque(sorted(known))
        self.next = start  # every offset below is accounted for

    def track(self, offset: int, job_id: str | None) -> None:
        """A record read from the log; ``job_id`` None for a poison record (dead-lettered: done)."""
        if offset < self.next:
            return  # read again after a seek: already accounted for
        self.next = offset + 1
        if job_id is not None:
            self.entries.append((offset, job_id))

    def oldest(self, limit: int) -> list[str]:
        return [job_id for _, job_id in list(self.entries)[:limit]]

    def drop(self, final: set[str], limit: int) -> int:
        """Forget the jobs in ``final`` among the oldest ``limit`` entries (the bounded scan)."""
        if not final:
            return 0
        head = [self.entries.popleft() for _ in range(min(limit, len(self.entries)))]
        kept = [e for e in head if e[1] not in final]
        self.entries.extendleft(reversed(kept))
        return len(head) - len(kept)

    def summary(self, high: int, max_pending: int) -> tuple[int, int, tuple[tuple[int, str], ...]]:
        """(low_water, high, pending) for a checkpoint: ``pending`` lists every entry below
        ``high``; if there are more than ``max_pending``, ``high`` comes down to fit them."""
        high = min(high, self.next)
        below: list[tuple[int, str]] = []
        for entry in self.entries:
            if entry[0] >= high:
                break
            if len(below) == max_pending:
                high = entry[0]
                break
            below.append(entry)
        low = below[0][0] if below else high
        return low, high, tuple(below)
