"""Recovery wired around an unchanged relay: a wrapped record source and a wrapped engine.

The relay (``sluice.relay.Relay``) talks to its Kafka source and its Redis engine only
through small protocols, so recovery sits between them, where it sees everything it
needs:

- ``rewind_to_committed`` on partitions the relay just took: plan the session
  (``tracker.plan_start``) and seek to its start (a replay when Redis's epoch changed);
- ``poll``: track every record read (offset, job id);
- ``commit``: learn how far the relay has pushed (the checkpoint's ``high``), keep Kafka's
  committed offset from going backwards after a rewind, and checkpoint every few seconds
  after a bounded scan of the oldest tracked jobs against the store (``final_job_ids``);
- ``assign``: forget partitions the relay gave up; ``assign([])`` (the relay stopping)
  writes a last checkpoint;
- ``push``: refuse to push a partition whose session began under another Redis epoch
  (the relay then drops it, as for a newer owner), fold the generation into the owner
  token, and in a replay session rebase the partition's relayed offset in each queue
  before its first push there;
- ``lease`` of the relay's own ownership queue: after a Redis loss the ownership jobs are
  gone too, so they are enqueued again; ``extend`` of one that vanished is a lost lease.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from sluice.errors import JobNotFound, LeaseLost, SluiceError, StaleToken
from sluice.models import EndedJob, JobSpec, LeasedJob
from sluice.ports import Metrics
from sluice.recovery.tracker import BACKOFF_EXP, Checkpoint, PartitionTracker, owner_token, plan_start
from sluice.relay import (
    RELAY_QUEUE,
    PushOutcome,
    RecordSource,
    RelayEngine,
    SourceRecord,
    decode,
    partition_job,
)

log = logging.getLogger(__name__)


class Epochs(Protocol):
    def peek(self) -> str | None:
        """The Redis epoch now, or None if Redis has none (it lost it)."""
        ...

    def current(self) -> str:
        """The Redis epoch, creating one if Redis has none."""
        ...

    def rebase(self, queue: str, topic: str, partition: int, owner: int, offset: int) -> bool:
        """Set the relayed offset of (queue, topic, partition) back to ``offset`` if a lower
        owner token than ``owner`` wrote it; True if it did."""
        ...


class Checkpoints(Protocol):
    def load(self, topic: str, partition: int) -> Checkpoint | None: ...
    def save(self, ckpt: Checkpoint, expect_epoch: str | None) -> bool:
        """Write ``ckpt`` if the stored epoch is ``expect_epoch`` (None: no checkpoint yet)."""
        ...


class Offsets(Protocol):
    def committed(self, partition: int) -> int | None: ...
    def seek(self, partition: int, offset: int) -> None: ...


class Finality(Protocol):
    def final_job_ids(self, job_ids: Sequence[str]) -> set[str]: ...


class _NoMetrics:
    def count(self, name: str, value: float = 1, **dimensions: str) -> None:
        return None


@dataclass
class _Session:
    epoch: str
    generation: int
    start: int
    tracker: PartitionTracker
    committed: int | None  # Kafka's committed offset when the session began
    replay: bool
    rebased: set[str] = field(default_factory=set)  # queues rebased in this replay session
    high: int | None = None  # the relay's last commit point


class Recovery:
    """Per relay instance: the sessions of the partitions it owns."""

    def __init__(self, topic: str, epochs: Epochs, checkpoints: Checkpoints, offsets: Offsets,
                 finality: Finality, *, interval_s: float = 5.0, scan_limit: int = 1000,
                 metrics: Metrics | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.topic = topic
        self.epochs, self.checkpoints, self.offsets, self.finality = epochs, checkpoints, offsets, finality
        self.interval_s, self.scan_limit = interval_s, scan_limit
        self.metrics: Metrics = metrics or _NoMetrics()
        self.clock = clock
        self.sessions: dict[int, _Session] = {}
        self.replays = 0
        self._next_checkpoint = clock() + interval_s

    # -- sessions ---------------------------------------------------------------------------------

    def begin(self, partitions: Sequence[int]) -> None:
        """The relay took ``partitions`` and rewound them to the committed offset: plan and seek."""
        epoch = self.epochs.current()
        for p in partitions:
            self.sessions.pop(p, None)
            for _ in range(3):  # another relay may switch the epoch between our load and save
                ckpt = self.checkpoints.load(self.topic, p)
                committed = self.offsets.committed(p)
                plan = plan_start(ckpt, epoch, committed, self.topic, p)
                if plan.save is None or self.checkpoints.save(plan.save, plan.expect_epoch):
                    break
            else:
                raise StaleToken(f"the checkpoint of partition {p} keeps changing; not taking it")
            if plan.start is not None and plan.start != committed:
                self.offsets.seek(p, plan.start)
            start = plan.start if plan.start is not None else (committed or 0)
            # Known entries were checked by earlier sessions: spread their next checks out.
            tracker = PartitionTracker(start, plan.known, now=self.clock(),
                                       spread_s=self.interval_s * 2**BACKOFF_EXP)
            self.sessions[p] = _Session(epoch, plan.generation, start, tracker, committed, plan.replay)
            if plan.replay:
                self.replays += 1
                self.metrics.count("RelayReplays")
                log.warning("Redis lost data (epoch %s -> %s): replaying partition %s of %s from offset %s "
                            "(committed %s), skipping jobs already final", ckpt.epoch if ckpt else None,
                            epoch, p, self.topic, start, committed)

    def keep(self, partitions: Sequence[int]) -> None:
        """The relay's assignment is now ``partitions``: forget the others (lost or given back)."""
        if not partitions:
            self._checkpoint_quietly(force=True)
        for p in set(self.sessions) - set(partitions):
            del self.sessions[p]

    def usable(self, partition: int) -> bool:
        """Whether pushing this partition is safe: its session began in the Redis epoch of now."""
        s = self.sessions.get(partition)
        return s is not None and self.epochs.peek() == s.epoch

    # -- the record stream -------------------------------------------------------------------------

    def track(self, records: Sequence[SourceRecord]) -> None:
        now = self.clock()
        for r in records:
            s = self.sessions.get(r.partition)
            if s is not None and r.offset >= s.tracker.next:
                spec = decode(r)
                s.tracker.track(r.offset, spec.job_id if isinstance(spec, JobSpec) else None, now)

    def commit_filter(self, offsets: Mapping[int, int]) -> dict[int, int]:
        """Record the relay's progress; pass on only offsets beyond what Kafka had committed."""
        out = {}
        for p, offset in offsets.items():
            s = self.sessions.get(p)
            if s is None:
                out[p] = offset
                continue
            s.high = offset
            if s.committed is None or offset > s.committed:
                out[p] = offset
                s.committed = offset
        if self.clock() >= self._next_checkpoint:
            self._checkpoint_quietly()
        return out

    def _checkpoint_quietly(self, *, force: bool = False) -> None:
        """A checkpoint that failed is only late: it must not hold up the Kafka commit."""
        try:
            self.checkpoint(force=force)
        except SluiceError as exc:
            self.metrics.count("RelayCheckpointFailed")
            log.warning("checkpoint failed, next one in %ss: %s", self.interval_s, exc)

    def checkpoint(self, *, force: bool = False) -> None:
        """A bounded scan per partition (the oldest due entries), then one conditional write of
        its checkpoint, which lists every unfinished record below the relay's commit point."""
        now = self.clock()
        if not force and now < self._next_checkpoint:
            return
        self._next_checkpoint = now + self.interval_s
        for p, s in list(self.sessions.items()):
            if s.high is None:
                continue
            scanned = s.tracker.due(now, self.scan_limit)
            if scanned:
                final = self.finality.final_job_ids([job_id for _, job_id in scanned])
                s.tracker.checked(scanned, final, now, self.interval_s)
            low, high, pending = s.tracker.summary(s.high)
            ckpt = Checkpoint(self.topic, p, s.epoch, s.generation, low, high, pending)
            if not self.checkpoints.save(ckpt, s.epoch):
                log.warning("checkpoint of partition %s refused: its epoch moved on; dropping it", p)
                del self.sessions[p]

    # -- pushing -----------------------------------------------------------------------------------

    def owner(self, partition: int, lease_token: int) -> int:
        return owner_token(self.sessions[partition].generation, lease_token)

    def before_push(self, queue: str, partition: int, owner: int) -> None:
        s = self.sessions[partition]
        if s.replay and queue not in s.rebased:
            self.epochs.rebase(queue, self.topic, partition, owner, s.start - 1)
            s.rebased.add(queue)


