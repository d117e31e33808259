"""The backends tier's fixtures: a local Redis cluster (``sluice_dev.local.cluster``).

The engine's script tests (``CLUSTER_MODULES``: every Lua script, checked by the key state it
leaves) run twice, on one node and on a 3-master cluster: ``redis_url`` and ``redis_client``
are parametrized by ``redis_topology`` there. Elsewhere they are the single node's.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from hypothesis import settings

from sluice.backends.dynamodb import tables
from sluice.backends.dynamodb.queues import DynamoQueueDirectory
from sluice.backends.redis.engine import RedisQueue
from sluice_dev.local import servers
from sluice_dev.local.cluster import Cluster, start_cluster
from tests.backends.test_engine_support import make_queue

# Hypothesis's 200 ms deadline per example fails a test on a loaded 2-core CI machine (a unit run
# beside the helpers' suites failed test_tenancy's id property so, and passed alone); each test's
# time is bounded by pytest-timeout instead.
settings.register_profile("sluice", deadline=None)
settings.load_profile("sluice")

# Together they run every engine script: lease, extend, ack, fail, release, reap, cancel, stats,
# redrive, settle, push (offsets, owner fencing, rate), register, idle/wake, the ownership lease,
# the listing.
CLUSTER_MODULES = frozenset({
    "test_lua_enqueue_lease", "test_lua_lifecycle", "test_lua_settle", "test_lua_admin",
    "test_lua_limits", "test_lua_push_rate", "test_engine_reserved", "test_relay_push_many",
    "test_lua_finished", "test_lua_throttle", "test_lua_budget", "test_lua_groups", "test_lua_listing",
})


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    module = metafunc.module.__name__.rpartition(".")[2]
    if module in CLUSTER_MODULES and "redis_url" in metafunc.fixturenames:
        metafunc.parametrize("redis_topology", ["node", "cluster"])


@pytest.fixture
def redis_topology() -> str:
    """"node" unless the module is one of ``CLUSTER_MODULES``, which run under "cluster" too."""
    return "node"


@pytest.fixture
def redis_url(request: pytest.FixtureRequest, redis_topology: str) -> str:
    """A clean database for every test: the single node's, or the cluster's."""
    if redis_topology == "cluster":
        return str(request.getfixturevalue("redis_cluster_url"))
    import redis

    server: servers.Server = request.getfixturevalue("redis_server")
    url = server.extra["url"]
    with redis.Redis.from_url(url) as client:
        client.flushall()
    return url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[object]:
    """A client of ``redis_url`` for checking key state: a cluster client on a cluster."""
    import redis

    if redis_url.startswith("redis+cluster://"):
        client: object = redis.RedisCluster.from_url(redis_url.replace("redis+cluster://", "redis://"),
                                                     decode_responses=True)
    else:
        client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()  # type: ignore[attr-defined]


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


@pytest.fixture
def directory(moto_url: str) -> DynamoQueueDirectory:
    """A new durable registry of queues (DynamoDB's queues table) on the moto server."""
    import boto3

    client = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=moto_url,
                          aws_access_key_id="test", aws_secret_access_key="test")
    name = f"queues-{uuid.uuid4().hex[:8]}"
    tables.create_queues_table(client, name)
    return DynamoQueueDirectory(client, name)


@pytest.fixture
def rq(redis_url: str) -> Iterator[RedisQueue]:
    """A RedisQueue on the test's Redis (a node, or the cluster for CLUSTER_MODULES), closed after."""
    yield from make_queue(redis_url)
