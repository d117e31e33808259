"""enqueue.lua and lease.lua on a real redis-server: the keys they leave and their errors."""

from __future__ import annotations

import time

import pytest
import redis

from sluice.backends.redis.checks import RECLAIM_PER_LEASE
from sluice.backends.redis.engine import RedisQueue
from sluice.backends.redis.keys import QUEUES_KEY, QueueKeys
from sluice.backends.redis.scripts import source
from sluice.core import formats
from sluice.core.limits import job_bytes
from sluice.core.models import JobSpec
from sluice.relay import RELAY_QUEUE
from sluice.relay.recovery.tracker import owner_token
from tests.backends.test_engine_support import (
    BAND,
    job,
    members,
    promote,
    redis_now_ms,
    redis_now_us,
    replica_copy,
    score,
    snapshot,
    spec,
    where,
)

pytestmark = pytest.mark.integration
K = QueueKeys("q")




# --- enqueue ---------------------------------------------------------------------------------

def test_enqueue_leaves_a_small_hash_and_a_ready_entry(rq: RedisQueue, redis_client: redis.Redis) -> None:
    before = redis_now_us(redis_client)
    assert rq.enqueue(spec("a", payload={"x": [1, 2]}, priority=3, max_attempts=7, lease_ms=1234,
                           enqueued_at_ms=1_700_000_000_000)) is True
    assert job(redis_client, "q", "a") == {"p": '{"x":[1,2]}', "m": "3,7,1234,1700000000000",
                                           "sz": str(job_bytes("a", '{"x":[1,2]}', "3,7,1234,1700000000000",
                                                               len(K.job_prefix))),
                                           "v": str(formats.REDIS_JOB)}
    seq = int(redis_client.get(K.seq) or 0)  # a new queue's counter starts from TIME (µs), then one step
    assert before + 1 <= seq <= redis_now_us(redis_client) + 1
    assert score(redis_client, "q", "ready", "a") == (9 - 3) * BAND + seq
    assert where(redis_client, "q", "a") == {"ready"}
    assert redis_client.smembers(QUEUES_KEY) == {"q"}


def test_enqueue_stamps_enqueued_at_when_absent(rq: RedisQueue, redis_client: redis.Redis) -> None:
    before = redis_now_ms(redis_client)
    rq.enqueue(spec("a"))
    enqueued_at = int(job(redis_client, "q", "a")["m"].split(",")[3])
    assert before - 1000 <= enqueued_at <= redis_now_ms(redis_client) + 1000


def test_enqueue_is_idempotent_by_job_id(rq: RedisQueue, redis_client: redis.Redis) -> None:
    assert rq.enqueue(spec("a", payload="first")) is True
    before = snapshot(redis_client)
    assert rq.enqueue(spec("a", payload="second", priority=9)) is False
    assert snapshot(redis_client) == before


def test_enqueue_many_reports_each_and_dedupes_within_the_batch(rq: RedisQueue,
                                                                redis_client: redis.Redis) -> None:
    rq.enqueue(spec("old"))
    added = rq.enqueue_many([spec("a"), spec("old"), spec("b", queue="other"), spec("a", payload=2)])
    assert added == [True, False, True, False]
    assert job(redis_client, "q", "a")["p"] == '{"id":"a"}'
    assert members(redis_client, "other", "ready") == ["b"]
    assert redis_client.smembers(QUEUES_KEY) == {"q", "other"}


def test_enqueue_delayed_goes_to_delayed_scored_by_run_at(rq: RedisQueue, redis_client: redis.Redis) -> None:
    run_at = redis_now_ms(redis_client) + 60_000
    rq.enqueue(spec("later", run_at_ms=run_at))
    rq.enqueue(spec("past", run_at_ms=1))  # already due: ready at once
    assert score(redis_client, "q", "delayed", "later") == run_at
    assert where(redis_client, "q", "later") == {"delayed"}
    assert where(redis_client, "q", "past") == {"ready"}


def test_enqueue_lua_validates_before_writing(rq: RedisQueue, redis_client: redis.Redis) -> None:
    rq.enqueue(spec("a"))
    before = snapshot(redis_client)
    script = redis_client.register_script(source("enqueue.lua"))
    keys = [K.job_prefix, K.ready, K.delayed, K.seq]
    good = [2, "ok", "1", "0,5,30000,0", 0, "ok2", "1", "0,5,30000,0", 0]
    for index, value in [(0, "3"), (0, "0"), (5, "a b"), (5, "-x"), (5, "x" * 129), (6, ""),
                         (7, "x,5,30000,0"), (7, "0,5,30000,0,1"), (8, "-5"), (8, "0x10")]:
        args = list(good)
        args[index] = value
        with pytest.raises(redis.ResponseError, match="INVALID_INPUT"):
            script(keys=keys, args=args)
    assert snapshot(redis_client) == before  # the first, valid job of each batch was not written


