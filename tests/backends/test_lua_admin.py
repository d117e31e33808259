"""cancel, reap, redrive, purge, stats and config scripts; dead letters and the queue registry."""

from __future__ import annotations

import time

import pytest
import redis

import sluice.backends.redis.admin as admin_module
from sluice.backends.redis.engine import RedisQueue
from sluice.backends.redis.keys import QueueKeys
from sluice.backends.redis.scripts import source
from sluice.core.errors import AlreadyFinished, InvalidInput, JobNotFound
from sluice.core.models import QueueConfig
from tests.backends.test_engine_support import (
    band,
    job,
    members,
    redis_now_ms,
    score,
    snapshot,
    spec,
    where,
)

pytestmark = pytest.mark.integration
K = QueueKeys("q")




def make_dead(rq: RedisQueue, *ids: str) -> None:
    rq.enqueue_many([spec(i, max_attempts=1) for i in ids])
    for j in rq.lease("q", len(ids), 5_000):
        assert rq.fail("q", j.job_id, j.lease_token, f"broke {j.job_id}") == "dead"


# --- cancel ------------------------------------------------------------------------------------

def test_cancel_waiting_jobs_removes_them(rq: RedisQueue, redis_client: redis.Redis) -> None:
    rq.enqueue_many([spec("ready"), spec("later", run_at_ms=redis_now_ms(redis_client) + 60_000),
                     spec("keep")])
    assert rq.cancel("q", "ready") == "removed"
    assert rq.cancel("q", "later") == "removed"
    assert job(redis_client, "q", "ready") == job(redis_client, "q", "later") == {}
    assert where(redis_client, "q", "ready") == where(redis_client, "q", "later") == set()
    assert members(redis_client, "q", "ready") == ["keep"]


def test_cancel_leased_job_marks_it_and_expiry_then_drops_it(rq: RedisQueue,
                                                            redis_client: redis.Redis) -> None:
    rq.enqueue(spec("a", max_attempts=5))
    rq.lease("q", 1, 20)
    assert rq.cancel("q", "a") == "requested"
    assert job(redis_client, "q", "a")["c"] == "1"
    assert where(redis_client, "q", "a") == {"leased", "tokens"}
    time.sleep(0.04)
    assert rq.reap("q") == 1
    assert job(redis_client, "q", "a") == {}
    assert where(redis_client, "q", "a") == set()


def test_cancel_dead_job_is_already_finished(rq: RedisQueue, redis_client: redis.Redis) -> None:
    make_dead(rq, "a")
    before = snapshot(redis_client)
    with pytest.raises(AlreadyFinished):
        rq.cancel("q", "a")
    assert snapshot(redis_client) == before


def test_cancel_missing_job_is_not_found(rq: RedisQueue, redis_client: redis.Redis) -> None:
    with pytest.raises(JobNotFound):
        rq.cancel("q", "ghost")
    assert snapshot(redis_client) == {}


# --- reap --------------------------------------------------------------------------------------

def test_reap_returns_expired_leases_and_promotes_due_delayed(rq: RedisQueue,
                                                             redis_client: redis.Redis) -> None:
    rq.enqueue_many([spec("alive"), spec("retry", max_attempts=2), spec("last", max_attempts=1)])
    # the long lease first: 20 ms leases taken first could lapse before the next lease call on a
    # loaded machine, which reclaims them inline (CI saw reap find nothing)
    rq.lease("q", 1, 60_000)
    rq.lease("q", 2, 20)
    rq.enqueue(spec("delayed", run_at_ms=redis_now_ms(redis_client) + 20))
    time.sleep(0.04)
    assert rq.reap("q") == 2
    # promotion runs first, but a reclaimed job goes to the front of its band (issue 13, bug 7)
    assert members(redis_client, "q", "ready") == ["retry", "delayed"]
    assert where(redis_client, "q", "last") == {"dead"}
    assert where(redis_client, "q", "alive") == {"leased", "tokens"}
    assert job(redis_client, "q", "retry")["a"] == "1"
    assert rq.reap("q") == 0


