"""throttle.lua on a real redis-server (and a cluster): the caller's buckets it leaves, that a refusal
writes nothing, its input checks, and the same verdicts as ``sluice.core.throttle.take``."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
import redis

from sluice.backends.redis.connection import RedisConnection
from sluice.backends.redis.keys import caller_bucket
from sluice.backends.redis.throttle import RedisCallerThrottle
from sluice.core.errors import InvalidInput
from sluice.core.throttle import CallerLimit, take

pytestmark = pytest.mark.integration
A = "arn:aws:iam::123456789012:role/team-a"
B = "arn:aws:iam::123456789012:role/team-b"


@pytest.fixture
def conn(redis_url: str) -> Iterator[RedisConnection]:
    c = RedisConnection.from_url(redis_url)
    yield c
    c.close()


def test_the_key_is_the_callers_own_slot_and_never_holds_the_arn() -> None:
    key = caller_bucket(A)
    assert key.startswith("sluice:{caller:") and key.endswith("}:bucket") and "team-a" not in key
    assert key != caller_bucket(B) and len(key) == len("sluice:{caller:}:bucket") + 32
    with pytest.raises(ValueError):
        caller_bucket("")


def test_burst_then_refusal_which_writes_nothing(conn: RedisConnection, redis_client: redis.Redis) -> None:
    throttle = RedisCallerThrottle(conn)
    limit = CallerLimit(rate_per_s=0.01, burst=3, bytes_per_s=1000, byte_burst=4000)
    assert [throttle.take(A, limit, 1000).allowed for _ in range(3)] == [True, True, True]
    key = caller_bucket(A)
    state = redis_client.hgetall(key)
    # 3 of 3 requests and 3,000 of 4,000 bytes taken (plus what the milliseconds between calls refilled)
    assert set(state) == {"r", "b", "t"} and float(state["r"]) < 0.01 and 1000 <= float(state["b"]) < 1500
    pttl = redis_client.pttl(key)
    assert 300_000 < pttl <= 301_000  # full again after burst / rate = 300 s, + 1 s
    refused = throttle.take(A, limit, 10)
    assert not refused.allowed and 99_000 <= refused.retry_after_ms <= 100_000  # 1 request at 0.01/s
    assert redis_client.hgetall(key) == state  # nothing written
    assert throttle.take(B, limit, 10).allowed  # another caller: its own bucket
    assert redis_client.exists(caller_bucket(B)) == 1


def test_a_byte_flood_is_refused_on_the_byte_bucket(conn: RedisConnection) -> None:
    throttle = RedisCallerThrottle(conn)
    limit = CallerLimit(rate_per_s=1000, burst=1000, bytes_per_s=1, byte_burst=256 * 1024)
    assert throttle.take(A, limit, 200 * 1024).allowed
    verdict = throttle.take(A, limit, 200 * 1024)
    assert not verdict.allowed and verdict.retry_after_ms > 100_000  # 1 byte/s
    assert throttle.take(A, limit, 10 * 1024).allowed  # what is left still serves a small body
    assert throttle.take(A, CallerLimit(rate_per_s=1000, burst=1000), 10 << 20).allowed  # no byte limit


@pytest.mark.parametrize(("argv", "what"), [
    (["-1", 1, 0, 0, 0], "rate_per_s"), (["1e3", 1, 0, 0, 0], "rate_per_s"),
    (["nan", 1, 0, 0, 0], "rate_per_s"),
    (["1", -1, 0, 0, 0], "burst"), (["1", "1.5", 0, 0, 0], "burst"), (["1", 1, "x", 0, 0], "bytes_per_s"),
    (["1", 1, 0, 1 << 41, 0], "byte_burst"), (["1", 1, 0, 0, -5], "size"),
])
def test_bad_input_is_refused_before_any_write(conn: RedisConnection, redis_client: redis.Redis,
                                               argv: list[object], what: str) -> None:
    key = caller_bucket(A)
    with pytest.raises(InvalidInput, match=what):
        conn.scripts._run("throttle.lua", [key], argv)
    assert redis_client.exists(key) == 0


def test_the_script_decides_as_the_core_does(conn: RedisConnection) -> None:
    """A random run of bodies against slow buckets (so the milliseconds between calls refill less
    than a token): each verdict is the one ``sluice.core.throttle.take`` gives."""
    throttle = RedisCallerThrottle(conn)
    rng = random.Random(27)
    for limit in (CallerLimit(0.001, 5, 1, 5000), CallerLimit(0.001, 50, 1, 3000),
                  CallerLimit(0.001, 4, 0, 0), CallerLimit(0, 0, 1, 2000)):
        who = f"{A}-{limit.burst}-{limit.byte_burst}"
        state = None
        for _ in range(60):
            size = rng.choice([0, 1, 100, 999, 1000, 2500, 6000])
            expected, state = take(state, 0, limit, size)
            got = throttle.take(who, limit, size)
            assert got.allowed == expected.allowed, (limit, size)
