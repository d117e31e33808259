"""trim.lua, register.lua and the cap fields of config.lua, checked by the key state they leave."""

from __future__ import annotations

import time

import pytest
import redis

from sluice.backends.redis.engine import RedisQueue
from sluice.backends.redis.keys import (
    QUEUES_KEY,
    REGISTRY_KEYS,
    REGISTRY_LOADED_KEY,
    REGISTRY_RESERVED_KEY,
    QueueKeys,
)
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
    rq.enqueue_many([spec("expired", max_attempts=1), spec("failed", max_attempts=3)])
    assert len(rq.lease("q", 2, 10)) == 2
    time.sleep(0.05)
    rq.reap("q")  # "expired" -> dead + "dead:expired" in settle; "failed" back to ready
    (again,) = rq.lease("q", 1, 60_000)
    # its worker wrote its own verdict: dead, nothing to settle (a cancel-requested job a plain fail
    # ends is removed, not left dead: issue 29, item 8)
    assert rq.fail("q", again.job_id, again.lease_token, "boom", permanent=True) == "dead"
    make_dead(rq, "settled")
    for job_id in ("expired", "failed", "settled"):
        backdate(redis_client, job_id, 1_000)
    assert set(redis_client.zrange(K.settle, 0, -1)) == {"dead:0:expired"}
    assert rq.trim_dead("q", keep=0, max_age_ms=1_000) == (2, 1)
    assert set(members(redis_client, "q", "dead")) == {"expired"}
    assert job(redis_client, "q", "expired")["err"] == "lease expired on attempt 1"
    assert job(redis_client, "q", "settled") == {}
    rq.settled("q", rq.unsettled("q"))  # the relay wrote it: now it may go
    assert rq.trim_dead("q", keep=0, max_age_ms=1_000) == (1, 0)
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
    for args in (["Bad Name", "0", "limit"], ["", "0", "limit"], ["q", "-1", "limit"], ["q", "x", "limit"],
                 ["a" * 65, "0", "limit"], ["q", "0", "other"], ["q", "0"], ["q", "0", "reserved"],
                 ["sluice-relay", "0", "limit"], ["sluice-relay", "0", "admitted"]):
        with pytest.raises(redis.ResponseError, match="INVALID_INPUT"):
            script(keys=list(REGISTRY_KEYS), args=args)
    assert snapshot(redis_client) == {}
    redis_client.set(REGISTRY_LOADED_KEY, "1")
    assert script(keys=list(REGISTRY_KEYS), args=["q", "1", "limit"]) == 1
    assert script(keys=list(REGISTRY_KEYS), args=["q", "1", "limit"]) == 0
    with pytest.raises(redis.ResponseError, match="QUEUE_NOT_ALLOWED"):
        script(keys=list(REGISTRY_KEYS), args=["r", "1", "limit"])
    assert redis_client.smembers(QUEUES_KEY) == {"q"}


# --- issue 28: the registry's cache, its reserved names and its load --------------------------

def run_register(client: redis.Redis, queue: str, limit: int, mode: str) -> int:
    return int(client.register_script(source("register.lua"))(keys=list(REGISTRY_KEYS),
                                                                args=[queue, limit, mode]))


def test_reserved_names_do_not_count_toward_the_limit(redis_client: redis.Redis) -> None:
    """The relay's own queue (and any sluice- name) is held apart: a limit of 1 leaves room for one
    public queue, however many reserved ones the registry holds."""
    redis_client.set(REGISTRY_LOADED_KEY, "1")
    assert run_register(redis_client, "sluice-relay", 0, "reserved") == 1
    assert run_register(redis_client, "sluice-other", 0, "reserved") == 1
    assert run_register(redis_client, "sluice-relay", 0, "reserved") == 0
    assert run_register(redis_client, "first", 1, "limit") == 1
    before = snapshot(redis_client)
    with pytest.raises(redis.ResponseError, match=r"QUEUE_NOT_ALLOWED registry full.*limit=1"):
        run_register(redis_client, "second", 1, "limit")
    assert snapshot(redis_client) == before  # refused: nothing written
    assert redis_client.smembers(QUEUES_KEY) == {"sluice-relay", "sluice-other", "first"}
    assert redis_client.smembers(REGISTRY_RESERVED_KEY) == {"sluice-relay", "sluice-other"}


def test_a_reserved_name_already_registered_joins_the_reserved_set(redis_client: redis.Redis) -> None:
    """A registry from before issue 28 holds sluice-relay unmarked: its next registration marks it."""
    redis_client.sadd(QUEUES_KEY, "sluice-relay")
    assert run_register(redis_client, "sluice-relay", 0, "reserved") == 0
    assert redis_client.smembers(REGISTRY_RESERVED_KEY) == {"sluice-relay"}


