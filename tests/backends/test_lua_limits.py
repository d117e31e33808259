"""trim.lua, register.lua and the cap fields of config.lua, checked by the key state they leave."""

from __future__ import annotations

import time

import pytest
import redis

from sluice.backends.redis.engine import RedisQueue
from sluice.backends.redis.keys import QUEUES_KEY, QueueKeys
from sluice.backends.redis.scripts import source
from sluice.core.errors import InvalidInput, QueueNotAllowed
from sluice.core.limits import Limits
from sluice.core.models import QueueConfig
from tests.backends.test_engine_support import job, members, snapshot, spec

pytestmark = pytest.mark.integration
K = QueueKeys("q")




def make_dead(rq: RedisQueue, *ids: str) -> None:
    """Dead the way a worker makes them: a permanent fail, after it wrote the jobs table."""
    rq.enqueue_many([spec(i, max_attempts=3) for i in ids])
    for j in rq.lease("q", len(ids), 5_000):
        assert rq.fail("q", j.job_id, j.lease_token, f"broke {j.job_id}", permanent=True) == "dead"


def backdate(client: redis.Redis, job_id: str, died_at_ms: int) -> None:
    client.zadd(K.dead, {job_id: died_at_ms}, xx=True)


# --- trim ---------------------------------------------------------------------------------------

def test_trim_keeps_the_newest_dead_jobs_and_deletes_the_rest(rq: RedisQueue,
                                                             redis_client: redis.Redis) -> None:
    make_dead(rq, *[f"j{i}" for i in range(6)])
    for i in range(6):
        backdate(redis_client, f"j{i}", 1_000 + i)  # j0 died first
    rq.enqueue(spec("alive"))
    assert rq.trim_dead("q", keep=2, max_age_ms=0) == (4, 0)
    assert members(redis_client, "q", "dead") == ["j4", "j5"]
    assert all(job(redis_client, "q", f"j{i}") == {} for i in range(4))
    assert job(redis_client, "q", "j5")["err"] == "broke j5"
    assert members(redis_client, "q", "ready") == ["alive"]
    assert rq.trim_dead("q", keep=2, max_age_ms=0) == (0, 0)


def test_trim_by_age_deletes_only_jobs_that_died_long_enough_ago(rq: RedisQueue,
                                                                 redis_client: redis.Redis) -> None:
    make_dead(rq, "old", "new")
    backdate(redis_client, "old", 1_000)  # 1970: older than any retention
    assert rq.trim_dead("q", keep=0, max_age_ms=3_600_000) == (1, 0)
    assert members(redis_client, "q", "dead") == ["new"]
    assert job(redis_client, "q", "old") == {}
    assert job(redis_client, "q", "new") != {}


def test_trim_keeps_a_dead_job_whose_ending_is_not_settled_yet(rq: RedisQueue,
                                                               redis_client: redis.Redis) -> None:
    """An expiry on the last attempt is in the settle set until the relay writes it to the jobs
    table, which reads the job's last error from its hash: trimming it first would lose that."""
    rq.enqueue_many([spec("expired", max_attempts=1), spec("cancelled", max_attempts=3)])
    assert len(rq.lease("q", 2, 10)) == 2
    time.sleep(0.05)
    rq.reap("q")  # "expired" -> dead + "dead:expired" in settle; "cancelled" back to ready
    (again,) = rq.lease("q", 1, 60_000)
    rq.cancel("q", "cancelled")
    assert rq.fail("q", again.job_id, again.lease_token, "boom") == "dead"  # "cancelled:cancelled"
    make_dead(rq, "settled")
    for job_id in ("expired", "cancelled", "settled"):
        backdate(redis_client, job_id, 1_000)
    assert set(redis_client.zrange(K.settle, 0, -1)) == {"dead:0:expired", "cancelled:0:cancelled"}
    assert rq.trim_dead("q", keep=0, max_age_ms=1_000) == (1, 2)
    assert set(members(redis_client, "q", "dead")) == {"expired", "cancelled"}
    assert job(redis_client, "q", "expired")["err"] == "lease expired on attempt 1"
    assert job(redis_client, "q", "settled") == {}
    rq.settled("q", rq.unsettled("q"))  # the relay wrote them: now they may go
    assert rq.trim_dead("q", keep=0, max_age_ms=1_000) == (2, 0)
    assert members(redis_client, "q", "dead") == []
    assert redis_client.keys("sluice:{q}:job:*") == []


def test_trim_finds_the_ending_of_a_redriven_job_and_the_older_entry_format(
        rq: RedisQueue, redis_client: redis.Redis) -> None:
    """A redriven job's ending carries its redrive generation ("dead:<g>:<id>"); entries written
    before generations existed read "dead:<id>". Either one keeps the job."""
    rq.enqueue(spec("again", max_attempts=1))
    rq.lease("q", 1, 10)
    time.sleep(0.05)
    rq.reap("q")  # dead on its only attempt: "dead:0:again"
    rq.settled("q", rq.unsettled("q"))
    assert rq.redrive("q", "again", generation=7) == 1
    rq.lease("q", 1, 10)
    time.sleep(0.05)
    rq.reap("q")  # dead again, in generation 7
    assert redis_client.zrange(K.settle, 0, -1) == ["dead:7:again"]
    make_dead(rq, "legacy")
    redis_client.zadd(K.settle, {"dead:legacy": 5})
    for job_id in ("again", "legacy"):
        backdate(redis_client, job_id, 1_000)
    assert rq.trim_dead("q", keep=0, max_age_ms=1_000) == (0, 2)
    rq.settled("q", [e for e in rq.unsettled("q") if e.job_id == "again"])
    assert rq.trim_dead("q", keep=0, max_age_ms=1_000) == (1, 1)
    assert job(redis_client, "q", "again") == {} and job(redis_client, "q", "legacy") != {}