# --- lease -----------------------------------------------------------------------------------

def test_lease_order_priority_then_fifo(rq: RedisQueue) -> None:
    rq.enqueue_many([spec("low1"), spec("high1", priority=9), spec("mid", priority=5), spec("low2"),
                     spec("high2", priority=9)])
    assert [j.job_id for j in rq.lease("q", 10, 1000)] == ["high1", "high2", "mid", "low1", "low2"]


def test_lease_leaves_token_deadline_and_returns_what_the_worker_needs(rq: RedisQueue,
                                                                       redis_client: redis.Redis) -> None:
    rq.enqueue(spec("a", payload={"n": 1}, priority=2, max_attempts=3, enqueued_at_ms=1_000))
    before = redis_now_ms(redis_client)
    [leased] = rq.lease("q", 5, 2_000, "w1")
    assert (leased.job_id, leased.queue, leased.payload, leased.attempt, leased.max_attempts,
            leased.priority, leased.lease_ms, leased.enqueued_at_ms) == (
        "a", "q", {"n": 1}, 1, 3, 2, 2_000, 1_000)
    assert before + 2_000 <= leased.deadline_ms <= redis_now_ms(redis_client) + 2_000
    assert where(redis_client, "q", "a") == {"leased", "tokens"}
    assert score(redis_client, "q", "leased", "a") == leased.deadline_ms
    assert redis_client.hget(K.tokens, "a") == str(leased.lease_token)
    # A lease writes nothing to the job hash.
    size = job_bytes("a", '{"n":1}', "2,3,30000,1000", len(K.job_prefix))
    assert job(redis_client, "q", "a") == {"p": '{"n":1}', "m": "2,3,30000,1000", "sz": str(size),
                                           "v": str(formats.REDIS_JOB)}


def test_lease_takes_at_most_n_and_only_what_exists(rq: RedisQueue) -> None:
    rq.enqueue_many([spec(f"j{i}") for i in range(5)])
    assert len(rq.lease("q", 3, 1000)) == 3
    assert len(rq.lease("q", 3, 1000)) == 2
    assert rq.lease("q", 3, 1000) == []


def test_lease_default_is_each_jobs_own_lease(rq: RedisQueue, redis_client: redis.Redis) -> None:
    rq.enqueue_many([spec("short", lease_ms=100), spec("long", lease_ms=50_000)])
    jobs = {j.job_id: j for j in rq.lease("q", 2)}
    assert (jobs["short"].lease_ms, jobs["long"].lease_ms) == (100, 50_000)
    assert jobs["long"].deadline_ms - jobs["short"].deadline_ms == 49_900
    assert score(redis_client, "q", "leased", "short") == jobs["short"].deadline_ms


def test_lease_tokens_strictly_increase_per_job(rq: RedisQueue) -> None:
    rq.enqueue(spec("a"))
    tokens = []
    for _ in range(4):
        [leased] = rq.lease("q", 1, 1000)
        tokens.append(leased.lease_token)
        rq.release("q", "a", leased.lease_token)
    assert tokens == sorted(set(tokens))


# --- seq across a Redis data loss (_lib.lua take_seq) -------------------------------------------

def test_lease_tokens_increase_across_a_redis_data_loss(rq: RedisQueue, redis_client: redis.Redis) -> None:
    """The job model's preloss-worker-grants: a lost seq starts again from TIME in microseconds,
    not from 0, so a lease taken after the loss outranks every lease taken before it, and the
    jobs table's grant can refuse a worker leased before the loss (docs/store.md)."""
    rq.enqueue_many([spec("a"), spec("b")])
    before_loss = [j.lease_token for j in rq.lease("q", 2, 60_000)]
    redis_client.flushall()
    with pytest.raises(redis.ResponseError, match="INVALID_INPUT"):  # refused: nothing seeded
        redis_client.register_script(source("lease.lua"))(
            keys=[K.job_prefix, K.ready, K.delayed, K.leased, K.dead, K.tokens, K.seq, K.config, K.settle],
            args=[0, 1000, 10])
    assert rq.lease("q", 1, 60_000) == [] and snapshot(redis_client) == {}  # nothing to lease: no step
    t0 = redis_now_us(redis_client)
    rq.enqueue(spec("a"))  # the relay's replay
    t1 = redis_now_us(redis_client)
    seq = int(redis_client.get(K.seq) or 0)
    assert t0 + 1 <= seq <= t1 + 1
    [again] = rq.lease("q", 1, 60_000)
    assert again.lease_token > seq and again.lease_token > max(before_loss)
    assert redis_client.get(K.seq) == str(again.lease_token)
    assert redis_client.hget(K.tokens, "a") == str(again.lease_token)


