"""extend.lua, ack.lua, fail.lua and release.lua: the keys they leave and every error code."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import redis

from sluice.backends.redis.engine import RedisQueue
from sluice.backends.redis.keys import QueueKeys
from sluice.backends.redis.scripts import source
from sluice.core.errors import JobNotFound, LeaseLost, StaleToken
from sluice.core.models import LeasedJob
from tests.backends.test_engine_support import (
    band,
    job,
    leased,
    members,
    redis_now_ms,
    score,
    snapshot,
    spec,
    where,
)

pytestmark = pytest.mark.integration
K = QueueKeys("q")




def stale_pair(rq: RedisQueue) -> tuple[LeasedJob, LeasedJob]:
    """The same job leased twice: the first lease expired and was taken over."""
    first = leased(rq, lease_ms=20)
    time.sleep(0.04)
    [second] = rq.lease("q", 1, 5_000)
    return first, second


# Every holder-checked operation, as (name, call(rq, job_id, token)).
HOLDER_OPS: list[tuple[str, Callable[[RedisQueue, str, int], object]]] = [
    ("extend", lambda rq, j, t: rq.extend("q", j, t, 1_000)),
    ("ack", lambda rq, j, t: rq.ack("q", j, t)),
    ("fail", lambda rq, j, t: rq.fail("q", j, t, "boom")),
    ("release", lambda rq, j, t: rq.release("q", j, t)),
]


# --- extend ------------------------------------------------------------------------------------

def test_extend_moves_the_deadline(rq: RedisQueue, redis_client: redis.Redis) -> None:
    j = leased(rq, lease_ms=1_000)
    before = redis_now_ms(redis_client)
    extended = rq.extend("q", "a", j.lease_token, 60_000)
    assert before + 60_000 <= extended.deadline_ms <= redis_now_ms(redis_client) + 60_000
    assert score(redis_client, "q", "leased", "a") == extended.deadline_ms
    assert extended.cancel_requested is False
    assert redis_client.hget(K.tokens, "a") == str(j.lease_token)


def test_extend_reports_a_cancel_request(rq: RedisQueue) -> None:
    j = leased(rq)
    assert rq.cancel("q", "a") == "requested"
    assert rq.extend("q", "a", j.lease_token, 1_000).cancel_requested is True


def test_extend_of_an_expired_but_unclaimed_lease_succeeds(rq: RedisQueue, redis_client: redis.Redis) -> None:
    j = leased(rq, lease_ms=20)
    time.sleep(0.04)  # expired, but no lease or reap call has reclaimed it: nobody else holds it
    rq.extend("q", "a", j.lease_token, 5_000)
    assert rq.lease("q", 1, 1_000) == []
    assert where(redis_client, "q", "a") == {"leased", "tokens"}


# --- errors shared by extend, ack, fail and release ---------------------------------------------

@pytest.mark.parametrize(("name", "op"), HOLDER_OPS, ids=[n for n, _ in HOLDER_OPS])
def test_stale_token_is_refused_with_both_tokens(rq: RedisQueue, redis_client: redis.Redis, name: str,
                                                 op: Callable[[RedisQueue, str, int], object]) -> None:
    first, second = stale_pair(rq)
    before = snapshot(redis_client)
    with pytest.raises(StaleToken) as err:
        op(rq, "a", first.lease_token)
    assert (err.value.mine, err.value.current) == (first.lease_token, second.lease_token)
    assert err.value.details["job"] == "a"
    assert snapshot(redis_client) == before


@pytest.mark.parametrize(("name", "op"), HOLDER_OPS, ids=[n for n, _ in HOLDER_OPS])
def test_unknown_token_is_lease_lost(rq: RedisQueue, redis_client: redis.Redis, name: str,
                                     op: Callable[[RedisQueue, str, int], object]) -> None:
    j = leased(rq)
    before = snapshot(redis_client)
    with pytest.raises(LeaseLost) as err:
        op(rq, "a", j.lease_token + 1000)
    assert not isinstance(err.value, StaleToken)
    assert snapshot(redis_client) == before


@pytest.mark.parametrize(("name", "op"), HOLDER_OPS, ids=[n for n, _ in HOLDER_OPS])
def test_job_that_is_not_leased_is_lease_lost(rq: RedisQueue, redis_client: redis.Redis, name: str,
                                              op: Callable[[RedisQueue, str, int], object]) -> None:
    j = leased(rq, lease_ms=20)
    time.sleep(0.04)
    assert rq.reap("q") == 1  # back in ready; the old holder's token is still "current"
    before = snapshot(redis_client)
    with pytest.raises(LeaseLost):
        op(rq, "a", j.lease_token)
    assert snapshot(redis_client) == before


@pytest.mark.parametrize(("name", "op"), HOLDER_OPS, ids=[n for n, _ in HOLDER_OPS])
def test_missing_job_is_not_found(rq: RedisQueue, redis_client: redis.Redis, name: str,
                                  op: Callable[[RedisQueue, str, int], object]) -> None:
    rq.enqueue(spec("other"))
    before = snapshot(redis_client)
    with pytest.raises(JobNotFound):
        op(rq, "ghost", 1)
    assert snapshot(redis_client) == before


# --- ack ---------------------------------------------------------------------------------------

def test_ack_deletes_the_job_everywhere(rq: RedisQueue, redis_client: redis.Redis) -> None:
    j = leased(rq)
    rq.enqueue(spec("b"))
    rq.ack("q", "a", j.lease_token)
    assert job(redis_client, "q", "a") == {}
    assert where(redis_client, "q", "a") == set()
    assert where(redis_client, "q", "b") == {"ready"}


def test_double_ack_is_an_error_not_a_silent_no_op(rq: RedisQueue) -> None:
    j = leased(rq)
    rq.ack("q", "a", j.lease_token)
    with pytest.raises(JobNotFound):
        rq.ack("q", "a", j.lease_token)


def test_ack_many_acks_the_good_and_reports_the_bad(rq: RedisQueue, redis_client: redis.Redis) -> None:
    rq.enqueue_many([spec(f"j{i}") for i in range(4)])
    jobs = rq.lease("q", 4, 5_000)
    pairs = [(j.job_id, j.lease_token) for j in jobs]
    assert jobs[1].lease_token > 1
    pairs[1] = (jobs[1].job_id, jobs[1].lease_token - 1)  # older than the job's current token: stale
    pairs.append(("ghost", 3))
    pairs.append(pairs[0])  # repeated in the same call
    errors = rq.ack_many("q", pairs)
    assert [type(e).__name__ if e else None for e in errors] == [
        None, "StaleToken", None, None, "JobNotFound", "JobNotFound"]
    assert members(redis_client, "q", "leased") == [jobs[1].job_id]
    assert list(redis_client.hgetall(K.tokens)) == [jobs[1].job_id]
    assert all(job(redis_client, "q", j.job_id) == {} for j in jobs if j is not jobs[1])


def test_ack_many_in_chunks_of_1000(rq: RedisQueue, redis_client: redis.Redis) -> None:
    rq.enqueue_many([spec(f"j{i}") for i in range(1200)])
    jobs = rq.lease("q", 1000, 5_000) + rq.lease("q", 1000, 5_000)
    assert rq.ack_many("q", [(j.job_id, j.lease_token) for j in jobs]) == [None] * 1200
    assert snapshot(redis_client).keys() <= {K.seq, "sluice:queues", K.finished, K.recent,
                                               K.waits}  # the starts the relay samples (depth)
    assert redis_client.hgetall(K.finished) == {"succeeded": "1200"}  # every ack counted, nothing else
    assert redis_client.zcard(K.recent) == 1000  # the last acked, capped (issue 32: the listing's finished)


# --- fail --------------------------------------------------------------------------------------

def test_fail_with_backoff_waits_in_delayed_and_keeps_the_error(rq: RedisQueue,
                                                                redis_client: redis.Redis) -> None:
    j = leased(rq, max_attempts=3)
    before = redis_now_ms(redis_client)
    assert rq.fail("q", "a", j.lease_token, "boom", retry_after_ms=60_000) == "retry"
    assert where(redis_client, "q", "a") == {"delayed"}
    assert before + 60_000 <= score(redis_client, "q", "delayed", "a") <= redis_now_ms(redis_client) + 60_000
    assert job(redis_client, "q", "a")["a"] == "1"
    assert job(redis_client, "q", "a")["err"] == "boom"


def test_fail_without_backoff_is_ready_again_at_the_end_of_its_band(rq: RedisQueue,
                                                                   redis_client: redis.Redis) -> None:
    j = leased(rq, priority=4)
    rq.enqueue(spec("b", priority=4))
    assert rq.fail("q", "a", j.lease_token, "boom") == "retry"
    assert members(redis_client, "q", "ready") == ["b", "a"]
    assert band(redis_client, "q", score(redis_client, "q", "ready", "a") or 0) == 9 - 4
    [again] = rq.lease("q", 2, 1_000)[1:]
    assert (again.job_id, again.attempt) == ("a", 2)


def test_fail_on_the_last_attempt_dead_letters(rq: RedisQueue, redis_client: redis.Redis) -> None:
    j = leased(rq, max_attempts=1)
    assert rq.fail("q", "a", j.lease_token, "boom", retry_after_ms=10) == "dead"
    assert where(redis_client, "q", "a") == {"dead"}
    assert job(redis_client, "q", "a")["a"] == "1"
    [dead] = rq.dead_letters("q")
    assert (dead.job_id, dead.attempts, dead.last_error) == ("a", 1, "boom")


def test_fail_permanent_dead_letters_with_attempts_left(rq: RedisQueue, redis_client: redis.Redis) -> None:
    j = leased(rq, max_attempts=5)
    assert rq.fail("q", "a", j.lease_token, "bad input", permanent=True) == "dead"
    assert where(redis_client, "q", "a") == {"dead"}


def test_fail_after_cancel_request_removes_the_job(rq: RedisQueue, redis_client: redis.Redis) -> None:
    """Once dead-lettered; a cancelled job is no dead job (issue 29, item 8): removed, as reclaim and
    release remove one, its ending left to the relay's settle."""
    j = leased(rq, max_attempts=5)
    rq.cancel("q", "a")
    assert rq.fail("q", "a", j.lease_token, "stopped") == "cancelled"
    assert where(redis_client, "q", "a") == set()
    assert not redis_client.exists(K.job("a")) and not redis_client.exists(K.used)
    assert [m for m in redis_client.zrange(K.settle, 0, -1)] == ["cancelled:0:a"]


