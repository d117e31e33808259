"""Per-job work a batch does once (issue 30): expired leases going back to ready take their seqs with
one take_seq and enter ready with one ZADD, by the key state they leave and by Redis's own count
of the commands the script ran (INFO commandstats counts a script's redis.call)."""

from __future__ import annotations

import time

import pytest
import redis

from sluice.backends.redis.engine import RedisQueue
from sluice.backends.redis.keys import QueueKeys
from tests.backends.test_engine_support import band, job, members, score, spec, where

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]
K = QueueKeys("q")


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