def test_lease_tokens_never_repeat_after_a_failover_to_a_lagging_replica(
        rq: RedisQueue, redis_client: redis.Redis, redis_url: str) -> None:
    """Issue 29, item 6: a replica that lagged behind its primary, once promoted, holds an older
    seq, not a missing one. Its lease tokens, a batch's n consecutive ones too, must still be above
    every token handed out before, or the old holder's equal-token grant passes (docs/store.md)."""
    rq.enqueue_many([spec("a"), spec("b"), spec("c")])
    replica = replica_copy(redis_url, "sluice:{q}:*")  # the replica stops applying writes here
    handed: list[int] = []
    for _ in range(3):  # the primary goes on: leases, releases (each takes seq)
        got = rq.lease("q", 3, 60_000)
        handed += [j.lease_token for j in got]
        for j in got:
            rq.release("q", j.job_id, j.lease_token)
    promote(redis_url, replica, "sluice:{q}:*")
    assert int(redis_client.get(K.seq) or 0) < min(handed)  # it lags behind every token handed out
    again = rq.lease("q", 3, 60_000)
    tokens = [j.lease_token for j in again]
    assert len(tokens) == 3 and tokens == list(range(tokens[0], tokens[0] + 3))
    assert tokens[0] > max(handed)
    assert redis_client.hgetall(K.tokens) == {j.job_id: str(j.lease_token) for j in again}
    assert int(redis_client.get(K.seq) or 0) == tokens[-1]
    for j in again:
        rq.release("q", j.job_id, j.lease_token)
    rq.enqueue(spec("d"))  # FIFO goes on: a job enqueued after them queues behind them
    assert [j.job_id for j in rq.lease("q", 4, 60_000)][-1] == "d"


def test_whichever_script_finds_seq_missing_seeds_it(rq: RedisQueue, redis_client: redis.Redis) -> None:
    """lease.lua's own step (the counter gone while a job waits: seeded there, not from 0)."""
    rq.enqueue(spec("a"))
    redis_client.delete(K.seq)
    t0 = redis_now_us(redis_client)
    [leased] = rq.lease("q", 1, 60_000)
    assert t0 + 1 <= leased.lease_token <= redis_now_us(redis_client) + 1
    assert redis_client.get(K.seq) == str(leased.lease_token)


def test_a_seq_behind_time_is_raised_to_time(rq: RedisQueue, redis_client: redis.Redis) -> None:
    redis_client.set(K.seq, "41")  # a counter from before seeding (an upgrade), or a lagging replica's
    t0 = redis_now_us(redis_client)
    rq.enqueue(spec("a"))
    [leased] = rq.lease("q", 1, 60_000)
    assert t0 + 2 <= leased.lease_token <= redis_now_us(redis_client) + 2
    assert redis_client.get(K.seq) == str(leased.lease_token)
    assert score(redis_client, "q", "leased", "a") is not None


def test_a_seq_ahead_of_time_carries_on(rq: RedisQueue, redis_client: redis.Redis) -> None:
    ahead = redis_now_us(redis_client) + 10**12  # a queue that took more than a million seqs a second
    redis_client.set(K.seq, str(ahead))
    rq.enqueue(spec("a"))
    [leased] = rq.lease("q", 1, 60_000)
    assert (redis_client.get(K.seq), leased.lease_token) == (str(ahead + 2), ahead + 2)


def test_a_reserved_queues_seq_is_not_seeded(rq: RedisQueue, redis_client: redis.Redis) -> None:
    """The relay's partition jobs: their lease tokens must stay below 2**32 (they are the low bits
    of its owner tokens, recovery.tracker.owner_token); a recovery generation orders them across
    a loss instead."""
    relay = QueueKeys(RELAY_QUEUE)
    assert rq.enqueue_internal(spec("t.0", queue=RELAY_QUEUE))
    assert redis_client.get(relay.seq) == "1"
    [leased] = rq.lease(RELAY_QUEUE, 1, 60_000)
    assert leased.lease_token == 2 and owner_token(1, leased.lease_token) == 2**32 + 2


