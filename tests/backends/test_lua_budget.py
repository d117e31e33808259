"""Byte budgets (issue 28, item 4) on a real Redis, by the key state the scripts leave: push.lua
reserves each job's size in the queue's ``used`` counter, in the same atomic step as the push,
and takes no job over the budget; every script that deletes a job hash gives its size back."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

from sluice.backends.redis.engine import RedisQueue
from sluice.backends.redis.keys import QueueKeys
from sluice.core.limits import Limits, job_bytes
from sluice.core.models import DecodedJob
from tests.backends.test_engine_support import leased, snapshot, spec

pytestmark = pytest.mark.integration
TOPIC = "sluice.jobs"
K = QueueKeys("q")
META = "0,5,30000,1700000000000"


def rec(offset: int, size: int = 10, run_at_ms: int = 0) -> tuple[int, DecodedJob]:
    payload = '"' + "x" * (size - 2) + '"'
    return offset, DecodedJob(f"j{offset}", "q", payload, 0, 5, 30_000, run_at_ms, 1_700_000_000_000)


def sz(offset: int, size: int = 10) -> int:
    return job_bytes(f"j{offset}", '"' + "x" * (size - 2) + '"', META, len(K.job_prefix))


def used(client: redis.Redis) -> int:
    return int(client.get(K.used) or 0)


def hashes_sum(client: redis.Redis, queue: str = "q") -> int:
    """The sum of the sz fields of every job hash of ``queue``: what ``used`` must equal."""
    prefix = QueueKeys(queue).job_prefix
    return sum(int(client.hget(key, "sz") or 0) for key in client.scan_iter(match=prefix + "*", count=1000))


@pytest.fixture
def budgeted(redis_url: str) -> Iterator[RedisQueue]:
    """A queue engine whose deployment default budget is 3 jobs of 10 bytes (``sz(0)`` each)."""
    queue = RedisQueue.from_url(redis_url, Limits(queue_budget=3 * sz(0)))
    yield queue
    queue.close()


def test_push_reserves_each_jobs_size_and_stores_it(rq: RedisQueue, redis_client: redis.Redis) -> None:
    result = rq.push_many(TOPIC, [("q", 0, 1, [rec(0), rec(1, 300), rec(2)])])[0]
    assert not isinstance(result, Exception) and (result.pushed, result.left) == (3, 0)
    assert redis_client.hget(K.job("j1"), "sz") == str(sz(1, 300))
    assert used(redis_client) == sz(0) + sz(1, 300) + sz(2) == hashes_sum(redis_client)
    assert rq.stats("q").used_bytes == used(redis_client)
    # a replay of the same records adds nothing
    rq.push_many(TOPIC, [("q", 0, 1, [rec(0), rec(1, 300), rec(2)])])
    assert used(redis_client) == hashes_sum(redis_client)


def test_a_push_over_budget_takes_only_what_fits_and_writes_nothing_of_the_rest(
        budgeted: RedisQueue, redis_client: redis.Redis) -> None:
    budgeted.push_many(TOPIC, [("q", 0, 1, [rec(0)])])
    before = snapshot(redis_client)
    result = budgeted.push_many(TOPIC, [("q", 0, 1, [rec(1), rec(2), rec(3), rec(4)])])[0]
    assert not isinstance(result, Exception)
    assert (result.pushed, result.skipped, result.left, result.offset) == (2, 0, 2, 2)
    assert used(redis_client) == 3 * sz(0) == hashes_sum(redis_client)
    assert not redis_client.exists(K.job("j3")) and not redis_client.exists(K.job("j4"))
    assert redis_client.zcard(K.ready) == 3
    assert int(redis_client.hget(K.relayed(TOPIC, 0), "offset")) == 2  # below the records left
    # full: nothing is taken, and nothing at all is written
    before = snapshot(redis_client)
    again = budgeted.push_many(TOPIC, [("q", 0, 1, [rec(3), rec(4)])])[0]
    assert not isinstance(again, Exception) and (again.pushed, again.left, again.offset) == (0, 2, 2)
    assert snapshot(redis_client) == before
    # a job leaves: one more fits
    [j] = budgeted.lease("q", 1)
    budgeted.ack("q", j.job_id, j.lease_token)
    third = budgeted.push_many(TOPIC, [("q", 0, 1, [rec(3), rec(4)])])[0]
    assert not isinstance(third, Exception) and (third.pushed, third.left, third.offset) == (1, 1, 3)
    assert used(redis_client) == hashes_sum(redis_client) == 3 * sz(0)


def test_the_queues_own_max_bytes_overrides_the_default_and_an_empty_queue_takes_one_job(
        budgeted: RedisQueue, redis_client: redis.Redis) -> None:
    budgeted.set_config("q", max_bytes=sz(0) + 1)
    result = budgeted.push_many(TOPIC, [("q", 0, 1, [rec(0, 5000), rec(1), rec(2)])])[0]
    # larger than the whole budget, but the queue counted nothing: it cannot wedge the queue
    assert not isinstance(result, Exception) and (result.pushed, result.left) == (1, 2)
    assert used(redis_client) == sz(0, 5000)
    budgeted.set_config("q", max_bytes=0)  # back to the deployment's 3 x sz(0): still over it
    second = budgeted.push_many(TOPIC, [("q", 0, 1, [rec(1), rec(2)])])[0]
    assert not isinstance(second, Exception) and (second.pushed, second.left) == (0, 2)
    budgeted.set_config("q", max_bytes=sz(0, 5000) + 2 * sz(0))
    third = budgeted.push_many(TOPIC, [("q", 0, 1, [rec(1), rec(2)])])[0]
    assert not isinstance(third, Exception) and (third.pushed, third.left) == (2, 0)
    assert used(redis_client) == hashes_sum(redis_client) == sz(0, 5000) + 2 * sz(0)


def test_a_later_chunk_takes_nothing_when_the_one_before_was_cut_by_the_budget(
        redis_url: str, redis_client: redis.Redis) -> None:
    """More than 1000 records go in several push.lua calls of one round: the second follows the
    first, so no record passes one the budget left behind (the stored offset stays below it)."""
    queue = RedisQueue.from_url(redis_url, Limits(queue_budget=sum(sz(o) for o in range(500))))
    try:
        result = queue.push_many(TOPIC, [("q", 0, 1, [rec(o) for o in range(1500)])])[0]
    finally:
        queue.close()
    assert not isinstance(result, Exception)
    assert (result.pushed, result.left) == (500, 1000)
    assert int(redis_client.hget(K.relayed(TOPIC, 0), "offset")) == 499
    assert redis_client.zcard(K.ready) == 500 and not redis_client.exists(K.job("j1000"))
    assert used(redis_client) == hashes_sum(redis_client)


def test_ack_gives_the_bytes_back(rq: RedisQueue, redis_client: redis.Redis) -> None:
    a, b = leased(rq, "a"), leased(rq, "b")
    full = used(redis_client)
    assert full == hashes_sum(redis_client) > 0
    rq.ack("q", a.job_id, a.lease_token)
    assert used(redis_client) == hashes_sum(redis_client) < full
    rq.ack("q", b.job_id, b.lease_token)
    assert not redis_client.exists(K.used)  # back to nothing: the counter goes


def test_cancel_release_and_an_expired_cancelled_lease_give_the_bytes_back(
        rq: RedisQueue, redis_client: redis.Redis) -> None:
    held, gone = leased(rq, "held"), leased(rq, "gone", lease_ms=10)
    rq.enqueue(spec("waiting"))
    assert used(redis_client) == hashes_sum(redis_client)
    assert rq.cancel("q", "waiting") == "removed"
    assert used(redis_client) == hashes_sum(redis_client)
    assert rq.cancel("q", "held") == "requested" and rq.cancel("q", "gone") == "requested"
    rq.release("q", held.job_id, held.lease_token)  # cancel requested: the job is removed
    assert not redis_client.exists(K.job("held"))
    assert used(redis_client) == hashes_sum(redis_client) > 0
    time.sleep(0.02)
    rq.reap("q")  # the expired lease of a cancel-requested job: removed
    assert not redis_client.exists(K.job("gone")) and gone.job_id == "gone"
    assert not redis_client.exists(K.used)


def test_purge_and_trim_of_dead_jobs_give_the_bytes_back(rq: RedisQueue, redis_client: redis.Redis) -> None:
    for job_id in ("d1", "d2", "d3"):
        j = leased(rq, job_id)
        assert rq.fail("q", j.job_id, j.lease_token, "boom", permanent=True) == "dead"
    assert used(redis_client) == hashes_sum(redis_client) > 0
    assert rq.trim_dead("q", keep=1, max_age_ms=0) == (2, 0)
    assert used(redis_client) == hashes_sum(redis_client) > 0
    assert rq.purge_dead("q") == 1
    assert not redis_client.exists(K.used)
