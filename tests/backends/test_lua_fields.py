"""fields.lua (session 39) on a real Redis: jobs' hash fields read only within their read bounds
(``sluice.core.read_bounds``), the first field within the call's budget; a read that leaves every
key as it was, and refuses bad input before reading anything."""

from __future__ import annotations

import pytest
import redis

from sluice.backends.redis.engine import RedisQueue
from sluice.backends.redis.keys import QueueKeys
from sluice.core.errors import InvalidInput
from sluice.core.read_bounds import CAPS
from tests.backends.test_engine_support import snapshot

pytestmark = pytest.mark.integration
K = QueueKeys("q")
FIELDS = ("p", "err")


def test_each_field_is_its_value_within_its_bound_its_length_past_it_and_none_when_absent(
        rq: RedisQueue, redis_client: redis.Redis) -> None:
    redis_client.hset(K.job("a"), mapping={"p": "12345", "err": "boom"})
    redis_client.hset(K.job("b"), mapping={"p": "x" * 11, "err": ""})
    before = snapshot(redis_client)
    rows = rq.conn.scripts.fields(K, FIELDS, [10, 4], 0, ["a", "b", "missing"])
    assert rows == [["12345", "boom"], [11, None], [None, None]]
    assert snapshot(redis_client) == before  # a read: nothing written


def test_the_first_field_is_read_while_the_budget_lasts_in_the_order_of_the_ids(
        rq: RedisQueue, redis_client: redis.Redis) -> None:
    for job_id, size in (("a", 6), ("b", 5), ("c", 4)):
        redis_client.hset(K.job(job_id), mapping={"p": "x" * size, "err": "e" * size})
    rows = rq.conn.scripts.fields(K, FIELDS, [100, 100], 10, ["a", "b", "c"])
    assert rows == [["x" * 6, "e" * 6], [5, "e" * 5], ["x" * 4, "e" * 4]]  # only p counts: 6 + 4


@pytest.mark.parametrize("field", ["p", "m", "a", "err", "grp"])
def test_a_field_one_byte_over_its_read_bound_is_left_unread_and_the_others_at_theirs_are_read(
        rq: RedisQueue, redis_client: redis.Redis, field: str) -> None:
    fields = ("p", "m", "a", "err", "grp")
    redis_client.hset(K.job("a"), mapping={f: "x" * (CAPS[f] + (f == field)) for f in fields})
    (row,) = rq.conn.scripts.fields(K, fields, [CAPS[f] for f in fields], 0, ["a"])
    assert row == [CAPS[f] + 1 if f == field else "x" * CAPS[f] for f in fields]


@pytest.mark.parametrize(("args", "what"), [
    (["0", "p", "10", "0", "a"], "n_fields"),
    (["9", *"abcdefghi", *["1"] * 9, "0", "a"], "n_fields"),
    (["1", "p", "10", "0"], "ids"),
    (["1", "p", "10", "0", *[f"j{i}" for i in range(1001)]], "ids"),
    (["1", "", "10", "0", "a"], "field"),
    (["1", "p" * 17, "10", "0", "a"], "field"),
    (["1", "p", "-1", "0", "a"], "bound"),
    (["1", "p", "ten", "0", "a"], "bound"),
    (["1", "p", "10", "-1", "a"], "budget"),
    (["1", "p", "10", "0", ""], "id"),
    (["1", "p", "10", "0", "a" * 129], "id"),
])
def test_bad_input_is_refused_before_anything_is_read(rq: RedisQueue, redis_client: redis.Redis,
                                                      args: list[str], what: str) -> None:
    redis_client.hset(K.job("a"), "p", "1")
    redis_client.config_resetstat()
    with pytest.raises(InvalidInput, match=what):
        rq.conn.scripts._run("fields.lua", [K.job_prefix], args)
    stats = redis_client.info("commandstats")
    assert "cmdstat_hstrlen" not in stats and "cmdstat_hget" not in stats
