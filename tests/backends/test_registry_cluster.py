"""Issue 29, item 3: on a cluster, losing the registry's shard strands no queue.

A local 3-master cluster and the durable registry (DynamoDB's queues table on the moto server).
The shard holding ``sluice:queues`` is flushed; a queue on another shard kept its jobs. Relay
maintenance walks the registry's Redis cache, so before the fix it found it empty and left that
queue's expired lease unreaped and its ending unsettled until a record of the queue arrived. It
now loads the cache again from the durable registry first (``RedisConnection.warm_registry``),
and the operator's listing reads the durable registry too.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.crc import key_slot

from sluice.backends.dynamodb.queues import DynamoQueueDirectory
from sluice.backends.redis.connection import RedisConnection
from sluice.backends.redis.keys import QUEUES_KEY, REGISTRY_LOADED_KEY, QueueKeys
from sluice.backends.redis.queue import RedisJobQueue
from sluice.backends.redis.relay_engine import RedisRelayEngine
from sluice.core.bus import EventBus
from sluice.core.limits import Limits
from sluice.core.models import JobSpec
from sluice.gateway.admin import Admin
from sluice.gateway.registry import Reservations
from sluice.relay import Relay
from sluice.relay.config import RelayConfig
from sluice_dev.fakes import FakeClock, FakeLog, FakeSource, FakeStore
from sluice_dev.local.cluster import Cluster
from tests.backends.conftest import queue_on

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


@pytest.fixture
def conn(redis_cluster_url: str, directory: DynamoQueueDirectory) -> Iterator[RedisConnection]:
    """One process's connection to the cluster, loading a lost registry cache from ``directory``
    (what ``sluice.entry.root.durable_registry`` wires)."""
    c = RedisConnection.from_url(redis_cluster_url, Limits(max_queues=100))
    c.registry_source = directory.names
    yield c
    c.close()


def registry_shard(cluster: Cluster) -> int:
    slot = key_slot(QUEUES_KEY.encode())
    return next(i for i, (first, last) in enumerate(cluster.ranges) if first <= slot <= last)


def flush(cluster: Cluster, shard: int) -> None:
    with redis.Redis(port=cluster.nodes[shard].port) as node:
        node.flushall()


def stranded_queue(cluster: Cluster, conn: RedisConnection,
                   directory: DynamoQueueDirectory) -> tuple[str, str]:
    """A queue on a shard other than the registry's, reserved as a gateway does (Redis's cache, then
    the durable registry), holding one job on its last attempt whose lease lapsed; then the registry's
    shard is flushed. (queue, job id)."""
    shard = (registry_shard(cluster) + 1) % len(cluster.nodes)
    queue = queue_on(cluster, shard, "kept")
    Reservations(conn, directory).reserve(queue)
    jobs = RedisJobQueue(conn)
    jobs.enqueue(JobSpec(job_id="j1", queue=queue, payload={}, max_attempts=1, lease_ms=60_000))
    [leased] = jobs.lease(queue, 1, 60_000, "w")
    assert leased.job_id == "j1"
    conn.client.zadd(QueueKeys(queue).leased, {"j1": 1}, xx=True)  # its worker died: the lease lapsed
    flush(cluster, registry_shard(cluster))
    assert conn.client.smembers(QUEUES_KEY) == set()  # the cache is gone, the queue's keys are not
    assert conn.client.zscore(QueueKeys(queue).leased, "j1") == 1
    return queue, "j1"


def test_maintenance_still_reaps_and_settles_a_queue_on_a_surviving_shard(
        redis_cluster: Cluster, conn: RedisConnection, directory: DynamoQueueDirectory) -> None:
    queue, job_id = stranded_queue(redis_cluster, conn, directory)
    engine, store = RedisRelayEngine(conn), FakeStore()
    relay = Relay(engine, store, FakeSource(topic="t", n_partitions=1), None, relay_id="r1",  # type: ignore[arg-type]
                  clock=FakeClock(), config=RelayConfig(commit_s=0.0), events=EventBus())
    try:
        relay.maintenance.run(0.0)
    finally:
        relay.stop()
    k = QueueKeys(queue)
    assert conn.client.zscore(k.dead, job_id) is not None  # reaped: its last attempt lapsed
    assert conn.client.zscore(k.leased, job_id) is None
    assert [(e.job_id, e.status.value) for e in store.settled] == [(job_id, "dead")]  # settled
    assert conn.client.zcard(k.settle) == 0
    assert queue in conn.client.smembers(QUEUES_KEY)  # the cache was loaded again
    assert conn.client.get(REGISTRY_LOADED_KEY) == "1"


def test_the_operator_still_lists_a_queue_on_a_surviving_shard(
        redis_cluster: Cluster, conn: RedisConnection, directory: DynamoQueueDirectory) -> None:
    queue, _ = stranded_queue(redis_cluster, conn, directory)
    jobs = RedisJobQueue(conn)
    admin = Admin(jobs, FakeStore(), FakeLog(), registry=Reservations(conn, directory))  # type: ignore[arg-type]
    rows: list[dict[str, Any]] = admin.all_queues()
    [row] = [r for r in rows if r["queue"] == queue]
    assert (row["leased"], row["overdue_leases"]) == (1, 1)  # its stats come from the shard that kept them


def test_a_warm_cache_costs_one_get_and_no_scan(conn: RedisConnection) -> None:
    calls: list[int] = []
    conn.registry_source = lambda: calls.append(1) or []  # type: ignore[func-returns-value]
    assert conn.warm_registry() is True  # a fresh cluster: never loaded
    assert conn.warm_registry() is False and calls == [1]
    conn.registry_source = None  # no durable registry: nothing to load from
    conn.client.delete(REGISTRY_LOADED_KEY)
    assert conn.warm_registry() is False and conn.client.get(REGISTRY_LOADED_KEY) is None
