"""A lapsed lease honours the handler's retry policy (issue 31, item 4's gap), on a real Redis.

A worker tells lease.lua its queue's handler policy's ``max_attempts`` (ARGV[4]); lease.lua keeps
it in the queue's config hash (``policy_attempts``), written only when it changes, and reclaim, in
lease.lua and reap.lua, ends a lapsed job at ``policy.attempts_allowed`` of the caller's
``max_attempts`` and the policy's: the lower when both say. Before, reclaim knew no policy: a policy
of 2 saw up to 5 lapsed attempts, and one of 8 was cut at 5.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

from sluice.backends.redis.engine import RedisQueue
from sluice.backends.redis.keys import QueueKeys
from sluice.backends.redis.scripts import source
from sluice.core.errors import InvalidInput
from sluice.core.models import DEFAULT_MAX_ATTEMPTS, MAX_ATTEMPTS_UNSET
from sluice.core.policy import RetryPolicy
from sluice.worker.registry import Worker
from sluice.worker.runtime.options import WorkerOptions
from sluice.worker.runtime.telemetry import MemoryMetrics, Telemetry
from sluice_dev.fakes import FakeStore
from tests.backends.test_engine_support import job, snapshot, spec, where

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]
K = QueueKeys("q")
LAPSE_MS = 20


def lapse(rq: RedisQueue, job_id: str = "a", policy: int | None = None, *, reap: bool = True) -> int:
    """Lease ``job_id`` (telling ``policy``) and let the lease lapse unrenewed, as a worker that died;
    reclaimed by ``reap`` (the relay's maintenance) or by the next lease call. Its attempt."""
    [j] = rq.lease("q", 1, LAPSE_MS, "dying", policy)
    assert j.job_id == job_id
    time.sleep(LAPSE_MS * 2 / 1000)
    if reap:
        assert rq.reap("q") == 1
    return j.attempt


def lapses_until_dead(rq: RedisQueue, redis_client: redis.Redis, policy: int | None) -> int:
    for n in range(1, 101):
        assert lapse(rq, policy=policy) == n
        if where(redis_client, "q", "a") == {"dead"}:
            return n
        assert where(redis_client, "q", "a") == {"ready"}
    raise AssertionError("never dead")


@pytest.mark.parametrize(("requested", "policy", "dead_after"), [
    (MAX_ATTEMPTS_UNSET, 2, 2),  # the gap: 5 before
    (MAX_ATTEMPTS_UNSET, 8, 8),  # cut at 5 before
    (3, 8, 3),  # a caller lowers the policy ...
    (7, 2, 2),  # ... never raises it
    (MAX_ATTEMPTS_UNSET, 0, DEFAULT_MAX_ATTEMPTS),  # a handler without a policy: as before
    (4, None, 4),  # nothing told: the caller's
])
def test_a_lapsed_job_is_dead_at_the_lower_of_the_callers_and_the_policys(
        rq: RedisQueue, redis_client: redis.Redis, requested: int, policy: int | None,
        dead_after: int) -> None:
    rq.enqueue(spec("a", max_attempts=requested))
    assert lapses_until_dead(rq, redis_client, policy) == dead_after
    state = job(redis_client, "q", "a")
    assert state["a"] == str(dead_after) and state["err"] == f"lease expired on attempt {dead_after}"
    assert redis_client.zrange(K.settle, 0, -1) == ["dead:0:a"]  # for the relay to settle
    assert redis_client.hget(K.finished, "dead") == "1"
    assert redis_client.hget(K.config, "policy_attempts") == (str(policy) if policy else None)


def test_the_lease_that_tells_the_policy_reclaims_by_it_in_the_same_call(
        rq: RedisQueue, redis_client: redis.Redis) -> None:
    """No reap: the next worker's lease call reclaims the lapsed lease inline, by the policy it tells."""
    rq.enqueue(spec("a", max_attempts=MAX_ATTEMPTS_UNSET))
    lapse(rq, reap=False)  # told nothing: an old worker
    assert rq.lease("q", 1, 5_000, "new", 1) == []  # a policy of 1: the lapsed attempt was the last
    assert where(redis_client, "q", "a") == {"dead"}
    assert redis_client.hget(K.config, "policy_attempts") == "1"


def test_the_policy_is_written_only_when_it_changes_and_0_forgets_it(
        rq: RedisQueue, redis_client: redis.Redis) -> None:
    def hsets() -> int:
        stats: dict[str, Any] = redis_client.info("commandstats")
        return int(stats.get("cmdstat_hset", {}).get("calls", 0))

    rq.set_config("q", max_in_flight=10)
    assert rq.lease("q", 1, 5_000, "w", 3) == []
    assert redis_client.hgetall(K.config) == {"max_in_flight": "10", "policy_attempts": "3"}
    before = hsets()
    for _ in range(3):
        assert rq.lease("q", 1, 5_000, "w", 3) == []  # the same policy: no write
        assert rq.lease("q", 1, 5_000, "w") == []  # none told (the relay's leases, old workers)
    assert hsets() == before
    assert redis_client.hget(K.config, "policy_attempts") == "3"
    rq.lease("q", 1, 5_000, "w", 6)  # a deploy changed it
    assert redis_client.hget(K.config, "policy_attempts") == "6"
    rq.lease("q", 1, 5_000, "w", 0)  # ... and dropped it
    assert redis_client.hgetall(K.config) == {"max_in_flight": "10"}
    assert rq.get_config("q").max_in_flight == 10  # the operator's view ignores the field


def test_a_bad_policy_is_refused_before_anything_is_written(rq: RedisQueue,
                                                           redis_client: redis.Redis) -> None:
    rq.enqueue(spec("a", max_attempts=MAX_ATTEMPTS_UNSET))
    rq.lease("q", 1, LAPSE_MS, "w", 2)
    time.sleep(LAPSE_MS * 2 / 1000)  # a lapsed lease a lease call would reclaim: it must not
    before = snapshot(redis_client)
    script = redis_client.register_script(source("lease.lua"))
    keys = [K.job_prefix, K.ready, K.delayed, K.leased, K.dead, K.tokens, K.seq, K.config, K.settle,
            K.finished, K.used, *K.group_keys, K.turns_zset]
    for bad in ("101", "-1", "1e1", " 2", "0x2", "2.0", "x", "99999999999999999999"):
        with pytest.raises(redis.ResponseError, match="INVALID_INPUT policy"):
            script(keys=keys, args=[1, 5_000, 100, bad])
    for bad_py in (101, -1, True, "2", 2.0):
        with pytest.raises(InvalidInput):
            rq.lease("q", 1, 5_000, "w", bad_py)  # type: ignore[arg-type]
    assert snapshot(redis_client) == before
    redis_client.hset(K.config, "policy_attempts", "1e9")  # not a value lease.lua writes: ignored
    assert rq.reap("q") == 1
    assert where(redis_client, "q", "a") == {"ready"}  # 1 of the default 5 used


def test_the_worker_tells_its_handlers_policy_and_a_lapse_then_honours_it(
        rq: RedisQueue, redis_client: redis.Redis) -> None:
    """The worker path: a drain's lease tells Redis the handler's policy (2); a job leased by a
    worker that then died lapses twice and is dead, as the policy says, where it took 5 before;
    a redeploy without a policy forgets it."""
    ran: list[int] = []
    app = Worker()

    @app.handler("q", retry=RetryPolicy(max_attempts=2))
    def handle(job: Any, ctx: Any) -> dict[str, int]:
        ran.append(job.attempt)
        return {"attempt": job.attempt}

    store = FakeStore()
    worker = app.bind(queue=rq, store=store, options=WorkerOptions(lease_ms=5_000),
                      telemetry=Telemetry(MemoryMetrics()), worker_id="policy-test")
    rq.enqueue(spec("first", max_attempts=MAX_ATTEMPTS_UNSET))
    assert worker.drain(["q"], 5).leased == 1 and ran == [1]
    assert redis_client.hget(K.config, "policy_attempts") == "2"
    rq.enqueue(spec("a", max_attempts=MAX_ATTEMPTS_UNSET))
    lapse(rq, reap=False)  # a worker of this deploy died holding it (its lease told nothing)
    assert worker.drain(["q"], 5).leased == 1 and ran == [1, 2]  # reclaimed inline, run once more
    rq.enqueue(spec("b", max_attempts=MAX_ATTEMPTS_UNSET))
    assert lapse(rq, "b", reap=True) == 1
    assert lapse(rq, "b", reap=True) == 2
    assert where(redis_client, "q", "b") == {"dead"}  # two lapses, as the policy says (5 before)
    redeployed = Worker()
    redeployed.register("q", handle)  # no policy now
    redeployed.bind(queue=rq, store=store, options=WorkerOptions(lease_ms=5_000),
                    telemetry=Telemetry(MemoryMetrics()), worker_id="policy-test-2").drain(["q"], 1)
    assert redis_client.hget(K.config, "policy_attempts") is None