class RecoveringSource:
    """``relay.RecordSource`` with recovery's hooks; everything else goes to ``source``."""

    def __init__(self, source: RecordSource, recovery: Recovery) -> None:
        self.source = source
        self.recovery = recovery

    @property
    def topic(self) -> str:
        return self.source.topic

    def partitions(self) -> list[int]:
        return self.source.partitions()

    def assign(self, partitions: Sequence[int]) -> None:
        self.recovery.keep(partitions)
        self.source.assign(partitions)

    def rewind_to_committed(self, partitions: Sequence[int]) -> None:
        self.source.rewind_to_committed(partitions)
        self.recovery.begin(partitions)

    def poll(self, timeout_ms: int, max_records: int) -> list[SourceRecord]:
        records = self.source.poll(timeout_ms, max_records)
        self.recovery.track(records)
        return records

    def commit(self, offsets: Mapping[int, int]) -> None:
        forward = self.recovery.commit_filter(offsets)
        if forward:
            self.source.commit(forward)

    def pause(self, partitions: Sequence[int]) -> None:
        self.source.pause(partitions)

    def resume(self, partitions: Sequence[int]) -> None:
        self.source.resume(partitions)

    def dead_letter(self, record: SourceRecord, reason: str) -> None:
        self.source.dead_letter(record, reason)

    def flush_dead_letters(self) -> None:
        self.source.flush_dead_letters()

    def close(self) -> None:
        close = getattr(self.source, "close", None)
        if close is not None:
            close()


