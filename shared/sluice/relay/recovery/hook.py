"""Recovery as the relay's hooks (``sluice.relay.RelayHooks``): the relay calls it at named points.

- ``on_partitions_taken``: the relay took partitions and rewound them to the committed
  offset: plan each one's session (``tracker.plan_start``) and seek to its start (a
  replay when Redis's epoch changed);
- ``on_records``: track every record taken (offset, job id), decoded once by the relay;
- ``on_commit``: learn how far the relay has pushed (the checkpoint's ``high``), keep
  Kafka's committed offset from going backwards after a rewind, and checkpoint every few
  seconds after a bounded scan of the oldest tracked jobs against the store
  (``relay_view``: a job redriven since it last ran is not done with);
- ``on_assigned``: forget partitions the relay gave up; an empty assignment (the relay
  stopping) writes a last checkpoint;
- ``before_push`` (also before reading a relayed offset): refuse a partition whose session
  began under another Redis epoch (the relay then drops it, as for a newer owner), fold the
  generation into the owner token, and in a replay session rebase the partition's relayed
  offset in each queue that may have lost data (on a cluster: whose shard changed) before
  its first push there;
- ``before_lease`` of the ownership queue: after a Redis loss the ownership jobs are gone
  too, so they are enqueued again. (An ownership job that vanished is a lost lease: the
  relay's ``Ownership`` treats ``JobNotFound`` from ``extend`` as such.)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from sluice.core import bus as ev
from sluice.core.errors import SluiceError, StaleToken
from sluice.relay.hooks import Decoded, RelayHooks
from sluice.relay.recovery.tracker import BACKOFF_EXP, Checkpoint, PartitionTracker, owner_token, plan_start

log = logging.getLogger(__name__)


class Epochs(Protocol):
    """May also have ``lost(old_epoch, epoch, queue) -> bool``: whether ``queue``'s data may have
    been lost between the two epochs (``RedisEpochs``: on a cluster, only if its shard changed).
    Without it, every queue of a replay session counts as lost."""

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
    """May also have ``load_many(topic, partitions) -> {partition: Checkpoint | None}``: one read
    for a whole take-over (``DynamoCheckpoints``); ``Recovery`` uses it where it is there."""

    def load(self, topic: str, partition: int) -> Checkpoint | None: ...
    def save(self, ckpt: Checkpoint, expect_epoch: str | None) -> bool:
        """Write ``ckpt`` if the stored epoch is ``expect_epoch`` (None: no checkpoint yet)."""
        ...


class Offsets(Protocol):
    """May also have ``committed_many(partitions) -> {partition: offset | None}`` (``KafkaOffsets``)."""

    def committed(self, partition: int) -> int | None: ...
    def seek(self, partition: int, offset: int) -> None: ...


class Finality(Protocol):
    def relay_view(self, job_ids: Sequence[str]) -> tuple[set[str], dict[str, int]]:
        """(the ids whose jobs are done with, redrive generations): ``ports.JobStore.relay_view``.
        A failed or dead job redriven since it last ran is not done with: it stays pending."""
        ...


@dataclass
class _Session:
    epoch: str
    generation: int
    start: int
    tracker: PartitionTracker
    committed: int | None  # Kafka's committed offset when the session began
    replay: bool
    old_epoch: str | None = None  # a replay: the epoch the checkpoint had been written under
    rebased: set[str] = field(default_factory=set)  # queues seen (rebased if lost) in this replay session
    high: int | None = None  # the relay's last commit point


class Recovery(RelayHooks):
    """Per relay instance: the sessions of the partitions it owns."""

    def __init__(self, topic: str, epochs: Epochs, checkpoints: Checkpoints, offsets: Offsets,
                 finality: Finality, *, interval_s: float = 5.0, scan_limit: int = 1000,
                 events: ev.EventBus, clock: Callable[[], float] = time.monotonic) -> None:
        self.topic = topic
        self.epochs, self.checkpoints, self.offsets, self.finality = epochs, checkpoints, offsets, finality
        self.interval_s, self.scan_limit = interval_s, scan_limit
        self.events = events  # incidents (Replayed, CheckpointFailed): the relay's bus
        self.clock = clock
        self.sessions: dict[int, _Session] = {}
        self.replays = 0
        self._next_checkpoint = clock() + interval_s
        self._registered_epoch: str | None = None
        self._slowest_s = 0.0  # the slowest checkpoint so far: whether the final one fits a stop
        self._skip_final = False

    # -- the relay's hooks ------------------------------------------------------------------------

    def before_lease(self, register_all: Callable[[], None]) -> None:
        """After a Redis loss the partitions' ownership jobs are gone: enqueue them again."""
        epoch = self.epochs.peek()
        if epoch is not None and epoch == self._registered_epoch:
            return
        epoch = self.epochs.current()
        register_all()
        self._registered_epoch = epoch

    def before_push(self, queue: str, partition: int, lease_token: int) -> int:
        """The owner token for a push (or a relayed-offset read) of ``partition``; ``StaleToken``
        if its session began under another Redis epoch. A replay session rebases the
        partition's relayed offset in ``queue`` before its first push there."""
        if not self.usable(partition):
            raise StaleToken(f"partition {partition}: Redis's epoch changed since this relay took it")
        s = self.sessions[partition]
        owner = owner_token(s.generation, lease_token)
        if s.replay and queue not in s.rebased:
            # A queue whose shard kept its data keeps its relayed offset: the relay skips the
            # records it already pushed there, so a loss on one shard replays only that shard's queues.
            if self._lost(s.old_epoch, s.epoch, queue):
                self.epochs.rebase(queue, self.topic, partition, owner, s.start - 1)
            s.rebased.add(queue)
        return owner

    def _lost(self, old_epoch: str | None, epoch: str, queue: str) -> bool:
        lost = getattr(self.epochs, "lost", None)
        return True if lost is None else bool(lost(old_epoch, epoch, queue))

    # -- sessions ---------------------------------------------------------------------------------

    def on_partitions_taken(self, partitions: Sequence[int]) -> None:
        """The relay took ``partitions`` and rewound them to the committed offset: plan and seek."""
        epoch = self.epochs.current()
        ckpts, offsets = self._read_all(partitions)
        for p in partitions:
            self.sessions.pop(p, None)
            for attempt in range(3):  # another relay may switch the epoch between our load and save
                if attempt == 0:
                    ckpt, committed = ckpts[p], offsets[p]
                else:
                    ckpt, committed = self.checkpoints.load(self.topic, p), self.offsets.committed(p)
                plan = plan_start(ckpt, epoch, committed, self.topic, p)
                if plan.save is None or self.checkpoints.save(plan.save, plan.expect_epoch):
                    break
            else:
                raise StaleToken(f"the checkpoint of partition {p} keeps changing; not taking it")
            if plan.start is not None and plan.start != committed:
                self.offsets.seek(p, plan.start)
            start = plan.start if plan.start is not None else (committed or 0)
            # Known entries were checked by earlier sessions: spread their next checks out, but for
            # the oldest (a quarter of a scan), which hold the low water: checked at the first scan.
            tracker = PartitionTracker(start, plan.known, now=self.clock(),
                                       spread_s=self.interval_s * 2**BACKOFF_EXP, head=self.scan_limit // 4)
            self.sessions[p] = _Session(epoch, plan.generation, start, tracker, committed, plan.replay,
                                        ckpt.epoch if plan.replay and ckpt else None)
            if plan.replay:
                self.replays += 1
                self.events.emit(ev.Replayed(topic=self.topic, partition=p, start=start, committed=committed,
                                             old_epoch=ckpt.epoch if ckpt else None, epoch=epoch))

    def _read_all(self, partitions: Sequence[int]) -> tuple[Mapping[int, Checkpoint | None],
                                                            Mapping[int, int | None]]:
        """Every partition's checkpoint and committed offset, in one request each where the adapters
        can batch (``load_many``, ``committed_many``): a take-over of 8 partitions on a cold start
        made 8 reads of each, a round trip apiece."""
        load_many = getattr(self.checkpoints, "load_many", None)
        ckpts = (load_many(self.topic, partitions) if load_many is not None
                 else {p: self.checkpoints.load(self.topic, p) for p in partitions})
        committed_many = getattr(self.offsets, "committed_many", None)
        offsets = (committed_many(partitions) if committed_many is not None
                   else {p: self.offsets.committed(p) for p in partitions})
        return ckpts, offsets

    def on_assigned(self, partitions: Sequence[int]) -> None:
        """The relay's assignment is now ``partitions``: forget the others (lost or given back)."""
        if not partitions and not self._skip_final:
            self._checkpoint_quietly(force=True)
        for p in set(self.sessions) - set(partitions):
            del self.sessions[p]

    def usable(self, partition: int) -> bool:
        """Whether pushing this partition is safe: its session began in the Redis epoch of now."""
        s = self.sessions.get(partition)
        return s is not None and self.epochs.peek() == s.epoch

    # -- the record stream -------------------------------------------------------------------------

    def stopping(self, left_s: float) -> None:
        """The relay stops within ``left_s``: its final checkpoint is skipped if the slowest one so far
        would not fit twice (a finality read of many tracked records on a loaded table takes seconds).
        A checkpoint skipped is only late, as a failed one is: a replay starts from the last one
        saved, at or below what this one would have said, and the next owner checkpoints again."""
        self._skip_final = left_s < 2 * self._slowest_s

    def on_parked(self, partition: int, offsets: Sequence[int]) -> None:
        """Records of ``partition`` now parked: their finality checks wait (``PartitionTracker.hold``).
        A tenant's flood parked thousands a partition, each checked again every few seconds at first:
        13 of 120 s of a loaded relay's main thread went to those checkpoint reads."""
        s = self.sessions.get(partition)
        if s is not None:
            s.tracker.hold(offsets, self.clock(), self.interval_s)

    def on_records(self, decoded: Decoded) -> None:
        now = self.clock()
        for r, spec in decoded:
            s = self.sessions.get(r.partition)
            if s is not None and r.offset >= s.tracker.next:
                s.tracker.track(r.offset, None if isinstance(spec, str) else spec.job_id, now)

    def on_commit(self, offsets: Mapping[int, int]) -> dict[int, int]:
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
            self.events.emit(ev.CheckpointFailed(error=str(exc), retry_in_s=self.interval_s))

    def checkpoint(self, *, force: bool = False) -> None:
        """A bounded scan per partition (the oldest due entries), then one conditional write of
        its checkpoint, which lists every unfinished record below the relay's commit point."""
        now = self.clock()
        if not force and now < self._next_checkpoint:
            return
        self._next_checkpoint = now + self.interval_s
        try:
            self._checkpoint(now)
        finally:
            self._slowest_s = max(self._slowest_s, self.clock() - now)

    def _checkpoint(self, now: float) -> None:
        for p, s in list(self.sessions.items()):
            if s.high is None:
                continue
            scanned = s.tracker.due(now, self.scan_limit)
            if scanned:
                final, _ = self.finality.relay_view([job_id for _, job_id in scanned])
                s.tracker.checked(scanned, final, now, self.interval_s)
            low, high, pending = s.tracker.summary(s.high)
            ckpt = Checkpoint(self.topic, p, s.epoch, s.generation, low, high, pending)
            if not self.checkpoints.save(ckpt, s.epoch):
                log.warning("checkpoint of partition %s refused: its epoch moved on; dropping it", p)
                del self.sessions[p]
