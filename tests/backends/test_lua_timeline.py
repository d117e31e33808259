"""timeline.lua (issue 32 item 2): a job's timeline is a capped, expiring list; bad input writes
nothing; the operator reads it back with one LRANGE (``RedisTimeline``)."""

from __future__ import annotations

import pytest
import redis

from sluice.backends.redis.connection import RedisConnection
from sluice.backends.redis.keys import QueueKeys
from sluice.backends.redis.timeline import RedisTimeline
from sluice.core import timeline
from sluice.core.errors import InvalidInput

pytestmark = pytest.mark.integration
K = QueueKeys("q")
KEY = K.timeline("j1")


@pytest.fixture
def conn(redis_url: str) -> RedisConnection:
    return RedisConnection.from_url(redis_url)


def test_steps_are_appended_in_order_and_the_list_expires(conn: RedisConnection,
                                                          redis_client: redis.Redis) -> None:
    log = RedisTimeline(conn, ttl_ms=60_000)
    log.append("q", "j1", [timeline.encode("lease", 1000, lease=7, attempt=1, deadline_ms=11_000),
                           timeline.encode("grant", 1001, worker="A", token=33)])
    log.append("q", "j1", [timeline.encode("write", 1500, token=33, outcome="rejected", current=34)])
    assert redis_client.llen(KEY) == 3
    assert 0 < redis_client.pttl(KEY) <= 60_000
    steps = log.read("q", "j1")
    assert [s["kind"] for s in steps] == ["lease", "grant", "write"]
    assert steps[1] == {"at_ms": 1001, "kind": "grant", "worker": "A", "token": 33}
    assert steps[2]["outcome"] == "rejected" and steps[2]["current"] == 34
    assert log.read("q", "other") == []


def test_the_list_keeps_only_its_last_cap_steps(conn: RedisConnection, redis_client: redis.Redis) -> None:
    log = RedisTimeline(conn, ttl_ms=60_000, cap=5)
    for i in range(3):
        log.append("q", "j1", [timeline.encode("renew", 100 * i + j) for j in range(4)])
    assert redis_client.llen(KEY) == 5
    assert [s["at_ms"] for s in log.read("q", "j1")] == [103, 200, 201, 202, 203]


@pytest.mark.parametrize("cap, ttl, entries, what", [
    (0, 60_000, ["x"], "cap"), (201, 60_000, ["x"], "cap"), (5, 999, ["x"], "ttl_ms"),
    (5, 60_000, [], "entries"), (5, 60_000, ["x"] * 17, "entries"), (5, 60_000, [""], "entry"),
    (5, 60_000, ["x" * 513], "entry"), (5, 60_000, ["ok", "x" * 513], "entry"),
])
def test_bad_input_writes_nothing(conn: RedisConnection, redis_client: redis.Redis, cap: int, ttl: int,
                                  entries: list[str], what: str) -> None:
    redis_client.rpush(KEY, "before")
    redis_client.pexpire(KEY, 50_000)
    with pytest.raises(InvalidInput, match=what):
        conn.scripts.timeline(K, "j1", cap, ttl, entries)
    assert redis_client.lrange(KEY, 0, -1) == ["before"] and redis_client.pttl(KEY) <= 50_000


def test_a_foreign_or_cut_entry_is_skipped_when_read(conn: RedisConnection,
                                                     redis_client: redis.Redis) -> None:
    redis_client.rpush(KEY, "not json", '{"k":"nope","t":1}', '{"k":"ack","t":"1"}', '[1]',
                       timeline.encode("ack", 5, outcome="ok"))
    steps = RedisTimeline(conn, ttl_ms=60_000).read("q", "j1")
    assert steps == [{"at_ms": 5, "kind": "ack", "outcome": "ok"}]


def test_a_job_of_another_queue_has_no_timeline_under_this_queues_route(conn: RedisConnection,
                                                                       redis_client: redis.Redis) -> None:
    """Hostile review (session 35): an operator whose IAM policy names queue ``a`` asks for a job of
    queue ``b`` through ``a``'s route (``GET .../queues/a/jobs/<b's id>/timeline``): the read takes
    ``a``'s key, so nothing of ``b``; a team that pushes steps under ``b``'s id into its own queue's
    key forges nothing on ``b``'s."""
    log = RedisTimeline(conn, ttl_ms=60_000)
    log.append("b", "jb", [timeline.encode("grant", 1, worker="B-worker", token=9)])
    assert log.read("a", "jb") == []
    redis_client.rpush(QueueKeys("a").timeline("jb"), timeline.encode("grant", 2, worker="forged", token=1))
    assert [s["worker"] for s in log.read("b", "jb")] == ["B-worker"]
    assert [s["worker"] for s in log.read("a", "jb")] == ["forged"]  # under a's route only


def test_a_list_filled_by_hand_is_read_only_as_far_as_the_cap(conn: RedisConnection,
                                                              redis_client: redis.Redis) -> None:
    """Hostile-team review (session 35): a team's Redis user may push onto its own job's timeline
    list; the operator's read took all of it into the operator function. It reads the last ``cap``
    steps, what timeline.lua keeps, of a list no larger than timeline.lua writes (200 steps)."""
    redis_client.rpush(KEY, *(timeline.encode("renew", t, lease=1) for t in range(200)))
    steps = RedisTimeline(conn, ttl_ms=60_000).read("q", "j1")
    assert [s["at_ms"] for s in steps] == list(range(200 - timeline.CAP, 200))


@pytest.mark.parametrize("filled", ["20,000 small steps", "one 10 MB step last"])
def test_a_list_larger_than_timeline_lua_writes_is_refused_unread(
        conn: RedisConnection, redis_client: redis.Redis, filled: str) -> None:
    """Session 39: a step of 10 MB pushed last made each operator read of the timeline copy it out
    of the shared Redis (the count bound cannot see one entry's size). A list larger than
    timeline.lua ever writes is refused by its size (MEMORY USAGE), with nothing read."""
    if filled.startswith("20,000"):
        for start in range(0, 20_000, 5_000):
            steps = (timeline.encode("renew", t, lease=1) for t in range(start, start + 5_000))
            redis_client.rpush(KEY, *steps)
    else:
        redis_client.rpush(KEY, timeline.encode("renew", 1, lease=1), "x" * 10_000_000)
    redis_client.config_resetstat()
    with pytest.raises(InvalidInput, match=r"not read: job j1's timeline holds \d+ bytes .*written by hand"):
        RedisTimeline(conn, ttl_ms=60_000).read("q", "j1")
    assert "cmdstat_lrange" not in redis_client.info("commandstats")
