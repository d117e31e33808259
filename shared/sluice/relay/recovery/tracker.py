"""The pure part of Redis-loss recovery: checkpoints, where to start reading, what is unfinished.

A partition's checkpoint (kept in DynamoDB, which survives Redis) says:

- ``epoch``: the Redis epoch the checkpoint was written under. Redis holds a random
  epoch key; a restart without persistence or a failover that lost writes loses the
  key too, so a different (or missing) epoch means Redis may have lost jobs.
- ``pending``: every record below ``high`` whose job was not yet final when the
  checkpoint was written, as (offset, job id), in offset order;
- ``low_water``: the first pending offset (or ``high``): every job below it is final;
- ``generation``: bumped by every replay, and folded into the relay's push owner token
  (``owner_token``), because the reserved queue's lease tokens (a plain INCRBY, kept below
  2**32) start again from 1 after a loss, or go back after a failover to a lagging replica,
  and would otherwise look older than a stale relay's.

``plan_start`` decides, when a relay takes a partition, where it reads from:
the same epoch resumes at ``min(high, committed)`` knowing ``pending``; a new epoch
replays from ``low_water``. See docs/redis-loss.md.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass

from sluice.core.errors import InvalidInput

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
    # False when the store could not return every page of ``pending`` (docs/redis-loss.md): the
    # next session then reads again from ``low_water`` to learn them, which is safe, only slower.
    complete: bool = True


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
    if ckpt.epoch == epoch and not ckpt.complete:
        # Part of the pending list is missing: read again from low_water and learn it anew.
        # Records Redis already holds cost nothing on the way (the relay skips them by offset).
        return StartPlan(ckpt.low_water, False, ckpt.generation, (), None, None)
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


BACKOFF_EXP = 6  # a job found unfinished again and again is re-checked at most every 2**6 intervals


@dataclass(slots=True)
class _Entry:
    job_id: str
    due: float  # the scan checks it again no earlier than this (the caller's clock)
    misses: int = 0  # scans that found it unfinished


class PartitionTracker:
    """The records of one partition whose jobs may not be final yet, however many and however old.

    Every record read is tracked until a scan finds its job final. The scan takes the oldest
    entries that are due, and each entry it finds unfinished waits twice as long before its
    next check (up to ``2**BACKOFF_EXP`` intervals). So a few thousand jobs delayed by a day
    cost a trickle of reads, and never keep the scan from reaching the newer jobs behind them:
    there is no window for them to fill. ``summary`` lists them all (docs/redis-loss.md).
    """

    def __init__(self, start: int, known: Iterable[tuple[int, str]] = (), *, now: float = 0.0,
                 spread_s: float = 0.0, head: int = 0, rng: random.Random | None = None) -> None:
        """``known``: unfinished entries below ``start`` from the checkpoint. They were checked
        before, so their first check is spread over ``spread_s`` rather than all at once, but for
        the oldest ``head``: they hold the low water, from which a Redis loss replays. Spread over
        minutes while a relay invocation lasts seconds, an old entry whose job had long ended stayed
        unchecked from session to session, and the low water with it: a 10,000-job chaos run replayed
        its partitions from offset 5 at each of its Redis losses, 600 s into the run."""
        rand = rng or random.Random(start)
        misses = BACKOFF_EXP if spread_s else 0
        self.entries: dict[int, _Entry] = {
            offset: _Entry(job_id, now if i < head else now + rand.uniform(0, spread_s), misses)
            for i, (offset, job_id) in enumerate(sorted(known))}
        self.next = start  # every offset below is accounted for

    def track(self, offset: int, job_id: str | None, now: float = 0.0) -> None:
        """A record read from the log; ``job_id`` None for a poison record (dead-lettered: done)."""
        if offset < self.next:
            return  # read again after a seek: already accounted for
        self.next = offset + 1
        if job_id is not None:
            self.entries[offset] = _Entry(job_id, now)

    def due(self, now: float, limit: int) -> list[tuple[int, str]]:
        """The oldest ``limit`` entries due for a check at ``now``."""
        out: list[tuple[int, str]] = []
        for offset, e in self.entries.items():
            if len(out) == limit:
                break
            if e.due <= now:
                out.append((offset, e.job_id))
        return out

    def checked(self, scanned: Iterable[tuple[int, str]], final: set[str], now: float,
                interval_s: float) -> int:
        """Forget the scanned entries whose jobs are final; back the others off. Returns how many went."""
        gone = 0
        for offset, job_id in scanned:
            e = self.entries.get(offset)
            if e is None:
                continue
            if job_id in final:
                del self.entries[offset]
                gone += 1
            else:
                e.misses = min(e.misses + 1, BACKOFF_EXP)
                e.due = now + interval_s * 2**e.misses
        return gone

    def hold(self, offsets: Iterable[int], now: float, interval_s: float) -> None:
        """Records parked (relay/parking.py): their jobs cannot end before they are read back, so their
        checks wait the longest back-off at once. They stay tracked: the low water must stay at or below
        them, since a replay rebases the relayed offset to just below it and would skip the lot's
        records under it (docs/relay.md, "Deleted only when final")."""
        for offset in offsets:
            e = self.entries.get(offset)
            if e is not None:
                e.misses = BACKOFF_EXP
                e.due = max(e.due, now + interval_s * 2**BACKOFF_EXP)

    def summary(self, high: int) -> tuple[int, int, tuple[tuple[int, str], ...]]:
        """(low_water, high, pending) for a checkpoint: ``pending`` lists every entry below ``high``,
        however many (the checkpoint store pages them), so ``high`` never waits for old jobs."""
        high = min(high, self.next)
        below = tuple((o, e.job_id) for o, e in self.entries.items() if o < high)
        low = below[0][0] if below else high
        return low, high, below
