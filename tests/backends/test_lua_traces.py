"""A job's traceparent through Redis (issue 31, item 6), on a real redis-server, by the key state the
scripts leave: push.lua and enqueue.lua store it as the job hash's ``tp`` (counted in its ``sz``),
lease.lua hands it to the worker, a dead job's spec keeps it for its redrive, and a malformed one
is refused before anything is written."""

from __future__ import annotations

import json

import pytest
import redis

from sluice.backends.redis.engine import RedisQueue
from sluice.backends.redis.keys import QueueKeys
from sluice.backends.redis.scripts import push_argv, push_keys, source
from sluice.core.limits import job_bytes
from sluice.core.models import DecodedJob
from tests.backends.test_engine_support import job, snapshot, spec
from tests.backends.test_lua_budget import META, TOPIC, hashes_sum, used

pytestmark = pytest.mark.integration
K = QueueKeys("q")
TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def traced(offset: int, trace: str | None = TP, group: str | None = None) -> tuple[int, DecodedJob]:
    return offset, DecodedJob(f"j{offset}", "q", '"p"', 0, 5, 30_000, 0, 1_700_000_000_000, group, trace)


def test_a_pushed_traceparent_is_the_jobs_tp_counted_in_its_size_and_leased_with_it(
        rq: RedisQueue, redis_client: redis.Redis) -> None:
    rq.push_many(TOPIC, [("q", 0, 1, [traced(0), traced(1, None), traced(2, group="tenant-a")])])
    assert job(redis_client, "q", "j0")["tp"] == TP
    assert "tp" not in job(redis_client, "q", "j1")  # untraced: no field at all
    assert job(redis_client, "q", "j2")["tp"] == TP and job(redis_client, "q", "j2")["grp"] == "tenant-a"
    assert int(job(redis_client, "q", "j0")["sz"]) == job_bytes("j0", '"p"', META, len(K.job_prefix), TP)
    assert int(job(redis_client, "q", "j1")["sz"]) == job_bytes("j1", '"p"', META, len(K.job_prefix))
    assert used(redis_client) == hashes_sum(redis_client)
    leased = {j.job_id: j for j in rq.lease("q", 10, 1_000, "w")}
    assert leased["j0"].traceparent == TP and leased["j0"].group is None
    assert leased["j1"].traceparent is None
    assert (leased["j2"].traceparent, leased["j2"].group) == (TP, "tenant-a")


def test_enqueue_lua_stores_a_specs_traceparent_and_a_dead_jobs_spec_keeps_it(
        rq: RedisQueue, redis_client: redis.Redis) -> None:
    rq.enqueue(spec("a", traceparent=TP, max_attempts=1))
    assert job(redis_client, "q", "a")["tp"] == TP
    [leased] = rq.lease("q", 1, 1_000, "w")
    assert leased.traceparent == TP
    rq.fail("q", "a", leased.lease_token, "boom", permanent=True)
    assert rq.dead_spec("q", "a").traceparent == TP  # a redrive's record stays in the job's trace


@pytest.mark.parametrize("bad", [TP.upper(), TP + "-00", "01" + TP[2:], TP[:-1], "x" * 55, "00-" + "g" * 52])
def test_push_lua_refuses_a_malformed_traceparent_before_writing(redis_client: redis.Redis, bad: str) -> None:
    script = redis_client.register_script(source("push.lua"))
    good = ["0", "ok", '"p"', "0,5,30000,0", "0", "0", "", TP]
    before = snapshot(redis_client)
    with pytest.raises(redis.ResponseError, match="INVALID_INPUT traceparent of j"):
        script(keys=push_keys(K, TOPIC, 0),
               args=push_argv(1, [*good, "1", "j", '"p"', "0,5,30000,0", "0", "0", "", bad]))
    assert snapshot(redis_client) == before  # the first, valid record was not written either
    script(keys=push_keys(K, TOPIC, 0), args=push_argv(1, good))
    assert job(redis_client, "q", "ok")["tp"] == TP
    assert json.loads(job(redis_client, "q", "ok")["p"]) == "p"
