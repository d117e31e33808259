"""A job whose caller sent no max_attempts (0 in its meta: its handler's retry policy decides, issue
31 item 4), on a real Redis: fail.lua leaves the verdict to the worker (its ``permanent``), within
MAX_ATTEMPTS; reclaim (a lapsed lease, no worker asked) dead-letters it at the old default, 5."""

from __future__ import annotations

import time

import pytest
import redis

from sluice.backends.redis.engine import RedisQueue
from sluice.backends.redis.keys import QueueKeys
from sluice.core.models import DEFAULT_MAX_ATTEMPTS, MAX_ATTEMPTS, MAX_ATTEMPTS_UNSET
from tests.backends.test_engine_support import job, leased, spec, where

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def test_an_unset_max_attempts_is_kept_as_0_and_handed_to_the_worker(rq: RedisQueue,
                                                                     redis_client: redis.Redis) -> None:
    j = leased(rq, max_attempts=MAX_ATTEMPTS_UNSET)
    assert j.max_attempts == MAX_ATTEMPTS_UNSET
    assert job(redis_client, "q", "a")["m"].split(",")[1] == "0"


def test_fail_leaves_an_unset_jobs_verdict_to_the_worker(rq: RedisQueue, redis_client: redis.Redis) -> None:
    j = leased(rq, max_attempts=MAX_ATTEMPTS_UNSET)
    for attempt in range(1, DEFAULT_MAX_ATTEMPTS + 3):  # past the old default: the worker said retry
        assert j.attempt == attempt
        assert rq.fail("q", "a", j.lease_token, "boom") == "retry"
        assert where(redis_client, "q", "a") == {"ready"}
        [j] = rq.lease("q", 1, 5_000)
    assert rq.fail("q", "a", j.lease_token, "policy says dead", permanent=True) == "dead"
    assert where(redis_client, "q", "a") == {"dead"}
    assert job(redis_client, "q", "a")["a"] == str(DEFAULT_MAX_ATTEMPTS + 3)


def test_fail_still_stops_an_unset_job_at_max_attempts(rq: RedisQueue, redis_client: redis.Redis) -> None:
    rq.enqueue(spec("a", max_attempts=MAX_ATTEMPTS_UNSET))
    redis_client.hset(QueueKeys("q").job("a"), "a", MAX_ATTEMPTS - 1)  # 99 attempts used
    [j] = rq.lease("q", 1, 5_000)
    assert rq.fail("q", "a", j.lease_token, "boom") == "dead"  # the backstop: 100 at most


def test_reclaim_dead_letters_an_unset_job_at_the_default(rq: RedisQueue, redis_client: redis.Redis) -> None:
    rq.enqueue(spec("a", max_attempts=MAX_ATTEMPTS_UNSET))
    for attempt in range(1, DEFAULT_MAX_ATTEMPTS + 1):
        [j] = rq.lease("q", 1, 20)
        assert j.attempt == attempt
        time.sleep(0.04)  # the lease lapses: the worker died or froze
        assert rq.reap("q") == 1
    assert where(redis_client, "q", "a") == {"dead"}
    assert job(redis_client, "q", "a")["a"] == str(DEFAULT_MAX_ATTEMPTS)