def test_lease_respects_max_in_flight(rq: RedisQueue, redis_client: redis.Redis) -> None:
    rq.set_config("q", max_in_flight=3)
    rq.enqueue_many([spec(f"j{i}") for i in range(10)])
    first = rq.lease("q", 10, 5_000)
    assert len(first) == 3
    assert rq.lease("q", 10, 5_000) == []
    rq.ack("q", first[0].job_id, first[0].lease_token)
    assert len(rq.lease("q", 10, 5_000)) == 1
    assert redis_client.zcard(K.leased) == 3


def test_lease_promotes_due_delayed_jobs_first(rq: RedisQueue, redis_client: redis.Redis) -> None:
    # due in 500 ms: far enough that a loaded machine still leases "now" first
    run_at = redis_now_ms(redis_client) + 500
    rq.enqueue(spec("soon", run_at_ms=run_at, priority=9))
    rq.enqueue(spec("now"))
    assert [j.job_id for j in rq.lease("q", 1, 1000)] == ["now"]
    while redis_now_ms(redis_client) <= run_at:
        time.sleep(0.02)
    assert [j.job_id for j in rq.lease("q", 1, 1000)] == ["soon"]
    assert redis_client.zcard(K.delayed) == 0


def test_lease_reclaims_an_expired_lease_as_an_attempt(rq: RedisQueue, redis_client: redis.Redis) -> None:
    rq.enqueue(spec("a", max_attempts=3))
    [first] = rq.lease("q", 1, 20)
    time.sleep(0.04)
    [second] = rq.lease("q", 1, 1000)
    assert (second.job_id, second.attempt) == ("a", 2)
    assert second.lease_token > first.lease_token
    assert job(redis_client, "q", "a")["a"] == "1"
    assert job(redis_client, "q", "a")["err"] == "lease expired on attempt 1"


def test_lease_sends_an_expired_lease_out_of_attempts_to_dead(rq: RedisQueue,
                                                              redis_client: redis.Redis) -> None:
    rq.enqueue(spec("a", max_attempts=1))
    rq.lease("q", 1, 20)
    time.sleep(0.04)
    assert rq.lease("q", 1, 1000) == []
    assert where(redis_client, "q", "a") == {"dead"}
    assert job(redis_client, "q", "a")["a"] == "1"


def test_lease_reclaims_a_bounded_number_per_call(rq: RedisQueue, redis_client: redis.Redis) -> None:
    total = RECLAIM_PER_LEASE + 30
    rq.enqueue_many([spec(f"j{i}") for i in range(total)])
    rq.lease("q", 1000, 20)
    time.sleep(0.04)
    rq.lease("q", 1, 20)  # reclaims 100 of the 130 expired leases, then leases one job
    assert redis_client.zcard(K.leased) == 30 + 1
    assert redis_client.zcard(K.ready) == RECLAIM_PER_LEASE - 1


def test_lease_on_an_empty_or_unknown_queue_writes_nothing(rq: RedisQueue, redis_client: redis.Redis) -> None:
    assert rq.lease("nothing-here", 10, 1000) == []
    assert snapshot(redis_client) == {}


def test_lease_lua_validates_before_writing(rq: RedisQueue, redis_client: redis.Redis) -> None:
    rq.enqueue(spec("a"))
    before = snapshot(redis_client)
    script = redis_client.register_script(source("lease.lua"))
    keys = [K.job_prefix, K.ready, K.delayed, K.leased, K.dead, K.tokens, K.seq, K.config]
    for args in ([0, 1000, 10], [1001, 1000, 10], [1, 9, 10], [1, 43_200_001, 10], [1, 1000, -1],
                 ["x", 1000, 10]):
        with pytest.raises(redis.ResponseError, match="INVALID_INPUT"):
            script(keys=keys, args=args)
    assert snapshot(redis_client) == before


def test_jobspec_built_without_validation_is_checked_again(rq: RedisQueue, redis_client: redis.Redis) -> None:
    bad = JobSpec.model_construct(job_id="a", queue="q", payload=None, priority=10, max_attempts=5,
                                  lease_ms=30_000, run_at_ms=0, enqueued_at_ms=0)
    with pytest.raises(ValueError, match="priority"):
        rq.enqueue(bad)
    assert snapshot(redis_client) == {}
