"""Redis loses its data under a running relay: the jobs Kafka holds come back, final ones do not.

Real Tansu, a real redis-server of the test's own (restarted with its data lost), the
moto server for the jobs table and the checkpoints, and the real ``Relay`` with
recovery as its hooks (``sluice.entry.relay.for_relay``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from sluice.backends.dynamodb import tables
from sluice.backends.dynamodb.jobs import DynamoJobStore
from sluice.backends.kafka.source import KafkaSource
from sluice.backends.redis.engine import RedisQueue
from sluice.backends.redis.keys import QueueKeys
from sluice.core.bus import EventBus
from sluice.core.config import Settings
from sluice.entry.relay import for_relay
from sluice.relay import Relay, RelayConfig
from sluice_dev.local import servers
from tests.backends.relay_proc import create_topic, job_records, produce

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
PARTITIONS = 2
Q = QueueKeys("q")


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[servers.Server]:
    server = servers.start_redis(workdir=tmp_path / "redis")
    yield server
    server.stop()


@pytest.fixture
def settings(own_redis: servers.Server, tansu: Any, moto_url: str) -> Settings:
    u = uuid.uuid4().hex[:8]
    s = Settings(redis_url=own_redis.extra["url"], kafka_bootstrap=tansu.extra["bootstrap"],
                 kafka_topic=f"jobs-{u}", kafka_dead_letter_topic=f"jobs-{u}.dlq",
                 kafka_consumer_group=f"g-{u}", aws_endpoint_url=moto_url, jobs_table=f"jobs-{u}",
                 idempotency_table=f"idem-{u}", results_bucket=f"results-{u}")
    tables.ensure_all(s)
    create_topic(s.kafka_bootstrap, s.kafka_topic, PARTITIONS)
    return s


class Pipeline:
    """A relay (with recovery) stepped in this thread, and the stores it talks to."""

    def __init__(self, s: Settings, relay_id: str = "r1") -> None:
        self.s = s
        self.engine = RedisQueue.from_settings(s)
        self.store = DynamoJobStore.from_settings(s)
        self.source = KafkaSource.from_settings(s)
        self.recovery = for_relay(s, self.engine, self.store, self.source, interval_s=0.2, events=EventBus())
        self.relay = Relay(self.engine, self.store, self.source, None, relay_id=relay_id, hooks=self.recovery,
                           config=RelayConfig(poll_ms=50, ownership_s=0.2, lease_ms=1500), events=EventBus())

    def step_until(self, done: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            try:
                self.relay.step()
            except Exception:  # Redis restarting: the relay's run loop would retry too
                time.sleep(0.05)

    def close(self) -> None:
        self.relay.stop()
        self.source.close()


def in_redis(client: Any) -> set[str]:
    return {str(x) for x in client.zrange(Q.ready, 0, -1)} | {str(x) for x in client.zrange(Q.leased, 0, -1)}


def finish(s: Settings, store: DynamoJobStore, engine: RedisQueue, n: int) -> set[str]:
    """Lease ``n`` jobs and complete them as a worker would: grant, fenced write, ack."""
    done = set()
    for job in engine.lease("q", n, 60_000, "w"):
        token = store.grant(job.job_id, "q", "w")
        store.write_result(job.job_id, token, {"ok": True})
        engine.ack("q", job.job_id, job.lease_token)
        done.add(job.job_id)
    return done


def test_jobs_lost_with_redis_are_replayed_and_final_ones_are_not(settings: Settings,
                                                                   own_redis: servers.Server) -> None:
    s = settings
    first = job_records("a", 150)
    produce(s.kafka_bootstrap, s.kafka_topic, first)
    p = Pipeline(s)
    client = redis.Redis.from_url(s.redis_url, decode_responses=True)
    try:
        p.step_until(lambda: len(in_redis(client)) == 150, 30, "the first 150 jobs in Redis")
        done = finish(s, p.store, p.engine, 50)
        assert len(done) == 50
        # a checkpoint after the bounded scan has seen the 50 final jobs
        time.sleep(0.3)
        p.step_until(lambda: p.recovery.sessions and all(
            x.high is not None for x in p.recovery.sessions.values()), 10, "commits")
        time.sleep(0.25)
        p.relay.step()
        p.recovery.checkpoint(force=True)

        own_redis.kill()  # the data is gone: no persistence
        restarted = servers.start_redis(own_redis.port, workdir=Path(own_redis.proc.args[-1]).parent)
        own_redis.proc = restarted.proc
        assert in_redis(client) == set()

        later = job_records("b", 30)
        produce(s.kafka_bootstrap, s.kafka_topic, later)
        expected = ({k.decode() for k, _, _ in first} - done) | {k.decode() for k, _, _ in later}
        p.step_until(lambda: in_redis(client) >= expected, 40, "the lost jobs to come back")
        for _ in range(10):
            p.relay.step()
        back = in_redis(client)
    finally:
        p.close()
        client.close()
    assert back == expected, f"{len(back & done)} final jobs came back; {len(expected - back)} missing"
    assert p.recovery.replays == PARTITIONS
