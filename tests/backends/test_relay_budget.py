"""Issue 28's hostile case, scaled down: one caller floods a queue with large delayed jobs (the
issue's ~3,000 x 256 KB, some 80 requests, filled Redis to the 80% memory guard, which then held
every queue). With byte budgets the flooded queue stops at its budget and is held, its records
wait outside Redis, and another queue keeps flowing. The relay runs for real on a real Redis;
only its Kafka source (in memory) and its job store (``NullStore``) stand in."""

from __future__ import annotations

import time

import pytest
import redis

from sluice.backends.redis.engine import RedisQueue
from sluice.backends.redis.keys import QueueKeys
from sluice.core import bus as ev
from sluice.core.limits import Limits, job_bytes
from sluice.core.models import JobSpec
from sluice.relay import Relay, RelayConfig
from sluice_dev.fakes import FakeSource
from tests.backends.relay_proc import NullStore

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]
TOPIC = "sluice.jobs"
PAYLOAD = 2_048  # the 256 KB, scaled down 128x, as the budget is
FLOOD = 300  # delayed jobs on one queue: 10x what its budget holds
PER_QUEUE = 30  # jobs its budget holds


def test_a_queue_flooded_with_large_delayed_jobs_stops_at_its_budget_and_another_keeps_flowing(
        redis_url: str, redis_client: redis.Redis) -> None:
    flood, calm = QueueKeys("flood"), QueueKeys("calm")
    size = job_bytes("f-000", '"' + "x" * PAYLOAD + '"', "0,5,30000,1700000000000", len(flood.job_prefix))
    budget = PER_QUEUE * size
    limits = Limits(queue_budget=budget, push_memory_percent=80)  # one Settings feeds both in a deploy
    engine = RedisQueue.from_url(redis_url, limits)
    source = FakeSource(topic=TOPIC, n_partitions=1)
    week = int(time.time() * 1000) + 6 * 24 * 3_600_000
    for i in range(FLOOD):  # the flood first: every record of the calm queue is behind it
        source.append_spec(0, JobSpec(job_id=f"f-{i:03d}", queue="flood", payload="x" * PAYLOAD,
                                      run_at_ms=week, enqueued_at_ms=1_700_000_000_000))
    calm_ids = [f"c-{i}" for i in range(20)]
    for job_id in calm_ids:
        source.append_spec(0, JobSpec(job_id=job_id, queue="calm", payload={"n": 1}))
    held: list[ev.QueueHeld] = []
    bus = ev.EventBus()
    bus.subscribe(held.append, ev.QueueHeld)
    relay = Relay(engine, NullStore(), source, None, relay_id="r1", events=bus,  # type: ignore[arg-type]
                  config=RelayConfig(poll_ms=10, commit_s=0, batch=100, refresh_s=0.05, limits=limits))
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and redis_client.zcard(calm.ready) < len(calm_ids):
            relay.step()
        for _ in range(20):  # and a while longer: the flood stays where its budget put it
            relay.step()
        left = [job.job_id for _, job in relay.ownership.owned[0].pending["flood"]]
    finally:
        relay.stop()
        engine.close()
    assert sorted(redis_client.zrange(calm.ready, 0, -1)) == sorted(calm_ids)  # the calm queue flowed
    in_redis = redis_client.zcard(flood.delayed)
    assert in_redis == PER_QUEUE  # only what its budget holds, not 300
    assert int(redis_client.get(flood.used) or 0) <= budget
    assert relay.queues.states["flood"].budget_full and not relay.queues.states["calm"].blocked
    assert [(e.queue, e.gate, e.held) for e in held] == [("flood", "budget", True)]
    # the counted size is an honest estimate of what the job takes in Redis (hash and zset entry)
    actual = sum(int(redis_client.memory_usage(flood.job(f"f-{i:03d}")) or 0) for i in range(in_redis))
    zset = int(redis_client.memory_usage(flood.delayed) or 0)
    assert actual + zset <= int(redis_client.get(flood.used) or 0) * 1.25, (actual, zset, budget)
    # the rest waits outside Redis, in order (the parking lot's part: item 1), none lost
    assert left == [f"f-{i:03d}" for i in range(PER_QUEUE, FLOOD)]
