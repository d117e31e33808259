"""lease.lua's wait count and sample.lua (issue 32's closing review) on a real redis-server, by the
keys they leave: a first lease counts its enqueue-to-start wait in the queue's waits hash (a retry
does not), a sample takes and empties it into a capped, expiring list with the depths, a second
sample within the gap writes nothing, bad input writes nothing, and ``RedisDepthLog`` reads the hour
back for the operator route."""

from __future__ import annotations

import time

import pytest
import redis

from sluice.backends.redis.depth import RedisDepthLog
from sluice.backends.redis.engine import RedisQueue
from sluice.backends.redis.keys import QueueKeys
from sluice.core import depth
from sluice.core.errors import InvalidInput
from tests.backends.test_engine_support import redis_now_ms, spec

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]
K = QueueKeys("q")


@pytest.fixture
def rq(redis_url: str) -> RedisQueue:
    return RedisQueue.from_url(redis_url)


def waits(client: redis.Redis) -> dict[int, int]:
    return {int(b): int(n) for b, n in client.hgetall(K.waits).items()}


def test_a_first_lease_counts_its_wait_since_the_enqueue_and_a_retry_does_not(
        rq: RedisQueue, redis_client: redis.Redis) -> None:
    now = redis_now_ms(redis_client)
    rq.enqueue(spec("old", enqueued_at_ms=now - 5_000))
    rq.enqueue(spec("new", enqueued_at_ms=now - 100))
    rq.enqueue(spec("also", enqueued_at_ms=now - 110))
    assert redis_client.exists(K.waits) == 0  # enqueueing counts nothing
    leased = rq.lease("q", 3, 30_000, "w")
    counted = waits(redis_client)
    assert sum(counted.values()) == 3
    # each within its bucket: the lease's TIME is a few ms after ``now``
    assert counted.get(depth.bucket(5_000), 0) + counted.get(depth.bucket(5_000) + 1, 0) == 1
    assert sum(n for b, n in counted.items() if depth.bucket_ms(b) < 200) == 2
    old = next(j for j in leased if j.job_id == "old")
    assert rq.fail("q", old.job_id, old.lease_token, "boom") == "retry"  # its next lease is a retry
    redis_client.delete(K.waits)
    assert [j.job_id for j in rq.lease("q", 1, 30_000, "w")] == ["old"]
    assert redis_client.exists(K.waits) == 0


def test_a_sample_takes_the_waits_with_the_depths_and_the_list_is_capped_and_expires(
        rq: RedisQueue, redis_client: redis.Redis) -> None:
    redis_client.hset(K.waits, mapping={"26": 4, "53": 1})
    before = redis_now_ms(redis_client)
    assert rq.conn.scripts.sample(K, [7, 1, 2, 3], 3, 60_000, 0)
    assert redis_client.exists(K.waits) == 0  # each start counted in one sample only
    [stored] = redis_client.lrange(K.depth, 0, -1)
    at, _, rest = stored.partition(",")
    assert before <= int(at) <= redis_now_ms(redis_client)
    head, _, tail = rest.partition(";")
    assert head == "7,1,2,3" and sorted(tail.split(",")) == ["26:4", "53:1"]
    assert 0 < redis_client.pttl(K.depth) <= 60_000
    for n in range(4):
        assert rq.conn.scripts.sample(K, [n, 0, 0, 0], 3, 60_000, 0)
    kept = redis_client.lrange(K.depth, 0, -1)
    assert [s.split(",")[1] for s in kept] == ["1", "2", "3"]  # the cap keeps the newest
    assert all(";" not in s for s in kept)  # no start since: no histogram


def test_a_sample_within_the_gap_writes_nothing_and_leaves_the_waits(rq: RedisQueue,
                                                                     redis_client: redis.Redis) -> None:
    assert rq.conn.scripts.sample(K, [1, 0, 0, 0], 10, 60_000, 60_000)
    redis_client.hset(K.waits, "10", 2)
    assert not rq.conn.scripts.sample(K, [2, 0, 0, 0], 10, 60_000, 60_000)  # a second relay's, too soon
    assert redis_client.llen(K.depth) == 1 and waits(redis_client) == {10: 2}


@pytest.mark.parametrize(("counts", "cap", "ttl", "gap", "what"), [
    ([-1, 0, 0, 0], 10, 60_000, 0, "count"), (["1e3", 0, 0, 0], 10, 60_000, 0, "count"),
    ([0, 0, 0, 2**53], 10, 60_000, 0, "count"), ([0, 0, 0, 0], 0, 60_000, 0, "cap"),
    ([0, 0, 0, 0], 10_001, 60_000, 0, "cap"), ([0, 0, 0, 0], 10, 999, 0, "ttl_ms"),
    ([0, 0, 0, 0], 10, 60_000, -1, "gap_ms"), ([0, 0, 0, 0], 10, 60_000, 3_600_001, "gap_ms"),
])
def test_bad_input_writes_nothing(rq: RedisQueue, redis_client: redis.Redis, counts: list[object], cap: int,
                                  ttl: int, gap: int, what: str) -> None:
    redis_client.hset(K.waits, "10", 2)
    with pytest.raises(InvalidInput, match=what):
        rq.conn.scripts.sample(K, counts, cap, ttl, gap)  # type: ignore[arg-type]
    assert redis_client.exists(K.depth) == 0 and waits(redis_client) == {10: 2}


def test_the_depth_log_records_a_sample_and_reads_the_hour_back(rq: RedisQueue,
                                                                redis_client: redis.Redis) -> None:
    now = redis_now_ms(redis_client)
    for i, ago in enumerate((200, 300, 5_000)):
        rq.enqueue(spec(f"j{i}", enqueued_at_ms=now - ago))
    rq.lease("q", 3, 30_000, "w")
    redis_client.rpush(K.depth, depth.encode(now - depth.HOUR_MS - 60_000, 9, 9, 9, 9))  # gone from the hour
    redis_client.rpush(K.depth, "<script>")  # not a sample: skipped
    log = RedisDepthLog(rq.conn, gap_s=0)
    assert log.record("q", 0, 0, 3, 0)
    hour = log.read("q")
    assert [(s.ready, s.leased, s.started) for s in hour.samples] == [(0, 3, 3)]
    assert hour.started == 3 and hour.wait_p50_ms is not None and 150 <= hour.wait_p50_ms <= 400
    assert hour.wait_p99_ms is not None and 4_000 <= hour.wait_p99_ms <= 6_000
    assert RedisDepthLog(rq.conn).record("q", 1, 0, 0, 0) is False  # within the 10 s gap: a second relay's
    time.sleep(0.01)
    assert len(log.read("q").samples) == 1


def test_a_depth_list_filled_by_hand_is_read_only_as_far_as_samples_are_kept(
        rq: RedisQueue, redis_client: redis.Redis) -> None:
    """Hostile-team review (session 35): a team's Redis user may push onto its own queue's depth list;
    the operator's depth route read all of it. It reads the last SAMPLES_KEPT, what sample.lua keeps."""
    now = redis_now_ms(redis_client)
    n = depth.SAMPLES_KEPT + 5_000
    redis_client.rpush(K.depth, *(depth.encode(now - n + i, i, 0, 0, 0) for i in range(n)))
    hour = RedisDepthLog(rq.conn).read("q")
    assert [s.ready for s in hour.samples] == list(range(n - depth.SAMPLES_KEPT, n))
