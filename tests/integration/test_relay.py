"""The relay on a real Tansu broker and a real redis-server: volume, poison, rate, watermarks."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from sluice.redis.keys import QueueKeys
from tests.integration.relay_proc import (
    build,
    committed,
    create_topic,
    job_records,
    produce,
    ready_ids,
    relayed_offsets,
)

pytestmark = pytest.mark.integration
PARTITIONS = 4


@pytest.fixture
def topic(tansu: Any, unique: str) -> str:
    name = f"jobs-{unique}"
    create_topic(tansu.extra["bootstrap"], name, PARTITIONS)
    return name


def step_until(relay: Any, done: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "relay did not get there in time"
        relay.step()


@pytest.mark.timeout(60)
def test_ten_thousand_jobs_each_in_redis_exactly_once(tansu: Any, topic: str, redis_url: str,
                                                      redis_client: Any, unique: str) -> None:
    bs = tansu.extra["bootstrap"]
    records = job_records("j", 10_000)
    ends = produce(bs, topic, records)
    relay, source = build(redis_url, bs, topic, f"g-{unique}")
    try:
        step_until(relay, lambda: redis_client.zcard(QueueKeys("q").ready) >= 10_000, 40)
        relay.step()
    finally:
        relay.stop()
        source.close()
    ids = ready_ids(redis_client)
    assert len(ids) == 10_000 and set(ids) == {key.decode() for key, _, _ in records}
    assert relay.report.pushed == 10_000 and relay.report.skipped == 0
    assert sum(ends.values()) == 10_000
    assert committed(bs, topic, f"g-{unique}", PARTITIONS) == ends
    assert relayed_offsets(redis_client, topic, PARTITIONS) == {p: e - 1 for p, e in ends.items()}
