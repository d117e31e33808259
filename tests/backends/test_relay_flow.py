"""Rate and backpressure on the real engine and broker: the shared bucket, watermarks, runtime changes."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sluice.backends.redis.engine import RedisQueue
from sluice.backends.redis.keys import QueueKeys
from sluice.core import knobs as control
from tests.backends.relay_proc import build, create_topic, job_records, produce

pytestmark = pytest.mark.integration
READY = QueueKeys("q").ready


class Running:
    """An in-process relay stepping on a thread until the test ends."""

    def __init__(self, relay: Any, source: Any) -> None:
        self.relay, self.source = relay, source
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.relay.step()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.relay.stop()
        self.source.close()


@pytest.fixture
def setup(tansu: Any, redis_url: str, unique: str) -> Iterator[tuple[str, str, RedisQueue]]:
    topic = f"jobs-{unique}"
    create_topic(tansu.extra["bootstrap"], topic, 4)
    engine = RedisQueue.from_url(redis_url)
    yield tansu.extra["bootstrap"], topic, engine
    engine.close()


def wait_for(condition: Any, timeout: float, what: str) -> float:
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < timeout, f"timed out waiting for {what}"
        time.sleep(0.02)
    return time.monotonic() - start


def rate_over(redis_client: Any, seconds: float) -> float:
    n0, t0 = redis_client.zcard(READY), time.monotonic()
    time.sleep(seconds)
    return float(redis_client.zcard(READY) - n0) / (time.monotonic() - t0)


@pytest.mark.timeout(60)
def test_rate_limit_holds_within_ten_percent_and_a_runtime_change_applies_within_5_s(
        setup: tuple[str, str, RedisQueue], redis_url: str, redis_client: Any, unique: str) -> None:
    bs, topic, engine = setup
    produce(bs, topic, job_records("r", 4000))
    control.set_rate(engine, "q", 200, burst=40)
    running = Running(*build(redis_url, bs, topic, f"g-{unique}"))
    try:
        wait_for(lambda: redis_client.zcard(READY) > 0, 15, "the first push")
        time.sleep(0.5)  # past the initial burst
        rate = rate_over(redis_client, 10)
        assert 180 <= rate <= 220, f"{rate:.1f} jobs/s is not 200 +- 10%"
        control.set_rate(engine, "q", 1000, burst=100)  # an operator raises it at runtime
        changed = time.monotonic()
        wait_for(lambda: rate_over(redis_client, 0.5) > 600, 5, "the new rate to apply")
        assert time.monotonic() - changed <= 5
    finally:
        running.stop()


def drain(engine: RedisQueue, n: int) -> None:
    while n > 0:
        jobs = engine.lease("q", min(n, 500), 60_000, "drainer")
        assert jobs, "nothing to drain"
        engine.ack_many("q", [(j.job_id, j.lease_token) for j in jobs])
        n -= len(jobs)


@pytest.mark.timeout(60)
def test_high_watermark_pauses_pushing_and_low_watermark_resumes_it(
        setup: tuple[str, str, RedisQueue], redis_url: str, redis_client: Any, unique: str) -> None:
    bs, topic, engine = setup
    produce(bs, topic, job_records("w", 3000))
    control.set_watermarks(engine, "q", high=500, low=200)
    running = Running(*build(redis_url, bs, topic, f"g-{unique}", refresh_s=0.1))
    try:
        wait_for(lambda: redis_client.zcard(READY) >= 500, 15, "the high watermark")
        time.sleep(1.0)
        assert 500 <= redis_client.zcard(READY) <= 501, "pushed on past the high watermark"
        drain(engine, redis_client.zcard(READY) - 250)  # workers catch up, but not below low
        time.sleep(1.0)
        assert redis_client.zcard(READY) == 250, "resumed above the low watermark (no hysteresis)"
        drain(engine, 100)  # now below low: pushing resumes up to the high mark again
        wait_for(lambda: redis_client.zcard(READY) >= 500, 5, "pushing to resume")
        time.sleep(0.5)
        assert redis_client.zcard(READY) <= 501
        control.set_watermarks(engine, "q", high=0)  # turned off at runtime: the rest flows
        wait_for(lambda: redis_client.zcard(READY) >= 3000 - 750, 5, "the backlog after the change")
    finally:
        running.stop()


@pytest.mark.timeout(60)
def test_manual_pause_holds_the_backlog_in_kafka_and_resume_releases_it(
        setup: tuple[str, str, RedisQueue], redis_url: str, redis_client: Any, unique: str) -> None:
    bs, topic, engine = setup
    control.pause(engine, "q")
    produce(bs, topic, job_records("p", 2000))
    # a small buffer, so the held-up partitions stop fetching and must start again on resume
    running = Running(*build(redis_url, bs, topic, f"g-{unique}", max_pending=100))
    try:
        time.sleep(1.5)
        assert redis_client.zcard(READY) == 0
        owned = running.relay.ownership.owned.values()
        assert all(o.fetch_paused for o in owned)
        assert all(o.pending_count < 1000 for o in owned)  # Kafka holds the rest
        control.resume(engine, "q")
        wait_for(lambda: redis_client.zcard(READY) == 2000, 5, "the resumed queue")
    finally:
        running.stop()
