"""The chaos fault ``flush_registry_shard`` (``sluice_dev.local.stack.Stack.flush_registry_shard``) on
real servers: the registry's Redis cache is lost and nothing else; on a cluster, its whole shard.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import redis

from sluice.backends.redis.keys import QUEUES_KEY, REGISTRY_KEYS, QueueKeys
from sluice_dev.local.cluster import Cluster
from sluice_dev.local.stack import Stack
from tests.backends.conftest import queue_on

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def test_on_one_node_only_the_registry_keys_go(redis_url: str, tmp_path: Path) -> None:
    stack = Stack(state_dir=tmp_path)
    stack.servers["redis"] = SimpleNamespace(extra={"url": redis_url})  # type: ignore[assignment]
    with redis.Redis.from_url(redis_url, decode_responses=True) as c:
        for key in REGISTRY_KEYS:
            c.sadd(key, "emails") if key != REGISTRY_KEYS[2] else c.set(key, "1")
        c.zadd(QueueKeys("emails").ready, {"job-1": 1})
        assert stack.flush_registry_shard() == "deleted 3 of the registry's 3 keys"
        assert c.exists(*REGISTRY_KEYS) == 0
        assert c.zrange(QueueKeys("emails").ready, 0, -1) == ["job-1"]  # the queue keeps its data


def test_on_a_cluster_the_registry_shard_loses_everything_and_the_others_nothing(
        redis_cluster: Cluster, redis_cluster_url: str, tmp_path: Path) -> None:
    stack = Stack(state_dir=tmp_path, redis_shards=3)
    stack.cluster = redis_cluster
    owner = redis_cluster.owner(QUEUES_KEY)
    client = redis.RedisCluster.from_url(redis_cluster_url.replace("redis+cluster://", "redis://"),
                                         decode_responses=True)
    try:
        queues = {shard: queue_on(redis_cluster, shard) for shard in range(3)}
        client.sadd(QUEUES_KEY, *queues.values())
        for q in queues.values():
            client.zadd(QueueKeys(q).ready, {f"{q}-job": 1})
        assert stack.flush_registry_shard() == f"flushall shard {owner} of 3"
        assert client.exists(QUEUES_KEY) == 0
        for shard, q in queues.items():
            left = client.zrange(QueueKeys(q).ready, 0, -1)
            assert left == ([] if shard == owner else [f"{q}-job"]), (shard, owner)
    finally:
        client.close()
