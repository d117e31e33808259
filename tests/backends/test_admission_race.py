"""Issue 28, items 2 and 3: a 202 is binding, and the registry survives Redis.

On a real redis-server and the moto server (DynamoDB's queues table): two gateway containers
(separate pipelines, caches and Redis clients) race in threads for the registry's last slot; a
Redis loss empties the registry's cache, which is loaded again from DynamoDB; a caller flooding
new queue names is refused at the gateway. Records reach Redis through a real relay (its intake,
planner and push over ``RedisRelayEngine``) fed from the log the gateways wrote.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from sluice.backends.dynamodb.queues import DynamoQueueDirectory
from sluice.backends.redis.connection import RedisConnection
from sluice.backends.redis.keys import QUEUES_KEY, REGISTRY_LOADED_KEY, QueueKeys
from sluice.backends.redis.queue import RedisJobQueue
from sluice.backends.redis.relay_engine import RedisRelayEngine
from sluice.core import ids
from sluice.core.bus import EventBus
from sluice.core.errors import SluiceError
from sluice.core.limits import Limits
from sluice.core.models import JobSpec
from sluice.core.wire import EnqueueRequest
from sluice.entry.gateway import Gateway
from sluice.gateway.api import Api, Backends, IdMinting, Intake
from sluice.gateway.http.problems import kind_of
from sluice.gateway.registry import Reservations
from sluice.relay import Relay
from sluice.relay.config import RelayConfig
from sluice.relay.ownership import partition_job
from sluice_dev.fakes import FakeClock, FakeDispatcher, FakeKeyStore, FakeLog, FakeSource, FakeStore
from tests.unit.test_gateway_fakes import LambdaContext, event_for, unpack

pytestmark = pytest.mark.integration
KEY = b"admission-race-test-key-0123456789"
TOPIC = "sluice.jobs"


class Container:
    """One gateway container: its own Redis client, its own cache of reserved queues."""

    def __init__(self, redis_url: str, directory: DynamoQueueDirectory | None, clock: FakeClock,
                 log: FakeLog, max_queues: int) -> None:
        self.conn = RedisConnection.from_url(redis_url, Limits(max_queues=max_queues))
        if directory is not None:
            self.conn.registry_source = directory.names
        self.queue = RedisJobQueue(self.conn)
        self.reservations = Reservations(self.queue, directory)
        api = Api(Backends(log, FakeStore(), self.queue, events=EventBus()), IdMinting(KEY),  # type: ignore[arg-type]
                  intake=Intake(registry=self.reservations), idempotency=FakeKeyStore(),
                  clock=clock.now_ms)
        self.api, self.gateway = api, Gateway(api)

    def enqueue(self, queue: str, payload: Any) -> tuple[int, Any]:
        """The pipeline's answer, as the handler would turn it into a status and a problem document
        (called from threads: the gateway's router keeps its request per instance, as one Lambda
        container serves one request at a time, so the race runs below the HTTP layer)."""
        try:
            accepted = self.api.enqueue(queue, EnqueueRequest(payload=payload))
        except SluiceError as exc:
            return kind_of(exc).status, {"code": exc.code, "detail": str(exc)}
        return 202, accepted.body.model_dump(mode="json")

    def post(self, queue: str, payload: Any = 1) -> tuple[int, Any]:
        code, _headers, doc = unpack(self.gateway(event_for("POST", f"/v1/queues/{queue}/jobs",
                                                            {"payload": payload}), LambdaContext()))
        return code, doc

    def close(self) -> None:
        self.conn.close()


@pytest.fixture
def world(redis_url: str) -> Iterator[dict[str, Any]]:
    made: list[Container] = []
    clock, log = FakeClock(), FakeLog()

    def container(directory: DynamoQueueDirectory | None, max_queues: int = 1) -> Container:
        c = Container(redis_url, directory, clock, log, max_queues)
        made.append(c)
        return c

    engine = RedisRelayEngine(RedisConnection.from_url(redis_url, Limits(max_queues=1)))
    # The relay's own queue is registered first, as a running deployment has it: reserved, it
    # takes no slot of the limit (before issue 28, a limit of 1 left no room at all).
    engine.enqueue_internal(partition_job(TOPIC, 0, 30_000))
    yield {"clock": clock, "log": log, "container": container, "engine": engine, "url": redis_url}
    for c in made:
        c.close()
    engine.close()


def relay_records(w: dict[str, Any], records: list[JobSpec], limit: int = 1) -> RedisRelayEngine:
    """Feed ``records`` (the log's, in order) through a real relay whose limit is ``limit``."""
    engine = RedisRelayEngine(RedisConnection.from_url(w["url"], Limits(max_queues=limit)))
    source = FakeSource(topic=TOPIC, n_partitions=1, clock=w["clock"])
    for spec in records:
        source.append_spec(0, spec)
    store = FakeStore()
    relay = Relay(engine, store, source, FakeDispatcher(), relay_id="r1", clock=w["clock"],  # type: ignore[arg-type]
                  job_ids=ids.Verifier(KEY), events=EventBus(), config=RelayConfig(poll_ms=10, commit_s=0))
    for _ in range(6):
        relay.step()
    relay.stop()
    w["relay_store"], w["dead_lettered"] = store, list(source.dead)
    return engine


def in_redis(client: redis.Redis, queue: str) -> list[str]:
    k = QueueKeys(queue)
    return sorted(client.zrange(k.ready, 0, -1) + client.zrange(k.delayed, 0, -1))


def test_two_gateways_race_for_the_last_slot_one_202_one_refusal_and_the_202_job_runs(
        world: dict[str, Any], directory: DynamoQueueDirectory, redis_client: redis.Redis) -> None:
    """Room for one queue; two containers, each accepting the first job of a different new queue at
    once (a barrier, then both in flight): exactly one 202, one 403 QUEUE_NOT_ALLOWED with nothing
    written to Kafka, and the 202 job reaches Redis through the relay and is leased. Before issue 28
    both answered 202 (each read room in its own view) and the relay ended one job dead."""
    one, two = world["container"](directory), world["container"](directory)
    barrier = threading.Barrier(2)
    answers: dict[str, tuple[int, Any]] = {}

    def first_job(c: Container, queue: str) -> None:
        c.queue.registry(queue)  # each container's view and connection warm, as a running gateway's
        barrier.wait(timeout=5)
        answers[queue] = c.enqueue(queue, {"first": queue})

    threads = [threading.Thread(target=first_job, args=(c, q)) for c, q in ((one, "alpha"), (two, "beta"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    codes = sorted(code for code, _ in answers.values())
    assert codes == [202, 403], answers
    (winner,) = [q for q, (code, _) in answers.items() if code == 202]
    (loser,) = [q for q, (code, _) in answers.items() if code == 403]
    refusal = answers[loser][1]
    assert refusal["code"] == "QUEUE_NOT_ALLOWED" and "registry full" in refusal["detail"]
    log: FakeLog = world["log"]
    assert [r.queue for r in log.records] == [winner]  # the refused job cost no Kafka write
    assert directory.names() == [winner]  # written through before the 202
    assert redis_client.smembers(QUEUES_KEY) == {winner, "sluice-relay"}

    engine = relay_records(world, list(log.records))
    try:
        assert in_redis(redis_client, winner) == [log.records[0].job_id]
        assert world["dead_lettered"] == []
        (leased,) = RedisJobQueue(engine.conn).lease(winner, 1, 30_000, "w1")  # it runs
        assert leased.job_id == log.records[0].job_id and leased.payload == {"first": winner}
    finally:
        engine.close()


def test_after_a_redis_loss_the_cache_is_loaded_from_dynamodb_and_every_202_job_is_pushed(
        world: dict[str, Any], directory: DynamoQueueDirectory, redis_client: redis.Redis) -> None:
    """Two queues accepted while the limit was 2; the operator lowers it to 1; Redis loses its data.
    The relay pushes both minted records (admitted: their gateways reserved them), though the limit
    would now refuse the second; the first gateway to decide the limit after the loss loads the
    cache from DynamoDB, so a third queue is refused rather than let past the limit on an empty set."""
    before = world["container"](directory, max_queues=2)
    assert before.post("alpha")[0] == 202 and before.post("beta")[0] == 202
    log: FakeLog = world["log"]
    records = list(log.records)
    assert directory.names() == ["alpha", "beta"]

    redis_client.flushall()  # the Redis loss: the registry's cache, its mark and every queue gone
    engine = relay_records(world, records, limit=1)  # the relay now runs with the lowered limit
    try:
        assert in_redis(redis_client, "alpha") == [records[0].job_id]
        assert in_redis(redis_client, "beta") == [records[1].job_id]  # over the new limit, still pushed
        assert world["dead_lettered"] == []
        assert not any(item.get("status") == "dead" for item in world["relay_store"].items.values())
    finally:
        engine.close()
    assert redis_client.get(REGISTRY_LOADED_KEY) is None  # the relay's pushes decided no limit

    after = world["container"](directory, max_queues=1)  # a new container: knows no queue
    code, doc = after.post("gamma")
    assert (code, doc["code"]) == (403, "QUEUE_NOT_ALLOWED")
    assert redis_client.get(REGISTRY_LOADED_KEY) == "1"  # loaded from DynamoDB to decide
    assert redis_client.smembers(QUEUES_KEY) == {"alpha", "beta", "sluice-relay"}
    assert after.post("alpha")[0] == 202  # a registered queue is never refused
    assert len(log.records) == 3


def test_a_caller_flooding_new_queue_names_is_refused_at_the_gateway_and_costs_no_kafka_write(
        world: dict[str, Any], directory: DynamoQueueDirectory, redis_client: redis.Redis) -> None:
    """Hostile: 200 random new names against a registry with room for one. One is accepted; every
    other is a 403 that wrote nothing to Kafka, DynamoDB or the registry's cache."""
    gateway = world["container"](directory)
    answers = [gateway.post(f"flood-{i}")[0] for i in range(200)]
    assert answers.count(202) == 1 and answers.count(403) == 199
    log: FakeLog = world["log"]
    assert len(log.records) == 1 and directory.names() == ["flood-0"]
    assert redis_client.scard(QUEUES_KEY) == 2  # flood-0 and sluice-relay
    assert gateway.post("flood-0")[0] == 202  # the accepted one keeps flowing


def test_a_failed_write_through_is_a_retryable_503_and_its_reservation_harmless(
        world: dict[str, Any], directory: DynamoQueueDirectory, redis_client: redis.Redis) -> None:
    """DynamoDB refuses the write-through: 503 with nothing appended; the retry finds the Redis
    reservation (idempotent), writes through and is accepted."""
    gateway = world["container"](directory)
    real_put = directory.put
    failing = {"n": 1}

    def put(queue: str) -> None:
        if failing["n"]:
            failing["n"] -= 1
            from sluice.core.errors import StoreError
            raise StoreError("update_item queues: ResourceNotFoundException")
        real_put(queue)

    directory.put = put  # type: ignore[method-assign]
    code, doc = gateway.post("delta")
    assert (code, doc["code"]) == (503, "UNAVAILABLE")
    assert world["log"].records == [] and redis_client.sismember(QUEUES_KEY, "delta")
    assert gateway.post("delta")[0] == 202
    assert directory.names() == ["delta"] and len(world["log"].records) == 1
