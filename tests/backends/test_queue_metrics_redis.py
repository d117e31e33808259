"""Per-queue metrics on a real Redis (issue 17): the relay's stats read (``stats.lua``) through
``QueueStates`` and ``QueueDepthMetrics`` gives the EMF line the age alarm reads."""

from __future__ import annotations

import json

import redis

from sluice.backends.aws.queue_metrics import QueueBound, QueueDepthMetrics
from sluice.backends.redis.engine import RedisQueue
from sluice.core import bus as ev
from sluice.relay.config import RelayConfig
from sluice.relay.queues import QueueStates
from tests.backends.test_engine_support import redis_now_ms, spec


def test_the_relays_read_of_a_real_queue_becomes_its_metrics_line(rq: RedisQueue,
                                                                  redis_client: redis.Redis) -> None:
    now = redis_now_ms(redis_client)
    rq.enqueue_many([spec("old", priority=0, enqueued_at_ms=now - 120_000),
                     spec("new", priority=9, enqueued_at_ms=now - 1_000),
                     spec("later", run_at_ms=now + 3_600_000, enqueued_at_ms=now),
                     spec("running", enqueued_at_ms=now)])
    rq.lease("q", 1, 30_000)  # the highest priority first: "new" or "running" goes in flight
    lines: list[str] = []
    bus = ev.EventBus()
    bus.subscribe(QueueDepthMetrics(QueueBound(cap=50), lines.append), ev.QueueMeasured)
    states = QueueStates(rq, RelayConfig(), events=bus)
    states.get("q", now=0.0)
    states.get("empty", now=0.0)
    by_queue = {b["Queue"]: b for b in map(json.loads, lines)}
    q = by_queue["q"]
    assert (q["QueueReady"], q["QueueDelayed"], q["QueueInFlight"], q["QueueDead"]) == (2, 1, 1, 0)
    assert 120 <= q["QueueOldestReadyAge"] < 130  # seconds, Redis's clock
    assert by_queue["empty"]["QueueOldestReadyAge"] == 0 and by_queue["empty"]["QueueReady"] == 0
