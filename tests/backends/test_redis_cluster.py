"""Cluster URLs select the cluster client, retrying nothing; broken set-ups get clear errors.

The hostile set-ups of issue 20: a cluster URL at a single node, a single-node URL at a
cluster (MOVED), keys of one call across slots, slots nobody serves, a shard down during a
lease or an ack.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis
from redis.crc import key_slot

from sluice.backends.redis.engine import RedisQueue
from sluice.backends.redis.keys import QUEUES_KEY, QueueKeys
from sluice.core.errors import BackendUnavailable, RedisTopologyError
from sluice_dev.local.cluster import Cluster, start_cluster
from sluice_dev.local.servers import Server
from tests.backends.conftest import queue_on
from tests.backends.test_engine_support import spec

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


@pytest.fixture
def crq(redis_cluster_url: str) -> Iterator[RedisQueue]:
    queue = RedisQueue.from_url(redis_cluster_url)
    yield queue
    queue.close()


def test_cluster_url_selects_the_cluster_client_with_no_retries(crq: RedisQueue) -> None:
    assert isinstance(crq.client, redis.cluster.RedisCluster)
    assert crq.client.retry.get_retries() == 0


def test_lifecycle_on_three_queues_on_three_shards(redis_cluster: Cluster, crq: RedisQueue) -> None:
    queues = [queue_on(redis_cluster, i) for i in range(3)]
    for q in queues:
        crq.enqueue(spec("a", q))
        [job] = crq.lease(q, 1, 5_000)
        crq.ack(q, "a", job.lease_token)
        assert crq.stats(q).ready == 0
    # Each queue's keys live on its own shard.
    for i, q in enumerate(queues):
        with redis.Redis(port=redis_cluster.nodes[i].port) as node:
            assert node.exists(QueueKeys(q).seq)


def test_cluster_url_at_a_single_node_is_refused_at_connect(redis_server: Server) -> None:
    url = redis_server.extra["url"].replace("redis://", "redis+cluster://")
    with pytest.raises(RedisTopologyError, match="without cluster mode"):
        RedisQueue.from_url(url)


def test_single_node_url_at_a_cluster_names_the_mistake(redis_cluster: Cluster,
                                                        redis_cluster_url: str) -> None:
    other = queue_on(redis_cluster, 1)  # not on node 0, whose address the URL names
    rq = RedisQueue.from_url(redis_cluster.node_urls[0])
    try:
        with pytest.raises(RedisTopologyError, match=r"MOVED.*redis\+cluster://"):
            rq.enqueue(spec("a", other))
        with pytest.raises(RedisTopologyError, match="MOVED"):
            rq.stats(other)
    finally:
        rq.close()


def test_keys_across_slots_are_a_topology_error(redis_cluster: Cluster, crq: RedisQueue) -> None:
    a, b = QueueKeys(queue_on(redis_cluster, 0)), QueueKeys(queue_on(redis_cluster, 1))
    with pytest.raises(RedisTopologyError, match="different cluster slots"):
        crq.scripts._run("stats.lua", [a.ready, b.delayed], [])


def test_slots_nobody_serves_are_refused_at_connect(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cluster = start_cluster(1, workdir=tmp_path)
    try:
        with redis.Redis(port=cluster.nodes[0].port) as node:
            node.execute_command("CLUSTER", "DELSLOTS", *range(0, 100))
        with pytest.raises(RedisTopologyError, match="unassigned"):
            RedisQueue.from_url(cluster.url)
    finally:
        cluster.stop()


def test_a_shard_down_during_lease_or_ack_is_unavailable_then_recovers(redis_cluster: Cluster,
                                                                     crq: RedisQueue) -> None:
    # Shard 1: not the one holding the queue registry (sluice:queues, slot 16317), which every
    # enqueue and push writes, so the other shards' queues keep taking jobs.
    down = 1
    assert not redis_cluster.ranges[down][0] <= key_slot(QUEUES_KEY.encode()) <= redis_cluster.ranges[down][1]
    q = queue_on(redis_cluster, down)
    crq.enqueue(spec("a", q))
    crq.enqueue(spec("b", q))
    [job] = crq.lease(q, 1, 30_000)
    redis_cluster.nodes[down].kill()
    try:
        with pytest.raises(BackendUnavailable):
            crq.ack(q, job.job_id, job.lease_token)
        with pytest.raises(BackendUnavailable):
            crq.lease(q, 1, 30_000)
        other = queue_on(redis_cluster, 0)
        crq.enqueue(spec("c", other))
        [c] = crq.lease(other, 1, 30_000)
        crq.ack(other, "c", c.lease_token)
    finally:
        redis_cluster.restart(down)
    # The shard is back, empty (no persistence): the engine reaches it again without a new client.
    deadline = time.monotonic() + 10
    while True:
        try:
            assert crq.stats(q).ready == 0
            break
        except BackendUnavailable:
            assert time.monotonic() < deadline, "the restarted shard never answered"
            time.sleep(0.1)


def test_memory_guard_reads_the_fullest_primary(redis_cluster: Cluster, crq: RedisQueue) -> None:
    assert crq.memory_percent() is None  # no maxmemory anywhere
    with redis.Redis(port=redis_cluster.nodes[1].port) as node:
        node.config_set("maxmemory", 1_000_000_000)
        used = int(node.info("memory")["used_memory"])
        try:
            percent = crq.memory_percent()
            assert percent is not None and percent == pytest.approx(100.0 * used / 1e9, rel=0.2)
        finally:
            node.config_set("maxmemory", 0)
