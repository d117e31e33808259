"""The queue's cumulative endings (``keys.finished``, issue 17: the console's finished-jobs sparkline):
which scripts add to the hash, by how much, and that reading it (stats.lua) changes nothing."""

from __future__ import annotations

import time

import pytest
import redis

from sluice.backends.redis.engine import RedisQueue
from sluice.backends.redis.keys import QueueKeys
from sluice.core.errors import InvalidInput, StaleToken
from sluice.core.models import FinishedCounts
from tests.backends.test_engine_support import leased, snapshot, spec

pytestmark = pytest.mark.integration
K = QueueKeys("q")




def finished(client: redis.Redis) -> dict[str, str]:
    return client.hgetall(K.finished)  # type: ignore[no-any-return]


def test_an_ack_counts_succeeded_and_an_acked_cancel_counts_cancelled(rq: RedisQueue,
                                                                        redis_client: redis.Redis) -> None:
    a, b, c = leased(rq, "a"), leased(rq, "b"), leased(rq, "c")
    assert rq.cancel("q", "c") == "requested"  # the worker drops a cancelled job with an ack
    errors = rq.ack_many("q", [(a.job_id, a.lease_token), (b.job_id, b.lease_token + 5),
                               (c.job_id, c.lease_token)])
    assert errors[0] is None and errors[2] is None and errors[1] is not None
    assert finished(redis_client) == {"succeeded": "1", "cancelled": "1"}  # the refused ack: nothing
    rq.ack("q", "b", b.lease_token)
    assert finished(redis_client) == {"succeeded": "2", "cancelled": "1"}


def test_a_refused_ack_counts_nothing(rq: RedisQueue, redis_client: redis.Redis) -> None:
    j = leased(rq, "a")
    before = snapshot(redis_client)
    with pytest.raises(StaleToken):
        rq.ack("q", "a", j.lease_token - 1)
    assert snapshot(redis_client) == before and finished(redis_client) == {}


def test_fail_counts_only_an_ending_in_dead(rq: RedisQueue, redis_client: redis.Redis) -> None:
    j = leased(rq, "retried", max_attempts=3)
    assert rq.fail("q", "retried", j.lease_token, "boom", retry_after_ms=60_000) == "retry"
    assert finished(redis_client) == {}
    j = leased(rq, "failed", max_attempts=3)
    assert rq.fail("q", "failed", j.lease_token, "Fail", permanent=True) == "dead"
    j = leased(rq, "used-up", max_attempts=1)
    assert rq.fail("q", "used-up", j.lease_token, "boom") == "dead"
    assert finished(redis_client) == {"dead": "2"}
    j = leased(rq, "cancelled", max_attempts=3)
    rq.cancel("q", "cancelled")
    assert rq.fail("q", "cancelled", j.lease_token, "boom") == "cancelled"  # removed; its entry: cancelled
    assert finished(redis_client) == {"dead": "2", "cancelled": "1"}


def test_cancel_counts_a_removed_job_not_a_requested_one(rq: RedisQueue, redis_client: redis.Redis) -> None:
    leased(rq, "running")
    rq.enqueue(spec("waiting"))
    assert rq.cancel("q", "running") == "requested"
    assert finished(redis_client) == {}
    assert rq.cancel("q", "waiting") == "removed"
    assert finished(redis_client) == {"cancelled": "1"}


def test_release_counts_a_cancelled_job_it_removes(rq: RedisQueue, redis_client: redis.Redis) -> None:
    j = leased(rq, "a")
    rq.release("q", "a", j.lease_token)  # back in ready: no ending
    assert finished(redis_client) == {}
    [j] = rq.lease("q", 1, 5_000)
    rq.cancel("q", "a")
    rq.release("q", "a", j.lease_token)
    assert finished(redis_client) == {"cancelled": "1"}


# Long enough that a loaded machine (xdist, tiers side by side) sets every lease up before any
# lapses: lease.lua reclaims what lapsed, so an early expiry would end a job before reap counts it.
LEASE_MS = 200


def test_expiries_count_their_endings_from_lease_and_from_reap(rq: RedisQueue,
                                                                redis_client: redis.Redis) -> None:
    leased(rq, "last", lease_ms=LEASE_MS, max_attempts=1)
    leased(rq, "again", lease_ms=LEASE_MS, max_attempts=3)
    leased(rq, "cancelled", lease_ms=LEASE_MS, max_attempts=3)
    rq.cancel("q", "cancelled")
    time.sleep(3 * LEASE_MS / 1000)
    assert rq.reap("q") == 3
    assert finished(redis_client) == {"dead": "1", "cancelled": "1"}  # "again" waits again: no ending
    [j] = rq.lease("q", 1, LEASE_MS)
    assert j.job_id == "again"
    rq.fail("q", "again", j.lease_token, "boom", retry_after_ms=0)
    rq.enqueue(spec("next"))  # behind "again" in ready
    [j] = rq.lease("q", 1, LEASE_MS)  # attempt 3 of 3 of the job at the front
    assert j.job_id == "again"
    time.sleep(3 * LEASE_MS / 1000)
    [n] = rq.lease("q", 1, 5_000)  # lease.lua's own reclaim ends "again" first
    assert n.job_id == "next"
    assert finished(redis_client) == {"dead": "2", "cancelled": "1"}


def test_stats_reads_the_counts_and_the_read_changes_nothing(rq: RedisQueue,
                                                             redis_client: redis.Redis) -> None:
    assert rq.stats("q").finished == FinishedCounts()  # no hash yet: zeros
    j = leased(rq, "a")
    rq.ack("q", "a", j.lease_token)
    j = leased(rq, "b", max_attempts=1)
    rq.fail("q", "b", j.lease_token, "boom")
    before = snapshot(redis_client)
    first, second = rq.stats("q").finished, rq.stats("q").finished
    assert first == second == FinishedCounts(succeeded=1, dead=1, cancelled=0)
    assert first.total == 2
    assert snapshot(redis_client) == before  # a read, never a reset: every reader sees the same counts


def test_invalid_input_counts_nothing(rq: RedisQueue, redis_client: redis.Redis) -> None:
    j = leased(rq, "a")
    with pytest.raises(InvalidInput):
        rq.fail("q", "a", j.lease_token, "x", retry_after_ms=-1)
    with pytest.raises(InvalidInput):
        rq.scripts.fail(K, "a", j.lease_token, "x", 0, 2)  # type: ignore[arg-type]
    assert finished(redis_client) == {}