def test_reap_puts_a_lapsed_job_at_the_front_of_its_band(rq: RedisQueue, redis_client: redis.Redis) -> None:
    """Issue 13, bug 7: a job whose lease lapsed has waited longest; it runs next in its band,
    not behind the backlog that arrived while it was leased (nor ahead of higher bands)."""
    rq.enqueue_many([spec("first", priority=5), spec("second", priority=5)])
    rq.lease("q", 1, 20)
    rq.lease("q", 1, 40)  # "first" lapses before "second"
    rq.enqueue_many([spec(f"b{i}", priority=5) for i in range(3)]
                    + [spec("high", priority=7), spec("low", priority=2)])
    time.sleep(0.08)
    assert rq.reap("q") == 2
    assert members(redis_client, "q", "ready") == ["high", "first", "second", "b0", "b1", "b2", "low"]
    # the band of a reclaimed job's score: FRONT (2**43) below the usual (9 - priority) * 2**44 + seq
    for job_id in ("first", "second"):
        value = score(redis_client, "q", "ready", job_id)
        assert value is not None and band(redis_client, "q", value, reclaimed=True) == 9 - 5
    # and it is what the next lease hands out, after the higher band
    assert [j.job_id for j in rq.lease("q", 3, 1000)] == ["high", "first", "second"]
    # stats sees a reclaimed job as the head of its band (its age is the oldest)
    assert rq.stats("q").ready == 4


def test_lease_hands_a_lapsed_job_out_before_the_backlog(rq: RedisQueue, redis_client: redis.Redis) -> None:
    rq.enqueue(spec("stuck"))
    [held] = rq.lease("q", 1, 20)
    rq.enqueue_many([spec(f"b{i}") for i in range(5)])
    time.sleep(0.04)
    [taken] = rq.lease("q", 1, 1000)  # reclaims "stuck", then leases the head of the band
    assert (taken.job_id, taken.attempt) == ("stuck", 2) and taken.lease_token > held.lease_token
    assert members(redis_client, "q", "ready") == [f"b{i}" for i in range(5)]


def test_reap_is_bounded_by_limit(rq: RedisQueue, redis_client: redis.Redis) -> None:
    rq.enqueue_many([spec(f"j{i}") for i in range(5)])
    rq.lease("q", 5, 20)
    time.sleep(0.04)
    assert rq.reap("q", limit=3) == 3
    assert redis_client.zcard(K.leased) == 2
    assert redis_client.hlen(K.tokens) == 2
    assert rq.reap("q", limit=3) == 2


def test_reap_lua_validates(rq: RedisQueue, redis_client: redis.Redis) -> None:
    script = redis_client.register_script(source("reap.lua"))
    with pytest.raises(redis.ResponseError, match="INVALID_INPUT"):
        script(keys=[K.job_prefix, K.ready, K.delayed, K.leased, K.dead, K.tokens, K.seq], args=[0])


# --- dead letters: list, redrive, purge --------------------------------------------------------

def test_dead_letters_lists_oldest_first(rq: RedisQueue) -> None:
    make_dead(rq, "a")
    time.sleep(0.002)
    make_dead(rq, "b")
    dead = rq.dead_letters("q")
    assert [(d.job_id, d.attempts, d.last_error) for d in dead] == [("a", 1, "broke a"), ("b", 1, "broke b")]
    assert dead[0].died_at_ms <= dead[1].died_at_ms
    assert [d.job_id for d in rq.dead_letters("q", limit=1)] == ["a"]


def test_redrive_one_gives_fresh_attempts(rq: RedisQueue, redis_client: redis.Redis) -> None:
    make_dead(rq, "a", "b")
    assert rq.redrive("q", "a") == 1
    assert where(redis_client, "q", "a") == {"ready"}
    assert where(redis_client, "q", "b") == {"dead"}
    assert "a" not in job(redis_client, "q", "a")
    assert job(redis_client, "q", "a")["err"] == "broke a"
    [again] = rq.lease("q", 1, 1_000)
    assert (again.job_id, again.attempt) == ("a", 1)


