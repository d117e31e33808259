"""Loss detection per shard on a real local cluster (issue 20): ``RedisEpochs`` keeps an epoch
per primary, and a loss on one shard replays exactly the queues that shard holds."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from sluice.backends.redis.engine import RedisQueue
from sluice.backends.redis.keys import QueueKeys
from sluice.core.bus import EventBus
from sluice.relay.recovery import Checkpoint
from sluice.relay.recovery.adapters import RedisEpochs
from sluice.relay.recovery.hook import Recovery
from sluice.relay.recovery.shards import parse
from sluice_dev.fakes import FakeCheckpoints, FakeOffsets, FakeStore
from sluice_dev.local.cluster import Cluster
from tests.backends.conftest import queue_on

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


@pytest.fixture
def crq(redis_cluster_url: str) -> Iterator[RedisQueue]:
    queue = RedisQueue.from_url(redis_cluster_url)
    yield queue
    queue.close()


def node(cluster: Cluster, i: int) -> redis.Redis:
    return redis.Redis(port=cluster.nodes[i].port, decode_responses=True)


def test_the_cluster_epoch_has_one_part_per_primary_each_key_on_its_own_shard(redis_cluster: Cluster,
                                                                              crq: RedisQueue) -> None:
    epochs = RedisEpochs(crq.client)
    assert epochs.peek() is None  # a fresh cluster has none
    e = epochs.current()
    parts = parse(e)
    assert parts is not None and [r for r, _ in parts] == [(r,) for r in redis_cluster.ranges]
    for i in range(3):
        with node(redis_cluster, i) as n:
            keys = n.keys("sluice:epoch:*")
            assert len(keys) == 1  # its own epoch key, in its own slots
            replid = n.info("replication")["master_replid"]
            assert parts[i][1] == f"{n.get(keys[0])}/{replid}"
    assert epochs.current() == e == epochs.peek()  # stable while nothing is lost


def test_a_flushed_shard_changes_its_part_only_and_lost_names_its_queues(redis_cluster: Cluster,
                                                                        crq: RedisQueue) -> None:
    epochs = RedisEpochs(crq.client)
    before = epochs.current()
    with node(redis_cluster, 1) as n:
        n.flushall()
    assert epochs.peek() is None  # one shard lost its key: the cluster's epoch is gone
    after = epochs.current()
    assert after != before
    old_parts, new_parts = parse(before), parse(after)
    assert old_parts and new_parts and old_parts[0] == new_parts[0] and old_parts[2] == new_parts[2]
    assert old_parts[1] != new_parts[1]
    queues = [queue_on(redis_cluster, i) for i in range(3)]
    assert [epochs.lost(before, after, q) for q in queues] == [False, True, False]


def test_a_restarted_shard_is_detected(redis_cluster: Cluster, crq: RedisQueue) -> None:
    epochs = RedisEpochs(crq.client)
    before = epochs.current()
    redis_cluster.restart(2)
    after = epochs.current()
    assert after != before
    assert [epochs.lost(before, after, queue_on(redis_cluster, i)) for i in range(3)] == [False, False, True]


def test_a_loss_on_one_shard_replays_its_queues_and_no_others(redis_cluster: Cluster,
                                                              crq: RedisQueue) -> None:
    """The relayed offsets of the lost shard's queue go back to the replay's start; the others
    keep theirs, so the relay skips what it already pushed there."""
    queues = [queue_on(redis_cluster, i) for i in range(3)]
    epochs = RedisEpochs(crq.client)
    ckpts, offsets = FakeCheckpoints(), FakeOffsets({0: 100})
    rec = Recovery("t", epochs, ckpts, offsets, FakeStore(only={"relay_view"}), events=EventBus())
    rec.on_partitions_taken([0])
    owner = rec.before_push(queues[0], 0, 1)
    for q in queues:  # pushed up to offset 99 on every shard
        crq.client.hset(QueueKeys(q).relayed("t", 0), mapping={"owner": owner, "offset": 99})
    ckpts.items[0] = Checkpoint("t", 0, rec.sessions[0].epoch, 1, 80, 100)

    with node(redis_cluster, 1) as n:  # shard 1 loses everything; a stale relay re-records 99 there
        n.flushall()
    crq.client.hset(QueueKeys(queues[1]).relayed("t", 0), mapping={"owner": owner, "offset": 99})
    assert not rec.usable(0)
    rec.on_partitions_taken([0])
    s = rec.sessions[0]
    assert s.replay and s.start == 80
    for q in queues:
        rec.before_push(q, 0, 2)
    offsets_now = [crq.client.hget(QueueKeys(q).relayed("t", 0), "offset") for q in queues]
    assert offsets_now == ["99", "79", "99"]


def test_a_shard_down_makes_the_epoch_unavailable_until_it_is_back(redis_cluster: Cluster,
                                                                   crq: RedisQueue) -> None:
    from sluice.core.errors import BackendUnavailable

    epochs = RedisEpochs(crq.client)
    before = epochs.current()
    redis_cluster.nodes[0].kill()
    try:
        with pytest.raises(BackendUnavailable):
            epochs.peek()
    finally:
        redis_cluster.restart(0)
    after = epochs.current()
    assert after != before
    assert [epochs.lost(before, after, queue_on(redis_cluster, i)) for i in range(3)] == [True, False, False]
