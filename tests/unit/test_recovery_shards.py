"""A cluster's epoch, one part per primary (sluice.relay.recovery.shards), and the replay it drives:
a loss on one shard rebases only the queues that shard holds."""

from __future__ import annotations

from redis.crc import key_slot

from sluice.core.bus import EventBus
from sluice.relay.recovery import Checkpoint
from sluice.relay.recovery.hook import Recovery
from sluice.relay.recovery.shards import compose, holder, parse, ranges_of, shard_lost, tag_in
from sluice_dev.fakes import FakeCheckpoints, FakeEpochs, FakeOffsets, FakeStore

A = ((0, 5460),)
B = ((5461, 10921),)
C = ((10922, 16383),)


def epoch(a: str = "ka/r1", b: str = "kb/r2", c: str = "kc/r3") -> str:
    return compose([(C, c), (A, a), (B, b)])


def test_compose_orders_parts_by_slot_and_parse_reads_them_back() -> None:
    e = epoch()
    assert e == "0-5460=ka/r1;5461-10921=kb/r2;10922-16383=kc/r3"
    assert parse(e) == [(A, "ka/r1"), (B, "kb/r2"), (C, "kc/r3")]
    assert holder(parse(e) or [], 6000) == "kb/r2"
    two = compose([(((0, 10), (100, 200)), "x/y"), (((11, 99),), "z/w")])
    assert parse(two) == [(((0, 10), (100, 200)), "x/y"), (((11, 99),), "z/w")]


def test_a_single_nodes_epoch_is_no_cluster_epoch() -> None:
    assert parse("0123abcd/5f4e") is None
    assert parse("1-x=a/b") is None


def test_only_the_shard_that_changed_counts_as_lost() -> None:
    old, new = epoch(), epoch(b="kb2/r2")  # shard B lost its epoch key (a FLUSHALL, a restart)
    assert not shard_lost(old, new, 0) and not shard_lost(old, new, 16000)
    assert shard_lost(old, new, 5461) and shard_lost(old, new, 10921)
    failover = epoch(c="kc/r9")  # a new replication id: a failover
    assert shard_lost(old, failover, 12000) and not shard_lost(old, failover, 100)


def test_unknown_or_single_node_old_epochs_and_moved_slots_count_as_lost() -> None:
    assert shard_lost(None, epoch(), 0)
    assert shard_lost("abc/def", epoch(), 0)  # a checkpoint from before cluster mode
    resharded = compose([(((0, 5000),), "ka/r1"), (((5001, 10921),), "kb/r2"), (C, "kc/r3")])
    assert shard_lost(epoch(), resharded, 5200)  # slot moved from A to B: one harmless replay
    assert not shard_lost(epoch(), resharded, 6000)


def test_ranges_of_and_tags_in_each_range() -> None:
    owners = ["a"] * 3 + ["b"] * 2 + ["a"] * 2
    assert ranges_of(owners) == {"a": ((0, 2), (5, 6)), "b": ((3, 4),)}
    for r in (A, B, C):
        tag = tag_in(r, key_slot)
        assert r[0][0] <= key_slot(tag.encode()) <= r[0][1]
        assert tag_in(r, key_slot) == tag  # the same for every relay


class ShardEpochs(FakeEpochs):
    """FakeEpochs over three shards: ``lost`` as RedisEpochs answers it on a cluster."""

    def __init__(self, slot_of: dict[str, int]) -> None:
        super().__init__()
        self.slot_of = slot_of

    def current(self) -> str:
        if self.epoch is None:
            self.epoch = epoch()
        return self.epoch

    def lost(self, old_epoch: str | None, new: str, queue: str) -> bool:
        return shard_lost(old_epoch, new, self.slot_of[queue])


def test_a_loss_on_one_shard_rebases_only_its_queues() -> None:
    epochs = ShardEpochs({"qa": 10, "qb": 6000, "qc": 12000})
    ckpts, offsets = FakeCheckpoints(), FakeOffsets({0: 100})
    rec = Recovery("t", epochs, ckpts, offsets, FakeStore(only={"relay_view"}), events=EventBus())
    ckpts.items[0] = Checkpoint("t", 0, epoch(), 1, 80, 100)
    epochs.epoch = epoch(b="kb-new/r2")  # shard B lost its data
    rec.on_partitions_taken([0])
    assert rec.sessions[0].replay
    for q in ("qa", "qb", "qc", "qb"):
        rec.before_push(q, 0, 7)
    assert [(q, offset) for q, _, _, offset in epochs.rebased] == [("qb", 79)]


def test_without_lost_every_queue_of_a_replay_is_rebased_as_before() -> None:
    epochs, ckpts, offsets = FakeEpochs(), FakeCheckpoints(), FakeOffsets({0: 100})
    rec = Recovery("t", epochs, ckpts, offsets, FakeStore(only={"relay_view"}), events=EventBus())
    ckpts.items[0] = Checkpoint("t", 0, "old/r", 1, 80, 100)
    rec.on_partitions_taken([0])
    for q in ("qa", "qb"):
        rec.before_push(q, 0, 7)
    assert [q for q, *_ in epochs.rebased] == ["qa", "qb"]