def test_dead_spec_is_the_record_a_redrive_appends_again(rq: RedisQueue, redis_client: redis.Redis) -> None:
    rq.enqueue(spec("d", payload={"n": [1, "x"]}, priority=5, max_attempts=1, lease_ms=45_000,
                    enqueued_at_ms=1_700_000_000_123, run_at_ms=redis_now_ms(redis_client) - 10))
    [leased] = rq.lease("q", 1, 5_000)
    assert rq.fail("q", "d", leased.lease_token, "broke") == "dead"
    assert rq.dead_spec("q", "d") == spec("d", payload={"n": [1, "x"]}, priority=5, max_attempts=1,
                                          lease_ms=45_000, enqueued_at_ms=1_700_000_000_123)  # ready now
    rq.enqueue(spec("alive"))
    for not_dead in ("alive", "nobody"):
        with pytest.raises(JobNotFound):
            rq.dead_spec("q", not_dead)


def test_redrive_one_that_is_not_dead_is_not_found(rq: RedisQueue, redis_client: redis.Redis) -> None:
    rq.enqueue(spec("alive"))
    before = snapshot(redis_client)
    with pytest.raises(JobNotFound):
        rq.redrive("q", "alive")
    assert snapshot(redis_client) == before


def test_redrive_all_loops_over_chunks(rq: RedisQueue, redis_client: redis.Redis,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    make_dead(rq, *[f"j{i}" for i in range(7)])
    monkeypatch.setattr(admin_module, "MAX_BATCH", 3)
    assert rq.redrive("q") == 7
    assert redis_client.zcard(K.dead) == 0
    assert redis_client.zcard(K.ready) == 7


def test_purge_deletes_dead_jobs_for_good(rq: RedisQueue, redis_client: redis.Redis,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    make_dead(rq, *[f"j{i}" for i in range(5)])
    rq.enqueue(spec("alive"))
    monkeypatch.setattr(admin_module, "MAX_BATCH", 2)
    assert rq.purge_dead("q") == 5
    assert redis_client.zcard(K.dead) == 0
    assert all(job(redis_client, "q", f"j{i}") == {} for i in range(5))
    assert where(redis_client, "q", "alive") == {"ready"}
    assert rq.purge_dead("q") == 0


# --- stats -------------------------------------------------------------------------------------

def test_stats_counts_every_state(rq: RedisQueue, redis_client: redis.Redis) -> None:
    make_dead(rq, "dead1")
    rq.enqueue_many([spec("r1"), spec("r2"), spec("l1"),
                     spec("d1", run_at_ms=redis_now_ms(redis_client) + 60_000)])
    rq.lease("q", 1, 60_000)
    rq.set_config("q", max_in_flight=4, rate_per_s=2.5, paused=True)
    stats = rq.stats("q")
    assert (stats.queue, stats.ready, stats.delayed, stats.leased, stats.dead) == ("q", 2, 1, 1, 1)
    assert stats.config == QueueConfig(max_in_flight=4, rate_per_s=2.5, paused=True)


def test_holds_is_true_only_while_a_job_is_ready_delayed_or_leased(rq: RedisQueue,
                                                                      redis_client: redis.Redis) -> None:
    make_dead(rq, "dead1")
    rq.enqueue_many([spec("r1"), spec("l1"), spec("d1", run_at_ms=redis_now_ms(redis_client) + 60_000)])
    [leased] = rq.lease("q", 1, 60_000)
    before = snapshot(redis_client)
    assert [rq.holds("q", j) for j in ("r1", "l1", "d1")] == [True, True, True]
    assert not rq.holds("q", "dead1") and not rq.holds("q", "never") and not rq.holds("other", "r1")
    assert snapshot(redis_client) == before  # a read: no key changed
    rq.ack("q", leased.job_id, leased.lease_token)
    assert not rq.holds("q", leased.job_id)


def test_overdue_leases_counts_leases_past_their_deadline_and_writes_nothing(
        rq: RedisQueue, redis_client: redis.Redis) -> None:
    rq.enqueue_many([spec("long"), spec("short")])
    assert rq.overdue_leases("q") == 0
    # the long lease first: a 10 ms lease taken first could lapse before the next lease call on a
    # loaded machine, which reclaims it inline (CI saw "short" leased twice)
    [long] = rq.lease("q", 1, 60_000)
    [short] = rq.lease("q", 1, 10)
    assert (long.job_id, short.job_id) == ("long", "short")
    time.sleep(0.05)
    before = snapshot(redis_client)
    assert rq.overdue_leases("q") == 1 and rq.overdue_leases("other") == 0
    assert snapshot(redis_client) == before  # a read: no key changed


def test_stats_oldest_ready_age_across_priorities(rq: RedisQueue, redis_client: redis.Redis) -> None:
    now = redis_now_ms(redis_client)
    rq.enqueue_many([spec("new-high", priority=9, enqueued_at_ms=now - 1_000),
                     spec("old-low", priority=0, enqueued_at_ms=now - 50_000)])
    age = rq.stats("q").oldest_ready_age_ms
    assert age is not None
    assert 50_000 <= age < 55_000
    assert rq.stats("empty").oldest_ready_age_ms is None


# --- config and the registry -------------------------------------------------------------------

def test_set_config_writes_only_the_changed_fields(rq: RedisQueue, redis_client: redis.Redis) -> None:
    rq.set_config("q", rate_per_s=100, burst=20)
    config = rq.set_config("q", paused=True)
    assert config == QueueConfig(rate_per_s=100.0, burst=20, paused=True)
    assert redis_client.hgetall(K.config) == {"rate_per_s": "100.0", "burst": "20", "paused": "1"}
    assert rq.get_config("q") == config
    assert rq.set_config("q", paused=False).paused is False


@pytest.mark.parametrize("bad", [{"unknown": 1}, {"max_in_flight": -1}, {"max_in_flight": 1.5},
                                 {"burst": True}, {"rate_per_s": -0.1}, {"rate_per_s": float("nan")},
                                 {"rate_per_s": float("inf")}, {"paused": 1}, {"paused": "yes"}, {}])
def test_set_config_rejects_bad_values(rq: RedisQueue, redis_client: redis.Redis,
                                       bad: dict[str, object]) -> None:
    rq.set_config("q", burst=3)
    before = snapshot(redis_client)
    with pytest.raises(InvalidInput):
        rq.set_config("q", **bad)
    assert snapshot(redis_client) == before


def test_low_watermark_above_high_is_refused(rq: RedisQueue, redis_client: redis.Redis) -> None:
    rq.set_config("q", high_watermark=100, low_watermark=50)
    before = snapshot(redis_client)
    with pytest.raises(InvalidInput, match="low_watermark"):
        rq.set_config("q", low_watermark=150)
    with pytest.raises(InvalidInput, match="low_watermark"):
        rq.set_config("q", high_watermark=10)
    assert snapshot(redis_client) == before


def test_config_lua_validates(rq: RedisQueue, redis_client: redis.Redis) -> None:
    script = redis_client.register_script(source("config.lua"))
    for args in (["paused"], ["paused", "2"], ["burst", "-1"], ["rate_per_s", "nan"], ["evil", "1"]):
        with pytest.raises(redis.ResponseError, match="INVALID_INPUT"):
            script(keys=[K.config], args=args)
    assert snapshot(redis_client) == {}


def test_queues_lists_the_registry(rq: RedisQueue, redis_client: redis.Redis) -> None:
    rq.enqueue(spec("a", queue="emails"))
    rq.set_config("thumbnails", max_in_flight=2)
    redis_client.sadd("sluice:queues", "Not A Queue")  # junk in the advisory set is ignored
    assert rq.queues() == ["emails", "thumbnails"]


def test_a_push_after_redis_lost_its_data_registers_the_queue_again(rq: RedisQueue,
                                                                    redis_client: redis.Redis) -> None:
    """Redis restarted empty while this engine (a warm relay container) had registered the queue
    before: the next push must register it again, or the safety net and the relay's maintenance,
    which drain registered queues only, never send a worker to the jobs it pushed (chaos finding)."""
    rq.enqueue(spec("a", queue="emails"))
    rq.push("emails", "t", 0, 1, [(0, spec("b", queue="emails"))])
    redis_client.flushall()  # the restart without persistence
    assert rq.queues() == []
    rq.push("emails", "t", 0, 1, [(1, spec("c", queue="emails"))])
    assert rq.queues() == ["emails"]
    redis_client.flushall()
    rq.enqueue(spec("d", queue="emails"))
    assert rq.queues() == ["emails"]
