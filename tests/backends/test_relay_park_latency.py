"""A held queue's flood waits for a slow parking lot, and the other queues do not wait with it
(issue 28): the relay on a real Redis with the parking lot on a real (moto) DynamoDB whose every park
call takes ``PARK_S`` longer, as a loaded moto or a throttled table does. Only the Kafka source (in
memory) and the job store (``NullStore``) stand in.

Queue A is paused and floods one partition with ``FLOOD`` records ahead of B's. With one park call
in flight per lane, whose records counted in the partition's buffer, the buffer filled behind each
call, the fetching paused, and B's records waited behind the flood in Kafka for one park round trip
after another (about ``FLOOD`` / ``max_pending`` of them: 15 here). With up to
``park_calls`` calls in flight, out of the buffer's count, B waits a few."""

from __future__ import annotations

import time
from typing import Any

import boto3
import pytest
import redis

from sluice.backends.dynamodb.parking import DynamoParkingLot
from sluice.backends.dynamodb.tables import create_parked_table
from sluice.backends.redis.engine import RedisQueue
from sluice.backends.redis.keys import QueueKeys
from sluice.core.bus import EventBus
from sluice.core.models import JobSpec
from sluice.relay import Relay, RelayConfig
from sluice_dev.fakes import FakeSource
from tests.backends.relay_proc import NullStore

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]
PARK_S = 0.4  # added to every park call
FLOOD = 1_500


class SlowLot(DynamoParkingLot):
    def park(self, *args: Any, **kwargs: Any) -> None:
        time.sleep(PARK_S)
        super().park(*args, **kwargs)


def test_a_flood_waiting_for_a_slow_parking_lot_holds_back_another_queue_a_few_park_calls_at_most(
        redis_url: str, redis_client: redis.Redis, moto_url: str, unique: str) -> None:
    client = boto3.client("dynamodb", endpoint_url=moto_url, region_name="us-east-1")
    create_parked_table(client, f"parked-{unique}")
    lot = SlowLot(client, f"parked-{unique}")
    engine = RedisQueue.from_url(redis_url)
    engine.set_config("a", paused=True)
    source = FakeSource(topic="sluice.jobs", n_partitions=1)
    for i in range(FLOOD):
        source.append_spec(0, JobSpec(job_id=f"a-{i:05d}", queue="a", payload={"n": i}))
    b_ids = [f"b-{i}" for i in range(3)]
    for job_id in b_ids:
        source.append_spec(0, JobSpec(job_id=job_id, queue="b", payload={"n": 1}))
    relay = Relay(engine, NullStore(), source, None, relay_id="r1", parking=lot, events=EventBus(),  # type: ignore[arg-type]
                  config=RelayConfig(poll_ms=10, commit_s=0, batch=50, max_pending=100, refresh_s=0.05))
    b = QueueKeys("b")
    try:
        started = time.monotonic()
        while time.monotonic() - started < 30 and redis_client.zcard(b.ready) < len(b_ids):
            relay.step()
        waited = time.monotonic() - started
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and relay.report.parked < FLOOD:
            relay.step()
    finally:
        relay.stop()
        engine.close()
    assert sorted(redis_client.zrange(b.ready, 0, -1)) == b_ids
    # One call at a time: 15 park round trips and more (6.7 s at load 15); now about 4 (1.65 s), whatever
    # the machine adds (moto's own writes, the steps) on top of the lot's PARK_S
    assert waited < 7 * PARK_S, f"B waited {waited:.1f} s behind A's flood ({waited / PARK_S:.1f} park calls)"
    print(f"B waited {waited:.2f} s; A's flood parked in {relay.report.parked} records")
    assert relay.report.parked == FLOOD and lot.count("a") == FLOOD
    assert redis_client.zcard(QueueKeys("a").ready) == 0
    assert source.committed_offsets[0] == FLOOD + len(b_ids)
