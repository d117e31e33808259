"""The Redis job hash carries its format (issue 29, item 9), and today's scripts read the hashes the
code at c44b81f wrote (p, m and perhaps g, a, err; no v, no sz, no grp, and no used counter), key state
checked on a real redis-server. tests/stack/test_upgrade.py runs the whole upgrade."""

from __future__ import annotations

import time

import pytest
import redis

from sluice.backends.redis.engine import RedisQueue
from sluice.backends.redis.keys import QueueKeys
from sluice.core import formats
from tests.backends.test_engine_support import job, spec, where

pytestmark = pytest.mark.integration
K = QueueKeys("q")


def as_c44b81f_wrote_it(client: redis.Redis, job_id: str) -> None:
    """The job's hash as the old push left it: no v, no sz, and no byte count for the queue."""
    client.hdel(K.job(job_id), "v", "sz")
    client.delete(K.used)


def test_a_job_pushed_today_carries_its_format(rq: RedisQueue, redis_client: redis.Redis) -> None:
    rq.enqueue(spec("a"))
    rq.enqueue(spec("b", group="t1"))
    assert job(redis_client, "q", "a")["v"] == job(redis_client, "q", "b")["v"] == str(formats.REDIS_JOB)
    assert formats.redis_job_format(job(redis_client, "q", "a")) == formats.REDIS_JOB


def test_a_format_1_job_leases_dies_is_redriven_and_acks(rq: RedisQueue, redis_client: redis.Redis) -> None:
    rq.enqueue(spec("a", max_attempts=1))
    as_c44b81f_wrote_it(redis_client, "a")
    assert formats.redis_job_format(job(redis_client, "q", "a")) == 1
    [first] = rq.lease("q", 1, 5_000)
    rq.fail("q", "a", first.lease_token, "boom")
    assert where(redis_client, "q", "a") == {"dead"}
    assert rq.dead_spec("q", "a").job_id == "a"  # the operator API's redrive reads it back
    assert rq.redrive("q", "a") == 1
    [again] = rq.lease("q", 1, 5_000)
    rq.ack("q", "a", again.lease_token)
    assert where(redis_client, "q", "a") == set() and not redis_client.exists(K.job("a"))
    assert int(redis_client.get(K.used) or 0) == 0  # nothing given back that was never counted


def test_a_format_1_job_whose_lease_lapsed_is_reaped_and_leased_again(rq: RedisQueue,
                                                                       redis_client: redis.Redis) -> None:
    """The running job of an upgrade: its old worker stopped with it."""
    rq.enqueue(spec("a"))
    as_c44b81f_wrote_it(redis_client, "a")
    rq.lease("q", 1, 20)
    time.sleep(0.05)
    assert rq.reap("q") == 1
    [again] = rq.lease("q", 1, 5_000)
    assert (again.job_id, again.attempt) == ("a", 2)
    rq.ack("q", "a", again.lease_token)
    assert int(redis_client.get(K.used) or 0) == 0
