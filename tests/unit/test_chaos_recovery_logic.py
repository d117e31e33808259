"""Redis-loss recovery without servers: checkpoints, start plans, trackers and the relay hooks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from sluice.core.bus import EventBus
from sluice.core.errors import InvalidInput, JobNotFound, StaleToken
from sluice.core.models import JobSpec
from sluice.relay import RelayConfig, RelayHooks, RelayReport, SourceRecord, decode
from sluice.relay.ownership import Ownership, partition_job
from sluice.relay.recovery import Checkpoint, PartitionTracker, owner_token, plan_start
from sluice.relay.recovery.hook import Recovery
from sluice.relay.state import OwnedPartition
from sluice_dev.fakes import FakeCheckpoints, FakeEpochs, FakeOffsets, FakeStore


def test_the_first_session_trusts_the_committed_offset_and_writes_a_checkpoint() -> None:
    plan = plan_start(None, "e1", 40, "t", 0)
    assert plan.start is None and not plan.replay and plan.generation == 1
    assert plan.save == Checkpoint("t", 0, "e1", 1, 40, 40) and plan.expect_epoch is None


def test_the_same_epoch_resumes_at_the_lower_of_high_and_committed_knowing_the_pending_jobs() -> None:
    ckpt = Checkpoint("t", 0, "e1", 3, 10, 50, ((10, "a"), (30, "b"), (45, "c")))
    plan = plan_start(ckpt, "e1", 40, "t", 0)
    assert plan.start == 40 and not plan.replay and plan.generation == 3
    assert plan.known == ((10, "a"), (30, "b")) and plan.save is None
    assert plan_start(ckpt, "e1", None, "t", 0).start == 50


def test_a_new_epoch_replays_from_the_low_water_mark_with_a_new_generation() -> None:
    ckpt = Checkpoint("t", 0, "e1", 3, 10, 50, ((10, "a"),))
    plan = plan_start(ckpt, "e2", 40, "t", 0)
    assert plan.start == 10 and plan.replay and plan.generation == 4 and plan.known == ()
    # the switch claims nothing above low_water, so a relay dying mid-replay replays again
    assert plan.save == Checkpoint("t", 0, "e2", 4, 10, 10) and plan.expect_epoch == "e1"


def test_owner_tokens_of_a_newer_generation_beat_any_older_lease_token() -> None:
    assert owner_token(2, 1) > owner_token(1, 2**32 - 1)
    assert owner_token(1, 5) > owner_token(1, 4)
    for gen, lease in ((0, 1), (1, 0), (1, 2**32), (2**21, 1)):
        with pytest.raises(InvalidInput):
            owner_token(gen, lease)


def test_the_tracker_keeps_unfinished_jobs_in_offset_order_and_lists_them_all() -> None:
    t = PartitionTracker(5, known=[(3, "k")])
    for offset, job in ((5, "a"), (6, None), (7, "b"), (8, "c"), (6, "again")):
        t.track(offset, job)
    assert [(o, e.job_id) for o, e in t.entries.items()] == [(3, "k"), (5, "a"), (7, "b"), (8, "c")]
    assert t.next == 9
    scanned = t.due(0.0, limit=2)  # the scan looks at the oldest two due
    assert scanned == [(3, "k"), (5, "a")]
    assert t.checked(scanned, {"a", "k"}, 0.0, 1.0) == 2
    assert [(o, e.job_id) for o, e in t.entries.items()] == [(7, "b"), (8, "c")]
    assert t.summary(high=9) == (7, 9, ((7, "b"), (8, "c")))
    assert t.summary(high=8) == (7, 8, ((7, "b"),))
    assert t.summary(high=50)[1] == 9  # never above what was read
    t.checked(t.due(0.0, 10), {"b", "c"}, 0.0, 1.0)
    assert t.summary(high=9) == (9, 9, ())


def test_issue_13_bug_3_a_long_lived_backlog_neither_pins_high_nor_fills_the_scan() -> None:
    """2,000 jobs delayed by a day, then newer ones that finish: ``high`` passes them all, and
    the scan reaches the newer ones although the old ones stay unfinished (no window to fill)."""
    t = PartitionTracker(0)
    for offset in range(2000):
        t.track(offset, f"late{offset}", now=0.0)
    for offset in range(2000, 2500):
        t.track(offset, f"new{offset}", now=0.0)
    done = {f"new{o}" for o in range(2000, 2500)}
    now, interval, scans = 0.0, 5.0, []
    for _ in range(12):  # one minute of scans, 1,000 ids each at most
        scanned = t.due(now, limit=1000)
        scans.append(len(scanned))
        t.checked(scanned, done & {j for _, j in scanned}, now, interval)
        now += interval
    low, high, pending = t.summary(high=2500)
    assert high == 2500 and low == 0
    assert pending == tuple((o, f"late{o}") for o in range(2000))  # every unfinished one, no cap
    # the unfinished ones back off: a minute of scans reads each a few times, not twelve
    assert sum(scans) < 2500 + 2000 * 4
    later = t.due(now + 5 * 60, limit=5000)
    assert len(later) == 2000  # still checked every few minutes (2**BACKOFF_EXP intervals at most)


def test_known_entries_from_a_checkpoint_are_checked_spread_out() -> None:
    import random

    known = [(o, f"j{o}") for o in range(1000)]
    t = PartitionTracker(1000, known, now=100.0, spread_s=320.0, rng=random.Random(1))
    assert len(t.due(100.0, 5000)) < 20  # spread, not all at once
    assert 100 < len(t.due(160.0, 5000)) < 320  # about a fifth in the first minute
    assert len(t.due(420.0, 5000)) == 1000
    assert t.summary(1000) == (0, 1000, tuple(known))


def test_the_oldest_known_entries_are_checked_at_the_first_scan_so_the_low_water_moves() -> None:
    """Spread over 320 s, the entry holding the low water waited a random time, in sessions that
    last seconds: a chaos run's low water stayed at offset 5, and each Redis loss replayed the
    partition from there. The oldest ``head`` are due at once; the rest stay spread."""
    import random

    known = [(o, f"j{o}") for o in range(1000)]
    t = PartitionTracker(1000, known, now=100.0, spread_s=320.0, head=250, rng=random.Random(1))
    first = t.due(100.0, 5000)
    assert [o for o, _ in first[:250]] == list(range(250)) and len(first) < 270
    t.checked(first, {job for _, job in first}, 100.0, 2.0)  # their jobs had ended
    assert t.summary(1000)[0] >= 250  # the low water moved past them at once
    assert len(t.due(101.0, 5000)) < 20  # the rest: still spread


def test_an_incomplete_checkpoint_resumes_from_its_low_water_mark_to_learn_its_pending_list() -> None:
    ckpt = Checkpoint("t", 0, "e1", 3, 10, 50, ((10, "a"),), complete=False)
    plan = plan_start(ckpt, "e1", 40, "t", 0)
    assert plan.start == 10 and not plan.replay and plan.known == () and plan.save is None
    assert plan.generation == 3


def test_a_checkpoint_is_not_held_back_by_more_than_a_thousand_unfinished_jobs(rig: Any) -> None:
    rig.offsets._committed[0] = 0
    rig.take([0])
    rig.source.records = [record(0, o, f"j{o}") for o in range(2500)]
    rig.poll()
    rig.clock[0] = 5.0
    rig.commit({0: 2500})
    ckpt = rig.ckpts.items[0]
    assert (ckpt.low_water, ckpt.high, len(ckpt.pending)) == (0, 2500, 2500)
    plan = plan_start(ckpt, rig.epochs.epoch, 2500, "t", 0)
    assert plan.start == 2500 and len(plan.known) == 2500  # the next session resumes past them


# -- the hooks, over fakes ------------------------------------------------------------------------


class FakeSource:
    topic = "t"

    def __init__(self) -> None:
        self.records: list[SourceRecord] = []
        self.commits: list[dict[int, int]] = []

    def partitions(self) -> list[int]:
        return [0, 1]

    def assign(self, partitions: Any) -> None: ...
    def rewind_to_committed(self, partitions: Any) -> None: ...

    def poll(self, timeout_ms: int, max_records: int) -> list[SourceRecord]:
        out, self.records = self.records, []
        return out

    def commit(self, offsets: Any) -> None:
        self.commits.append(dict(offsets))


class FakeEngine:
    def __init__(self) -> None:
        self.pushes: list[tuple[str, int, int]] = []
        self.enqueued: list[str] = []
        self.missing = False

    def push(self, queue: str, topic: str, partition: int, owner_token: int, records: Any,
             gens: Any = None) -> Any:
        self.pushes.append((queue, partition, owner_token))
        return None

    def enqueue_internal(self, spec: JobSpec) -> bool:  # the ownership jobs' only way in
        assert spec.queue == "sluice-relay"
        self.enqueued.append(spec.job_id)
        return True

    def enqueue_internal_many(self, specs: Sequence[JobSpec]) -> list[bool]:
        return [self.enqueue_internal(spec) for spec in specs]

    def lease(self, queue: str, n: int, lease_ms: int | None, worker_id: str) -> list[Any]:
        return []

    def extend(self, queue: str, job_id: str, token: int, lease_ms: int) -> Any:
        if self.missing:
            raise JobNotFound(f"no job {job_id}")
        return None


def record(partition: int, offset: int, job_id: str) -> SourceRecord:
    spec = JobSpec(job_id=job_id, queue="q", payload={})
    return SourceRecord(partition, offset, job_id.encode(), spec.model_dump_json().encode())


class Rig:
    def __init__(self) -> None:
        self.epochs, self.ckpts = FakeEpochs(), FakeCheckpoints()
        self.offsets = FakeOffsets({0: 100, 1: None})
        self.store = FakeStore(only={"final_job_ids", "relay_view"})
        self.source, self.engine = FakeSource(), FakeEngine()
        self.clock = [0.0]
        self.recovery = Recovery("t", self.epochs, self.ckpts, self.offsets, self.store, interval_s=1.0,
                                 clock=lambda: self.clock[0], events=EventBus())

    # The relay's calls at each hook, as its parts make them (sluice.relay.ownership, intake,
    # pusher, committer), around the fake source and engine.

    def take(self, partitions: list[int]) -> None:
        self.source.rewind_to_committed(partitions)
        self.recovery.on_partitions_taken(partitions)

    def poll(self) -> None:
        self.recovery.on_records([(r, decode(r)) for r in self.source.poll(0, 10_000)])

    def commit(self, offsets: dict[int, int]) -> None:
        forward = self.recovery.on_commit(offsets)
        if forward:
            self.source.commit(forward)

    def assign(self, partitions: list[int]) -> None:
        self.recovery.on_assigned(partitions)
        self.source.assign(partitions)

    def lease(self) -> None:
        def register_all() -> None:
            for p in self.source.partitions():
                self.engine.enqueue_internal(partition_job("t", p, 1000))

        self.recovery.before_lease(register_all)

    def push(self, queue: str, partition: int, lease_token: int) -> None:
        owner = self.recovery.before_push(queue, partition, lease_token)
        self.engine.push(queue, "t", partition, owner, [])

    def lost_on_extend(self) -> bool:
        """Whether a relay holding partition 0 loses it when extending its ownership lease."""
        class NoNewPartitions(FakeSource):
            def partitions(self) -> list[int]:
                return []

        ownership = Ownership(self.engine, NoNewPartitions(), RelayConfig(lease_ms=1000),  # type: ignore[arg-type]
                              relay_id="r", started=0.0, report=RelayReport(),
                              hooks=RelayHooks(), events=EventBus())
        ownership.owned[0] = OwnedPartition(number=0, job_id="t.0", token=7, leased_at=0.0)
        ownership.check(1.0)
        return 0 not in ownership.owned and ownership.report.partitions_lost == 1


@pytest.fixture
def rig() -> Rig:
    return Rig()


def test_a_new_partition_starts_at_its_committed_offset_and_checkpoints_what_is_unfinished(rig: Any) -> None:
    rig.take([0])
    assert rig.offsets.seeks == [] and rig.ckpts.items[0].low_water == 100
    rig.source.records = [record(0, 100, "a"), record(0, 101, "b"), record(0, 102, "c")]
    rig.poll()
    rig.store.final = {"a", "c"}
    rig.clock[0] = 5.0
    rig.commit({0: 103})
    assert rig.source.commits == [{0: 103}]
    assert rig.ckpts.items[0] == Checkpoint("t", 0, rig.epochs.epoch, 1, 101, 103, ((101, "b"),))


def test_after_a_redis_loss_pushes_are_refused_and_the_next_session_replays(rig: Any) -> None:
    rig.lease()
    rig.lease()  # same epoch: not registered again
    rig.take([0])
    rig.push("q", 0, 7)
    assert rig.engine.pushes == [("q", 0, owner_token(1, 7))]
    rig.ckpts.items[0] = Checkpoint("t", 0, rig.epochs.epoch, 1, 60, 100, ((60, "x"),))
    rig.epochs.epoch = None  # Redis restarted empty
    with pytest.raises(StaleToken):
        rig.push("q", 0, 8)
    rig.engine.missing = True
    assert rig.lost_on_extend()  # the ownership job vanished: the relay drops the partition
    rig.assign([])  # the relay gave everything up
    rig.lease()
    assert rig.engine.enqueued == ["t.0", "t.1"] * 2  # once at start, once more in the new epoch
    rig.take([0])
    assert rig.offsets.seeks == [(0, 60)]  # replay from the low-water mark
    assert rig.ckpts.items[0].generation == 2 and rig.ckpts.items[0].high == 60
    rig.push("q", 0, 1)
    rig.push("q", 0, 1)
    rig.push("r", 0, 1)
    assert rig.engine.pushes[-1] == ("r", 0, owner_token(2, 1)) and owner_token(2, 1) > owner_token(1, 8)
    assert rig.epochs.rebased == [("q", 0, owner_token(2, 1), 59), ("r", 0, owner_token(2, 1), 59)]
    rig.commit({0: 70})  # below what Kafka had committed (100): not sent
    assert rig.source.commits == []


def test_a_checkpoint_refused_because_the_epoch_moved_on_drops_the_session(rig: Any) -> None:
    rig.take([0])
    rig.ckpts.items[0] = Checkpoint("t", 0, "someone-else", 2, 0, 0)
    rig.clock[0] = 5.0
    rig.commit({0: 101})
    assert 0 not in rig.recovery.sessions
    with pytest.raises(StaleToken):
        rig.push("q", 0, 1)


def test_a_failed_checkpoint_does_not_hold_up_the_kafka_commit(rig: Any) -> None:
    from sluice.core.errors import BackendUnavailable

    rig.take([0])

    def unavailable(ckpt: Checkpoint, expect_epoch: str | None) -> bool:
        raise BackendUnavailable("dynamodb throttled")

    rig.ckpts.save = unavailable
    rig.clock[0] = 5.0
    rig.commit({0: 101})
    assert rig.source.commits == [{0: 101}] and 0 in rig.recovery.sessions


def test_a_new_sessions_first_checkpoint_moves_the_low_water_past_jobs_that_ended_meanwhile(rig: Any) -> None:
    """A session that lasts seconds (a relay invocation) must not leave the low water where the
    last one did: its known entries' checks were spread over 64 intervals, and a chaos run's low
    water stayed at offset 5 for 600 s, so each Redis loss replayed all of it."""
    rig.ckpts.items[0] = Checkpoint("t", 0, rig.epochs.current(), 1, 5, 100,
                                    tuple((o, f"j{o}") for o in range(5, 100)))
    rig.store.final = {f"j{o}" for o in range(5, 60)}  # ended since the last session's checkpoint
    rig.take([0])
    rig.clock[0] = 1.0
    rig.commit({0: 100})
    assert rig.ckpts.items[0].low_water == 60
