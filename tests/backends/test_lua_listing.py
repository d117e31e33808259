"""Issue 32, item 1 on a real Redis: the operator's listing of a queue's jobs by state
(``RedisAdmin.list_jobs``: ZRANGE BYSCORE REV and one pipelined HMGET, no script) and the capped
list of recently finished jobs that ack.lua keeps (``keys.recent``), by the key state it leaves."""

from __future__ import annotations

import pytest
import redis

from sluice.backends.redis.engine import RedisQueue
from sluice.backends.redis.keys import QueueKeys
from sluice.core.errors import InvalidInput
from sluice.core.listing import RECENT_KEPT
from tests.backends.test_engine_support import leased, redis_now_ms, spec

pytestmark = pytest.mark.integration
K = QueueKeys("q")


def ids(rq: RedisQueue, state: str, **kw: object) -> list[str]:
    return [j.job_id for j in rq.list_jobs("q", state, **kw).jobs]  # type: ignore[arg-type]


def test_each_state_lists_its_own_jobs_newest_first_with_their_fields(rq: RedisQueue,
                                                                      redis_client: redis.Redis) -> None:
    now = redis_now_ms(redis_client)
    for i in range(5):
        rq.enqueue(spec(f"r{i}", priority=5, payload={"n": i}))
    rq.enqueue(spec("d1", run_at_ms=now + 60_000))
    rq.enqueue(spec("d2", run_at_ms=now + 120_000))
    held = leased(rq, "l0", priority=9)  # leased first: the highest priority
    assert ids(rq, "ready") == ["r4", "r3", "r2", "r1", "r0"]
    assert ids(rq, "delayed") == ["d2", "d1"]
    assert ids(rq, "leased") == ["l0"]
    page = rq.list_jobs("q", "ready", limit=2)
    top = page.jobs[0]
    assert (top.payload, top.priority, top.attempts, top.at_ms) == ({"n": 4}, 5, 0, None)
    assert top.enqueued_at_ms is not None and page.next is not None
    rest = rq.list_jobs("q", "ready", limit=10, cursor=page.next)
    assert [j.job_id for j in rest.jobs] == ["r2", "r1", "r0"] and rest.next is None
    assert rq.list_jobs("q", "delayed").jobs[0].at_ms == now + 120_000
    lease = rq.list_jobs("q", "leased").jobs[0]
    assert lease.priority == 9 and lease.at_ms is not None and lease.at_ms > now
    rq.fail("q", "l0", held.lease_token, "boom", permanent=True)
    [dead] = rq.list_jobs("q", "dead").jobs
    assert (dead.job_id, dead.last_error, dead.at_ms is not None) == ("l0", "boom", True)
    assert ids(rq, "ready", prefix="r3") == ["r3"] and ids(rq, "ready", prefix="x") == []


def test_ack_keeps_the_last_finished_jobs_newest_first_and_trims_them(rq: RedisQueue,
                                                                      redis_client: redis.Redis) -> None:
    for name in ("a", "b", "c"):
        job = leased(rq, name)
        rq.ack("q", name, job.lease_token)
    recent = redis_client.zrange(K.recent, 0, -1, withscores=True)
    assert sorted(m for m, _ in recent) == ["a", "b", "c"]
    assert all(abs(s - redis_now_ms(redis_client)) < 60_000 for _, s in recent)
    page = rq.list_jobs("q", "finished")
    assert {j.job_id for j in page.jobs} == {"a", "b", "c"} and all(j.payload is None for j in page.jobs)
    # the zset never holds more than RECENT_KEPT: fill it past the cap, one more ack trims it
    redis_client.zadd(K.recent, {f"old-{i}": i for i in range(RECENT_KEPT + 50)})
    job = leased(rq, "d")
    rq.ack("q", "d", job.lease_token)
    assert redis_client.zcard(K.recent) == RECENT_KEPT
    assert redis_client.zscore(K.recent, "d") is not None and redis_client.zscore(K.recent, "old-0") is None
    assert ids(rq, "finished", limit=1) == ["d"]


def test_a_refused_ack_records_nothing_and_a_bad_kept_count_writes_nothing(rq: RedisQueue,
                                                                         redis_client: redis.Redis) -> None:
    job = leased(rq, "a")
    errors = rq.ack_many("q", [("a", job.lease_token + 7)])
    assert errors[0] is not None and redis_client.exists(K.recent) == 0
    script = rq.scripts
    with pytest.raises(InvalidInput):
        script._run("ack.lua", [K.job_prefix, K.leased, K.tokens, K.finished, K.used, *K.group_keys,
                                K.recent], [f"a {job.lease_token}", 0])
    assert redis_client.zscore(K.leased, "a") is not None and redis_client.exists(K.recent) == 0


def test_ties_on_a_score_page_through_without_a_repeat_or_a_gap(rq: RedisQueue,
                                                                redis_client: redis.Redis) -> None:
    redis_client.zadd(K.dead, {f"t{i:02d}": 1_000 for i in range(12)} | {"z": 2_000, "y": 500})
    seen, cursor = [], None
    while True:
        page = rq.list_jobs("q", "dead", limit=5, cursor=cursor)
        seen += [j.job_id for j in page.jobs]
        if page.next is None:
            break
        cursor = page.next
    assert seen == ["z", *[f"t{i:02d}" for i in reversed(range(12))], "y"]