def test_an_admitted_queue_is_registered_beyond_the_limit_and_cold(redis_client: redis.Redis) -> None:
    """A minted, sealed record's queue (the relay's mode admitted): its gateway reserved it before the
    202, so neither a full registry nor a cache Redis lost refuses it."""
    assert run_register(redis_client, "late", 1, "admitted") == 1  # cold: no loaded mark, no refusal
    redis_client.set(REGISTRY_LOADED_KEY, "1")
    assert run_register(redis_client, "later", 1, "admitted") == 1  # full (1 of 1): still admitted
    assert redis_client.smembers(QUEUES_KEY) == {"late", "later"}


def test_a_cold_cache_decides_no_limit_until_it_is_loaded(redis_client: redis.Redis) -> None:
    """After a Redis loss the set holds only what was registered since: a limit checked on it would let
    new queues past it. register.lua refuses to decide (REGISTRY_COLD, nothing written) until
    registry_load.lua loaded every name; its last chunk sets the mark."""
    with pytest.raises(redis.ResponseError, match="REGISTRY_COLD"):
        run_register(redis_client, "new", 2, "limit")
    assert snapshot(redis_client) == {}
    assert run_register(redis_client, "new", 0, "limit") == 1  # no limit: nothing to decide
    load = redis_client.register_script(source("registry_load.lua"))
    assert load(keys=[QUEUES_KEY, REGISTRY_LOADED_KEY], args=["0", "a", "b"]) == 2
    with pytest.raises(redis.ResponseError, match="REGISTRY_COLD"):
        run_register(redis_client, "c", 5, "limit")  # a chunk, not the last: still cold
    assert load(keys=[QUEUES_KEY, REGISTRY_LOADED_KEY], args=["1", "b", "new"]) == 0
    assert redis_client.get(REGISTRY_LOADED_KEY) == "1"
    with pytest.raises(redis.ResponseError, match="QUEUE_NOT_ALLOWED"):
        run_register(redis_client, "c", 3, "limit")  # a, b, new: full
    assert redis_client.smembers(QUEUES_KEY) == {"a", "b", "new"}


def test_registry_load_validates_every_name_before_writing(redis_client: redis.Redis) -> None:
    load = redis_client.register_script(source("registry_load.lua"))
    for args in (["2", "a"], ["1", "a", "Bad Name"], ["1", "a", "sluice-relay"], ["1", "a", ""],
                 ["1", *[f"q{i}" for i in range(1001)]]):
        with pytest.raises(redis.ResponseError, match="INVALID_INPUT"):
            load(keys=[QUEUES_KEY, REGISTRY_LOADED_KEY], args=args)
    assert snapshot(redis_client) == {}
    assert load(keys=[QUEUES_KEY, REGISTRY_LOADED_KEY], args=["1"]) == 0  # an empty registry: marked
    assert snapshot(redis_client) == {REGISTRY_LOADED_KEY: ("string", "1", -1)}


def test_the_connection_loads_a_cold_cache_from_its_source_and_decides(redis_url: str,
                                                                       redis_client: redis.Redis) -> None:
    """``RedisConnection.register`` finds the cache cold, loads it from the durable registry's names
    (in chunks, the mark last), then decides the limit on the whole registry."""
    from sluice.backends.redis.connection import RedisConnection

    conn = RedisConnection.from_url(redis_url, Limits(max_queues=1_501))
    conn.registry_source = lambda: [f"q{i}" for i in range(1_500)] + ["Not A Queue", "sluice-x"]
    try:
        assert conn.register("sluice-relay") is True  # reserved: no limit, not cold
        assert conn.register("new") is True  # loads 1,500 names (two chunks): 1,500 < 1,501, room
        assert redis_client.scard(QUEUES_KEY) == 1_502 and redis_client.get(REGISTRY_LOADED_KEY) == "1"
        with pytest.raises(QueueNotAllowed, match="registry full"):
            conn.register("another")
        assert conn.register("q7") is False  # loaded: a registered name is never refused
        assert conn.register_all({"another", "q8"}, admitted=True) == {}  # the relay's pushes
        assert conn.register("another") is False
    finally:
        conn.close()


def test_a_process_that_cannot_load_a_lost_cache_marks_nothing(redis_url: str,
                                                                redis_client: redis.Redis) -> None:
    """A deployment with a durable registry (SLUICE_QUEUES_TABLE), and a process not wired to it (a
    CLI, a harness): after a Redis loss it refuses to decide the limit (RegistryCold, retryable)
    rather than mark the cache loaded as it stands, which would let every gateway decide the
    limit on a partial set."""
    from sluice.backends.redis.connection import RedisConnection
    from sluice.core.config import Settings
    from sluice.core.errors import RegistryCold

    conn = RedisConnection.from_settings(Settings(redis_url=redis_url, max_queues=5, queues_table="queues"))
    try:
        assert conn.registry_required
        with pytest.raises(RegistryCold):
            conn.register("new")
        assert snapshot(redis_client) == {}
        assert conn.register("sluice-relay") is True  # reserved: no limit to decide
    finally:
        conn.close()


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
