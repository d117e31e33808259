"""push.lua and a paused queue, on a real Redis, by the key state it leaves: a batch with fresh
jobs for a queue whose config says paused takes nothing. The relay reads a queue's config every
``refresh_s`` (0.5 s); before this, jobs enqueued just after an operator's pause were pushed on
the config of before it, and ran (tests/stack/test_parking_stack.py saw 3 run)."""

from __future__ import annotations

import pytest
import redis

from sluice.backends.redis.engine import RedisQueue
from sluice.backends.redis.keys import QueueKeys
from tests.backends.test_engine_support import snapshot
from tests.backends.test_lua_budget import TOPIC, rec

pytestmark = pytest.mark.integration
K = QueueKeys("q")


def test_a_paused_queue_takes_nothing_and_nothing_is_written(rq: RedisQueue,
        redis_client: redis.Redis) -> None:
    rq.push_many(TOPIC, [("q", 0, 1, [rec(0)])])
    rq.set_config("q", paused=True)
    before = snapshot(redis_client)
    result = rq.push_many(TOPIC, [("q", 0, 1, [rec(1), rec(2)])])[0]
    assert not isinstance(result, Exception)
    assert (result.pushed, result.skipped, result.left, result.offset, result.paused) == (0, 0, 2, 0, True)
    assert snapshot(redis_client) == before  # no job, no offset, no wake token
    rq.set_config("q", paused=False)
    again = rq.push_many(TOPIC, [("q", 0, 1, [rec(1), rec(2)])])[0]
    assert not isinstance(again, Exception)
    assert (again.pushed, again.left, again.offset, again.paused) == (2, 0, 2, False)
    assert redis_client.zcard(K.ready) == 3


def test_records_redis_holds_are_still_skipped_while_paused(rq: RedisQueue,
        redis_client: redis.Redis) -> None:
    """Nothing fresh: nothing to hold back, and the stored offset still moves past them (a replay
    of records already pushed, read again after a restart)."""
    rq.push_many(TOPIC, [("q", 0, 1, [rec(0), rec(1)])])
    redis_client.hset(K.relayed(TOPIC, 0), "offset", -1)
    rq.set_config("q", paused=True)
    result = rq.push_many(TOPIC, [("q", 0, 1, [rec(0), rec(1)])])[0]
    assert not isinstance(result, Exception)
    assert (result.pushed, result.skipped, result.left, result.paused) == (0, 2, 0, False)
    assert int(redis_client.hget(K.relayed(TOPIC, 0), "offset")) == 1


def test_a_later_chunk_of_a_paused_queue_takes_nothing_either(rq: RedisQueue,
        redis_client: redis.Redis) -> None:
    rq.set_config("q", paused=True)
    result = rq.push_many(TOPIC, [("q", 0, 1, [rec(o) for o in range(1500)])])[0]
    assert not isinstance(result, Exception)
    assert (result.pushed, result.left, result.paused) == (0, 1500, True)
    assert redis_client.zcard(K.ready) == 0
