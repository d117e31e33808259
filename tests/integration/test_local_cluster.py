"""The local cluster fixture: its masters split the slots and serve keys on every shard."""

from __future__ import annotations

import itertools

import pytest
import redis

from sluice.local.cluster import Cluster, slot_ranges

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
