"""Integration-only fixtures: a local Redis cluster (``sluice.local.cluster``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sluice.local.cluster import Cluster, start_cluster


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three masters, slots split evenly, started once per session."""
    root = tmp_path_factory.mktemp("redis-cluster")
    cluster = start_cluster(3, workdir=root, log_dir=root)
    yield cluster
    cluster.stop()


@pytest.fixture
def redis_cluster_url(redis_cluster: Cluster) -> str:
    """The ``redis+cluster://`` URL of a cluster whose every node was just flushed."""
    redis_cluster.flush_all()
    return redis_cluster.url


def queue_on(cluster: Cluster, shard: int, prefix: str = "q") -> str:
    """A queue name whose ``{queue}`` hash tag falls in the slots of master ``shard``."""
    from redis.crc import key_slot

    first, last = cluster.ranges[shard]
    for i in range(10_000):
        name = f"{prefix}{i}"
        if first <= key_slot(name.encode()) <= last:
            return name
    raise AssertionError(f"no queue name for shard {shard}")