def test_a_permanent_fail_after_cancel_request_dead_letters(rq: RedisQueue,
                                                            redis_client: redis.Redis) -> None:
    """The worker wrote its own verdict (failed) before it saw the request: a dead job."""
    j = leased(rq, max_attempts=5)
    rq.cancel("q", "a")
    assert rq.fail("q", "a", j.lease_token, "bad input", permanent=True) == "dead"
    assert where(redis_client, "q", "a") == {"dead"}


def test_fail_truncates_a_huge_error(rq: RedisQueue, redis_client: redis.Redis) -> None:
    j = leased(rq)
    rq.fail("q", "a", j.lease_token, "x" * 100_000, retry_after_ms=1_000)
    assert 0 < len(job(redis_client, "q", "a")["err"]) <= 4_000


# --- release -----------------------------------------------------------------------------------

def test_release_returns_the_job_without_counting_the_attempt(rq: RedisQueue,
                                                              redis_client: redis.Redis) -> None:
    j = leased(rq)
    rq.release("q", "a", j.lease_token)
    assert where(redis_client, "q", "a") == {"ready"}
    assert "a" not in job(redis_client, "q", "a")
    [again] = rq.lease("q", 1, 1_000)
    assert again.attempt == 1
    assert again.lease_token > j.lease_token


def test_release_of_a_cancel_requested_job_removes_it(rq: RedisQueue, redis_client: redis.Redis) -> None:
    j = leased(rq)
    rq.cancel("q", "a")
    rq.release("q", "a", j.lease_token)
    assert where(redis_client, "q", "a") == set()
    assert job(redis_client, "q", "a") == {}


def test_ack_lua_validates_before_writing(rq: RedisQueue, redis_client: redis.Redis) -> None:
    good = leased(rq)
    before = snapshot(redis_client)
    script = redis_client.register_script(source("ack.lua"))
    keys = [K.job_prefix, K.leased, K.tokens]
    t = good.lease_token
    for pairs in ("", "a", f"a {t} b", f"a  {t}", f"a {t} a -1", "a 0x10",
                  f"a {t} b 1.5", " ".join(["x 1"] * 1001)):
        with pytest.raises(redis.ResponseError, match="INVALID_INPUT"):
            script(keys=keys, args=[pairs])
    assert snapshot(redis_client) == before  # not even the valid first pair was acked
