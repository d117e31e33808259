"""reap.lua (issue 32's closing review): while timelines are on, the relay's reap of a lapsed lease
is a step on the job's timeline, with the lease token that lapsed; off, nothing is read or written
for it. Checked on a real redis-server by the key state each reap leaves."""

from __future__ import annotations

import time

import pytest
import redis

from sluice.backends.redis.connection import RedisConnection
from sluice.backends.redis.engine import RedisQueue
from sluice.backends.redis.keys import QueueKeys
from sluice.backends.redis.timeline import RedisTimeline
from sluice.core import timeline
from sluice.core.errors import InvalidInput
from tests.backends.test_engine_support import redis_now_ms, spec, where

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]
K = QueueKeys("q")
LAPSE_MS = 20
TTL_MS = 60_000


@pytest.fixture
def rq(redis_url: str) -> RedisQueue:
    return RedisQueue.from_url(redis_url)


def lapsed(rq: RedisQueue, *job_ids: str, **kw: object) -> int:
    """The jobs (default "a") enqueued, leased for LAPSE_MS in one call and left to lapse, as a frozen
    or dead worker's: the first one's lease token."""
    for job_id in job_ids or ("a",):
        rq.enqueue(spec(job_id, **kw))  # type: ignore[arg-type]
    leased = rq.lease("q", len(job_ids or "a"), LAPSE_MS, "frozen")
    time.sleep(LAPSE_MS * 3 / 1000)
    return leased[0].lease_token


@pytest.mark.parametrize(("max_attempts", "went", "now_in"), [(5, "ready", {"ready"}), (1, "dead", {"dead"})])
def test_a_reaped_lease_is_a_step_on_the_jobs_timeline_with_the_lease_token_that_lapsed(
        rq: RedisQueue, redis_client: redis.Redis, max_attempts: int, went: str, now_in: set[str]) -> None:
    token = lapsed(rq, max_attempts=max_attempts)
    before = redis_now_ms(redis_client)
    assert rq.reap("q", 100, TTL_MS) == 1
    assert where(redis_client, "q", "a") == now_in
    [raw] = redis_client.lrange(K.timeline("a"), 0, -1)
    step = timeline.decode(raw)
    assert step is not None
    at = step.pop("at_ms")
    assert before <= at <= redis_now_ms(redis_client)  # Redis TIME: the reap is the relay's, not a worker's
    assert step == {"kind": "reap", "worker": "relay", "lease": token, "attempt": 1, "outcome": went}
    assert 0 < redis_client.pttl(K.timeline("a")) <= TTL_MS
    # The operator route reads it as it reads the workers' steps.
    assert RedisTimeline(rq.conn, ttl_ms=TTL_MS).read("q", "a")[0]["kind"] == "reap"


def test_a_cancelled_jobs_reap_says_so(rq: RedisQueue, redis_client: redis.Redis) -> None:
    token = lapsed(rq)
    assert rq.cancel("q", "a") == "requested"
    assert rq.reap("q", 100, TTL_MS) == 1
    step = timeline.decode(redis_client.lrange(K.timeline("a"), 0, -1)[0])
    assert step is not None and (step["lease"], step["outcome"]) == (token, "cancelled")


def test_the_step_follows_the_workers_and_the_list_stays_capped(rq: RedisQueue,
                                                                redis_client: redis.Redis) -> None:
    lapsed(rq)
    key = K.timeline("a")
    redis_client.rpush(key, *[timeline.encode("renew", i) for i in range(timeline.CAP)])
    assert rq.reap("q", 100, TTL_MS) == 1
    kept = redis_client.lrange(key, 0, -1)
    assert len(kept) == timeline.CAP
    assert timeline.decode(kept[0]) == {"at_ms": 1, "kind": "renew"}  # the oldest went
    assert (timeline.decode(kept[-1]) or {})["kind"] == "reap"


def test_with_timelines_off_a_reap_writes_no_timeline(rq: RedisQueue, redis_client: redis.Redis) -> None:
    lapsed(rq, "a", "b")
    redis_client.rpush(K.timeline("b"), timeline.encode("lease", 1, lease=1))
    assert rq.reap("q", 100) == 2  # the relay's default: JobTimelineSeconds 0
    assert redis_client.exists(K.timeline("a")) == 0
    assert redis_client.lrange(K.timeline("b"), 0, -1) == [timeline.encode("lease", 1, lease=1)]
    assert redis_client.pttl(K.timeline("b")) == -1


@pytest.mark.parametrize(("ttl", "cap", "what"), [
    (999, 64, "timeline_ttl_ms"), (604_800_001, 64, "timeline_ttl_ms"), ("1e4", 64, "timeline_ttl_ms"),
    (TTL_MS, 0, "timeline_cap"), (TTL_MS, 201, "timeline_cap"),
])
def test_a_bad_timeline_argument_writes_nothing(rq: RedisQueue, redis_client: redis.Redis, ttl: object,
                                               cap: int, what: str) -> None:
    lapsed(rq)
    conn: RedisConnection = rq.conn
    with pytest.raises(InvalidInput, match=what):
        conn.scripts.reap(K, 100, ttl, cap)  # type: ignore[arg-type]
    assert where(redis_client, "q", "a") == {"leased", "tokens"}  # not reclaimed
    assert redis_client.exists(K.timeline("a")) == 0


def test_the_relays_engine_writes_the_step_only_with_its_timeline_ttl(redis_url: str, rq: RedisQueue,
                                                                      redis_client: redis.Redis) -> None:
    """What the relay's maintenance calls (``RelayEngine.reap``), built as the relay's wiring builds
    it from SLUICE_TIMELINE_TTL_S (``RedisRelayEngine.from_settings``)."""
    from sluice.backends.redis.relay_engine import RedisRelayEngine
    from sluice.core.config import Settings

    lapsed(rq, "a", "b")
    off = RedisRelayEngine.from_settings(Settings(redis_url=redis_url, timeline_ttl_s=0))
    assert off.reap("q", 1) == 1
    on = RedisRelayEngine.from_settings(Settings(redis_url=redis_url, timeline_ttl_s=600))
    assert on.reap("q", 1) == 1
    assert sorted(j for j in "ab" if redis_client.exists(K.timeline(j))) == ["b"]
    assert 0 < redis_client.pttl(K.timeline("b")) <= 600_000


def test_a_workers_lease_that_reclaims_a_lapsed_lease_writes_no_step(rq: RedisQueue,
                                                                     redis_client: redis.Redis) -> None:
    """lease.lua reclaims lapsed leases inline too (the hot path): it passes no timeline, so it reads
    and writes none; the next lease's lane shows the takeover."""
    lapsed(rq)
    [again] = rq.lease("q", 1, 30_000, "B")
    assert again.job_id == "a" and again.attempt == 2
    assert redis_client.exists(K.timeline("a")) == 0