class RecoveringEngine:
    """``relay.RelayEngine`` with recovery's hooks; everything else goes to ``engine``."""

    def __init__(self, engine: RelayEngine, recovery: Recovery, partitions: Callable[[], list[int]]) -> None:
        self.engine = engine
        self.recovery = recovery
        self._partitions = partitions
        self._registered_epoch: str | None = None

    def push(self, queue: str, topic: str, partition: int, owner_token: int,
             records: list[tuple[int, JobSpec]]) -> PushOutcome:
        if not self.recovery.usable(partition):
            raise StaleToken(f"partition {partition}: Redis's epoch changed since this relay took it")
        owner = self.recovery.owner(partition, owner_token)
        self.recovery.before_push(queue, partition, owner)
        return self.engine.push(queue, topic, partition, owner, records)

    def relayed_offset(self, queue: str, topic: str, partition: int, owner_token: int) -> int:
        """As for a push: a replay session rebases the queue's offset first, so the relay never
        skips a record by an offset a stale relay wrote into the new Redis."""
        if not self.recovery.usable(partition):
            raise StaleToken(f"partition {partition}: Redis's epoch changed since this relay took it")
        owner = self.recovery.owner(partition, owner_token)
        self.recovery.before_push(queue, partition, owner)
        return self.engine.relayed_offset(queue, topic, partition, owner)

    def lease(self, queue: str, n: int, lease_ms: int | None, worker_id: str) -> list[LeasedJob]:
        if queue == RELAY_QUEUE and lease_ms is not None:
            self._register_again(lease_ms)
        return self.engine.lease(queue, n, lease_ms, worker_id)

    def _register_again(self, lease_ms: int) -> None:
        """After a Redis loss the partitions' ownership jobs are gone: enqueue them again."""
        epoch = self.recovery.epochs.peek()
        if epoch is not None and epoch == self._registered_epoch:
            return
        epoch = self.recovery.epochs.current()
        topic = self.recovery.topic
        for p in self._partitions():
            self.engine.enqueue_internal(partition_job(topic, p, lease_ms))
        self._registered_epoch = epoch

    def extend(self, queue: str, job_id: str, token: int, lease_ms: int) -> Any:
        try:
            return self.engine.extend(queue, job_id, token, lease_ms)
        except JobNotFound as exc:
            if queue == RELAY_QUEUE:  # the ownership job vanished with Redis's data
                raise LeaseLost(f"ownership job {job_id} is gone: {exc}") from exc
            raise

    def enqueue_internal(self, spec: JobSpec) -> bool:
        return self.engine.enqueue_internal(spec)

    def ack(self, queue: str, job_id: str, token: int) -> None:
        self.engine.ack(queue, job_id, token)

    def release(self, queue: str, job_id: str, token: int) -> None:
        try:
            self.engine.release(queue, job_id, token)
        except JobNotFound as exc:
            raise LeaseLost(str(exc)) from exc

    def redrive(self, queue: str, job_id: str | None = None, generation: int = 0) -> int:
        return self.engine.redrive(queue, job_id, generation)

    def reap(self, queue: str, limit: int) -> int:
        return self.engine.reap(queue, limit)

    def stats(self, queue: str) -> Any:
        return self.engine.stats(queue)

    def queues(self) -> list[str]:
        return self.engine.queues()

    def take_rate(self, queue: str, wanted: int) -> int:
        return self.engine.take_rate(queue, wanted)

    def unsettled(self, queue: str, limit: int = 100) -> list[EndedJob]:
        return self.engine.unsettled(queue, limit)

    def settled(self, queue: str, jobs: Sequence[EndedJob]) -> int:
        return self.engine.settled(queue, jobs)

    # The limits' questions (sluice.limits), passed through when the engine can answer them.

    def register(self, queue: str) -> None:
        getattr(self.engine, "register", lambda _q: None)(queue)

    def trim_dead(self, queue: str, keep: int, max_age_ms: int, limit: int = 1000) -> tuple[int, int]:
        trim = getattr(self.engine, "trim_dead", None)
        return (0, 0) if trim is None else trim(queue, keep, max_age_ms, limit)

    def memory_percent(self) -> float | None:
        read = getattr(self.engine, "memory_percent", None)
        return None if read is None else read()


def wrap(engine: RelayEngine, source: RecordSource, recovery: Recovery) -> tuple[RecoveringEngine,
                                                                              RecoveringSource]:
    """The relay's engine and source with recovery in between (``Relay(engine, store, source)``)."""
    return RecoveringEngine(engine, recovery, source.partitions), RecoveringSource(source, recovery)

