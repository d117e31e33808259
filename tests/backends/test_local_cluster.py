"""The local cluster fixture: its masters split the slots and serve keys on every shard."""

from __future__ import annotations

import itertools

import pytest
import redis

from sluice_dev.local.cluster import Cluster, slot_ranges

pytestmark = pytest.mark.timeout(60)


def test_slot_ranges_cover_every_slot_once() -> None:
    for n in (1, 2, 3, 7):
        ranges = slot_ranges(n)
        assert ranges[0][0] == 0 and ranges[-1][1] == 16383
        assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(ranges))
    with pytest.raises(ValueError):
        slot_ranges(0)


def test_cluster_serves_every_shard_and_a_restart_loses_one_shard(redis_cluster: Cluster,
                                                                 redis_cluster_url: str) -> None:
    client = redis.RedisCluster.from_url(redis_cluster_url.replace("redis+cluster", "redis"),
                                         decode_responses=True)
    try:
        nodes = {n.port for n in client.get_primaries()}
        assert nodes == {s.port for s in redis_cluster.nodes}
        # One key per shard: hash tags chosen by slot.
        tags = {}
        for i in range(1000):
            slot = client.keyslot(f"{{t{i}}}")
            shard = next(j for j, (a, b) in enumerate(redis_cluster.ranges) if a <= slot <= b)
            tags.setdefault(shard, f"{{t{i}}}k")
            if len(tags) == 3:
                break
        for tag in tags.values():
            client.set(tag, "v")
        redis_cluster.restart(1)
        assert client.get(tags[0]) == "v" and client.get(tags[2]) == "v"
        assert client.get(tags[1]) is None
    finally:
        client.close()


def test_the_local_stack_runs_a_cluster_and_restarts_one_shard_empty(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from sluice_dev.local.stack import Stack
    from tests.backends.conftest import queue_on

    stack = Stack(state_dir=tmp_path / "stack", redis_shards=3)
    try:
        settings = stack.start_servers()
        assert stack.cluster is not None and settings.redis_url == stack.cluster.url
        assert [stack.servers[n].port for n in ("redis", "redis-1", "redis-2")] == [
            s.port for s in stack.cluster.nodes]
        client = redis.RedisCluster.from_url(settings.redis_url.replace("redis+cluster", "redis"),
                                             decode_responses=True)
        keys = [f"{{{queue_on(stack.cluster, i)}}}:k" for i in range(3)]
        for k in keys:
            client.set(k, "v")
        old_pid = stack.servers["redis-1"].pid
        stack.restart_redis_shard(1)
        assert stack.servers["redis-1"].pid != old_pid and stack.servers["redis-1"].alive()
        assert [client.get(k) for k in keys] == ["v", None, "v"]
        client.close()
        nodes = list(stack.cluster.nodes)
    finally:
        stack.stop()
    assert not any(n.alive() for n in nodes)
