"""Per-job work a batch does once (issue 30), by the key state it leaves and by Redis's own count of
the commands a script ran (INFO commandstats counts a script's redis.call): push.lua leaves one wake
token per batch, and one more per further worker waiting (not one per job); expired leases going
back to ready take their seqs with one take_seq and enter ready with one ZADD. That one push wakes
every waiting worker: tests/backends/test_worker_linger.py."""

from __future__ import annotations

import time

import pytest
import redis

from sluice.backends.redis.engine import RedisQueue
from sluice.backends.redis.keys import QueueKeys
from tests.backends.test_engine_support import band, job, members, score, spec, where

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]
K = QueueKeys("q")
TOPIC = "sluice.jobs"


def push(rq: RedisQueue, *offsets: int) -> int:
    return rq.push("q", TOPIC, 0, 1, [(o, spec(f"j{o}")) for o in offsets]).pushed


def calls(client: redis.Redis, command: str) -> int:
    """How many times the server ran ``command`` so far."""
    return int(client.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def test_reap_takes_one_seq_and_one_zadd_for_every_lapsed_lease_going_back(
        rq: RedisQueue, redis_client: redis.Redis) -> None:
    rq.enqueue_many([spec(f"j{i}", max_attempts=1 if i == 0 else 3) for i in range(5)])
    rq.lease("q", 5, 20)  # j0 .. j4, one deadline: reclaimed in id order
    rq.enqueue(spec("waiting"))
    seq_before = int(redis_client.get(K.seq) or 0)
    time.sleep(0.04)
    sets, zadds = calls(redis_client, "set"), calls(redis_client, "zadd")
    assert rq.reap("q") == 5
    assert calls(redis_client, "set") - sets == 1  # the seq, once for the four going back
    assert calls(redis_client, "zadd") - zadds == 3  # ready, dead and settle: once each
    # j0 was out of attempts: dead, with its settle entry; the others at the front, FIFO, their
    # seqs consecutive, and the counter moved on by exactly four past TIME or its old value.
    assert where(redis_client, "q", "j0") == {"dead"}
    assert members(redis_client, "q", "ready") == ["j1", "j2", "j3", "j4", "waiting"]
    seq = int(redis_client.get(K.seq))
    assert seq > seq_before + 4
    fronts = [score(redis_client, "q", "ready", f"j{i}") or 0 for i in range(1, 5)]
    assert [int(x - fronts[0]) for x in fronts] == [0, 1, 2, 3]
    assert {band(redis_client, "q", x, reclaimed=True) for x in fronts} == {
        band(redis_client, "q", score(redis_client, "q", "ready", "waiting") or 0)}
    assert [job(redis_client, "q", f"j{i}")["a"] for i in range(5)] == ["1"] * 5
    assert [j.job_id for j in rq.lease("q", 5, 1_000)] == ["j1", "j2", "j3", "j4", "waiting"]


def test_reap_of_grouped_and_ungrouped_lapsed_leases_keeps_each_in_its_place(
        rq: RedisQueue, redis_client: redis.Redis) -> None:
    rq.enqueue_many([spec("a1", group="ga"), spec("u1"), spec("b1", group="gb"), spec("u2")])
    rq.lease("q", 4, 20)
    time.sleep(0.04)
    assert rq.reap("q") == 4
    assert members(redis_client, "q", "ready") == ["u1", "u2"]
    assert redis_client.zrange(K.group("ga"), 0, -1) == ["a1"]
    assert redis_client.zrange(K.group("gb"), 0, -1) == ["b1"]
    assert redis_client.hget(K.groups, "#ready") == "2"
    assert sorted(j.job_id for j in rq.lease("q", 4, 1_000)) == ["a1", "b1", "u1", "u2"]


def test_push_leaves_one_wake_token_per_batch_when_nobody_waits(rq: RedisQueue,
                                                               redis_client: redis.Redis) -> None:
    """Issue 30: a token per batch, not per job (a token per job only left stale ones behind)."""
    assert push(rq, 0, 1, 2) == 3
    assert redis_client.llen(K.wake) == 1
    assert 0 < redis_client.pttl(K.wake) <= 5_000
    assert push(rq, 0, 1, 2) == 0  # a replay pushes nothing and wakes nobody
    assert redis_client.llen(K.wake) == 1
    assert push(rq, *range(3, 40)) == 37
    assert redis_client.llen(K.wake) == 2
    for o in range(40, 60):
        push(rq, o)
    assert redis_client.llen(K.wake) == 16  # at most 16 kept


def test_push_wakes_a_waiting_worker_per_job_those_that_began_waiting_last_first(
        rq: RedisQueue, redis_client: redis.Redis) -> None:
    """Each waiting worker gets a token in its own list: a batch wakes as many workers waiting now
    as it has jobs (at most 16), those whose wait began last first (issue 28: a worker never woken
    is not needed, and leaves at its linger's end); a worker whose wait is over is not counted,
    and the shared list gets no token while someone waits."""
    rq.idle("q", "gone", 1)
    for w in range(3):
        rq.idle("q", f"w{w}", 5_000 + w)  # w2 began waiting last: its deadline is the latest
    time.sleep(0.01)

    def woken() -> list[str]:
        found = {w: redis_client.llen(K.wake_of(w)) for w in ["gone", *(f"w{n}" for n in range(20))]}
        assert set(found.values()) <= {0, 1}  # one token each
        return sorted(w for w, n in found.items() if n)

    assert push(rq, *range(10)) == 10
    assert woken() == ["w0", "w1", "w2"] and redis_client.llen(K.wake) == 0
    assert 0 < redis_client.pttl(K.wake_of("w0")) <= 5_000
    assert push(rq, 10) == 1  # one job: the worker that began waiting last, one token kept
    assert woken() == ["w0", "w1", "w2"] and redis_client.llen(K.wake_of("w2")) == 1
    for w in range(3):
        redis_client.delete(K.wake_of(f"w{w}"))
    assert push(rq, 11) == 1
    assert woken() == ["w2"]
    redis_client.delete(K.wake_of("w2"))
    assert push(rq, 12, 13) == 2  # fewer jobs than waiters: a token per job
    assert woken() == ["w1", "w2"]
    for w in range(3):
        redis_client.delete(K.wake_of(f"w{w}"))
    for w in range(3, 20):
        rq.idle("q", f"w{w}", 5_000 + w)
    assert push(rq, *range(14, 54)) == 40
    assert woken() == sorted(f"w{w}" for w in range(4, 20))  # 16, the last to begin waiting
    for w in range(20):
        rq.idle("q", f"w{w}", 0)
    assert push(rq, 54) == 1  # nobody waits: the shared list's token, for the next to wait
    assert redis_client.llen(K.wake) == 1
    assert rq.wait_for_work("q", 100, "w0") is True and rq.wait_for_work("q", 100, "w0") is False