def test_trim_looks_at_no_more_than_its_limit(rq: RedisQueue, redis_client: redis.Redis) -> None:
    make_dead(rq, *[f"j{i}" for i in range(5)])
    assert rq.trim_dead("q", keep=1, max_age_ms=0, limit=3) == (3, 0)
    assert redis_client.zcard(K.dead) == 2


def test_trim_with_no_limits_deletes_nothing(rq: RedisQueue, redis_client: redis.Redis) -> None:
    make_dead(rq, "a", "b")
    before = snapshot(redis_client)
    assert rq.trim_dead("q", keep=0, max_age_ms=0) == (0, 0)
    assert snapshot(redis_client) == before


def test_trim_lua_validates_before_writing(rq: RedisQueue, redis_client: redis.Redis) -> None:
    make_dead(rq, "a")
    before = snapshot(redis_client)
    script = redis_client.register_script(source("trim.lua"))
    for args in (["-1", "0", "10"], ["1", "x", "10"], ["0", "1", "0"], ["0", "1", "1001"], ["1e3", "0", "1"]):
        with pytest.raises(redis.ResponseError, match="INVALID_INPUT"):
            script(keys=[K.job_prefix, K.dead, K.settle], args=args)
    with pytest.raises(InvalidInput):
        rq.trim_dead("q", keep=-1, max_age_ms=0)
    assert snapshot(redis_client) == before


# --- the registry -------------------------------------------------------------------------------

def test_registry_refuses_a_new_queue_beyond_its_limit_but_never_a_registered_one(
        redis_url: str, redis_client: redis.Redis) -> None:
    rq = RedisQueue.from_url(redis_url, Limits(max_queues=2))
    try:
        rq.enqueue(spec("a", queue="one"))
        rq.set_config("two", max_in_flight=1)
        before = snapshot(redis_client)
        with pytest.raises(QueueNotAllowed, match="registry full"):
            rq.enqueue(spec("b", queue="three"))
        with pytest.raises(QueueNotAllowed):
            rq.push("three", "t", 0, 1, [(0, spec("c", queue="three"))])
        with pytest.raises(QueueNotAllowed):
            rq.register("three")
        assert snapshot(redis_client) == before  # nothing of queue three was written
        assert rq.enqueue(spec("d", queue="one"))  # a registered queue still takes jobs
        rq.register("sluice-relay")  # Sluice's own queue is never refused
        assert redis_client.smembers(QUEUES_KEY) == {"one", "two", "sluice-relay"}
    finally:
        rq.close()


def test_allow_list_refuses_other_names_before_anything_is_written(redis_url: str,
                                                                   redis_client: redis.Redis) -> None:
    rq = RedisQueue.from_url(redis_url, Limits(allow=frozenset({"emails"})))
    try:
        with pytest.raises(QueueNotAllowed, match="allow-list"):
            rq.enqueue(spec("a", queue="random-name"))
        assert snapshot(redis_client) == {}
        assert rq.enqueue(spec("b", queue="emails"))
        rq.register("sluice-relay")
        assert redis_client.smembers(QUEUES_KEY) == {"emails", "sluice-relay"}
    finally:
        rq.close()


def test_register_lua_validates(rq: RedisQueue, redis_client: redis.Redis) -> None:
    script = redis_client.register_script(source("register.lua"))
    for args in (["Bad Name", "0"], ["", "0"], ["q", "-1"], ["q", "x"], ["a" * 65, "0"]):
        with pytest.raises(redis.ResponseError, match="INVALID_INPUT"):
            script(keys=[QUEUES_KEY], args=args)
    assert snapshot(redis_client) == {}
    assert script(keys=[QUEUES_KEY], args=["q", "1"]) == 1
    assert script(keys=[QUEUES_KEY], args=["q", "1"]) == 0
    with pytest.raises(redis.ResponseError, match="QUEUE_NOT_ALLOWED"):
        script(keys=[QUEUES_KEY], args=["r", "1"])
    assert redis_client.smembers(QUEUES_KEY) == {"q"}


# --- per-queue caps in the config hash ----------------------------------------------------------

def test_per_queue_caps_are_config_fields(rq: RedisQueue, redis_client: redis.Redis) -> None:
    config = rq.set_config("q", max_delayed=50, max_dead=7)
    assert config == QueueConfig(max_delayed=50, max_dead=7)
    assert redis_client.hgetall(K.config) == {"max_delayed": "50", "max_dead": "7"}
    assert rq.stats("q").config.max_delayed == 50
    before = snapshot(redis_client)
    with pytest.raises(InvalidInput):
        rq.set_config("q", max_dead=-1)
    assert snapshot(redis_client) == before
