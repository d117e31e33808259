"""Fair groups (issue 28, item 5) on a real redis-server: the key state the scripts leave.

A grouped job waits in its group's ready zset (``sluice:{q}:g:<group>``), the groups with a job
to lease take turns (``sluice:{q}:turns``), and ``sluice:{q}:groups`` counts each group's leased
jobs (``#ready``: the jobs waiting in groups). lease.lua serves the groups round-robin, each
within ``max_in_flight_per_group``; ack, fail, release, reap and cancel give a lease back to its
group's count and put the group back in turns.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

from sluice.backends.redis.engine import RedisQueue
from sluice.backends.redis.keys import QueueKeys
from sluice.backends.redis.scripts import source
from tests.backends.test_engine_support import BAND, FRONT, job, snapshot, spec

pytestmark = pytest.mark.integration
K = QueueKeys("q")
LEASE_MS = 30_000


def turns(client: redis.Redis) -> list[str]:
    """The rotation, in turn order; checked against the groups hash's marks of who is in it."""
    rota: list[str] = client.lrange(K.turns, 0, -1)
    assert len(set(rota)) == len(rota), rota  # each group at most once
    marked = sorted(k[1:] for k in client.hkeys(K.groups) if k.startswith(">"))
    assert marked == sorted(rota), (marked, rota)
    return rota


def counts(client: redis.Redis) -> dict[str, str]:
    """The groups hash's leased counts and #ready (checked against the groups' ready zsets). Counts
    are kept only while a per-group limit is set (#counted); then they are checked against the
    leased set, and without one there must be none."""
    state = client.hgetall(K.groups)
    waiting_jobs = sum(client.zcard(key) for key in client.scan_iter(K.group_prefix + "*"))
    assert int(state.get("#ready", 0)) == waiting_jobs, state
    shown = {k: v for k, v in state.items() if not k.startswith(">") and k != "#counted"}
    kept = {k: int(v) for k, v in shown.items() if not k.startswith("#")}
    if "#counted" in state:
        truth: dict[str, int] = {}
        for job_id in client.zrange(K.leased, 0, -1):
            group = client.hget(K.job(job_id), "grp")
            if group:
                truth[group] = truth.get(group, 0) + 1
        assert kept == truth, (kept, truth)
    else:
        assert kept == {}, state
    return shown


def as_kept(limit: int, shown: dict[str, str]) -> dict[str, str]:
    """``counts`` as it reads with per-group limit ``limit``: the leased counts only under a limit."""
    return shown if limit else {k: v for k, v in shown.items() if k.startswith("#")}


def set_limit(rq: RedisQueue, limit: int) -> None:
    if limit:
        rq.set_config("q", max_in_flight_per_group=limit)


LIMITS = pytest.mark.parametrize("limit", [0, 1000], ids=["no-limit", "limit"])


def waiting(client: redis.Redis, group: str) -> list[str]:
    return client.zrange(K.group(group), 0, -1)  # type: ignore[no-any-return]


def add(rq: RedisQueue, group: str | None, *ids: str, **kw: Any) -> None:
    rq.enqueue_many([spec(i, group=group, **kw) for i in ids])


def lease(rq: RedisQueue, n: int) -> list[str]:
    return [j.job_id for j in rq.lease("q", n, LEASE_MS)]


def expire(client: redis.Redis, job_id: str) -> None:
    """Make ``job_id``'s lease lapse now, without waiting for it."""
    client.zadd(K.leased, {job_id: 1}, xx=True)


# --- enqueue and push --------------------------------------------------------------------------

def test_a_grouped_job_waits_in_its_group_and_the_group_takes_turns(rq: RedisQueue,
                                                                   redis_client: redis.Redis) -> None:
    add(rq, "t1", "a", "b", priority=3)
    add(rq, None, "c")
    assert job(redis_client, "q", "a")["grp"] == "t1"
    assert "grp" not in job(redis_client, "q", "c")
    assert waiting(redis_client, "t1") == ["a", "b"]
    assert redis_client.zrange(K.ready, 0, -1) == ["c"]
    assert turns(redis_client) == ["t1"]
    assert counts(redis_client) == {"#ready": "2"}
    seq = int(redis_client.get(K.seq) or 0)  # c's: a and b took theirs in one step before it
    a, b = (int(redis_client.zscore(K.group("t1"), j) or 0) for j in "ab")
    assert b == a + 1 and (9 - 3) * BAND < b < (9 - 3) * BAND + seq  # ready's score, FIFO
    assert rq.stats("q").ready == 3  # grouped jobs count as ready
    assert rq.holds("q", "a") and rq.holds("q", "c") and not rq.holds("q", "zz")


def test_push_carries_the_group(rq: RedisQueue, redis_client: redis.Redis) -> None:
    later = redis_client.time()[0] * 1000 + 60_000
    rq.push("q", "jobs", 0, 1, [(0, spec("a", group="org:1")), (1, spec("b")), (2, spec("c", group="org:2")),
                                (3, spec("d", group="org:1", run_at_ms=later))])
    assert waiting(redis_client, "org:1") == ["a"] and waiting(redis_client, "org:2") == ["c"]
    assert redis_client.zrange(K.ready, 0, -1) == ["b"]
    assert redis_client.zrange(K.delayed, 0, -1) == ["d"] and job(redis_client, "q", "d")["grp"] == "org:1"
    assert turns(redis_client) == ["org:1", "org:2"]
    assert counts(redis_client) == {"#ready": "2"}


def test_a_queue_without_groups_touches_no_group_key(rq: RedisQueue, redis_client: redis.Redis) -> None:
    add(rq, None, "a", "b", "c")
    rq.push("q", "jobs", 0, 1, [(0, spec("d"))])
    jobs = rq.lease("q", 3, LEASE_MS)
    rq.ack_many("q", [(j.job_id, j.lease_token) for j in jobs[:2]])
    rq.fail("q", jobs[2].job_id, jobs[2].lease_token, "boom", retry_after_ms=0)
    [d] = rq.lease("q", 1, LEASE_MS)
    rq.release("q", d.job_id, d.lease_token)
    rq.cancel("q", "d")
    rq.reap("q")
    assert not [key for key in snapshot(redis_client) if ":g:" in key or key in (K.turns, K.groups)]


@pytest.mark.parametrize("group", ["", "bad group", "-x", "x" * 65, "a{b}"])
def test_enqueue_lua_refuses_a_bad_group_before_writing(redis_client: redis.Redis, group: str) -> None:
    script = redis_client.register_script(source("enqueue.lua"))
    keys = [K.job_prefix, K.ready, K.delayed, K.seq, *K.group_keys]
    good = ["ok", '"p"', "0,5,30000,0", "0", "", ""]  # no group, no traceparent
    script(keys=keys, args=[1, *good])
    before = snapshot(redis_client)
    alone = [1, "a", '"p"', "0,5,30000,0", "0", group, ""] if group else [1, "a", '"p"', "0,5,30000,0", "0"]
    for args in (alone,
                 [2, *good, "b", '"p"', "0,5,30000,0", "0", group or "a b", ""]):
        with pytest.raises(redis.ResponseError, match="INVALID_INPUT"):
            script(keys=keys, args=args)
    assert snapshot(redis_client) == before


# --- leasing round-robin -----------------------------------------------------------------------

def test_a_burst_of_one_group_does_not_starve_another_groups_single_job(rq: RedisQueue,
                                                                       redis_client: redis.Redis) -> None:
    """The issue's case, scaled: 20,000 ready jobs of one tenant, then one job of another. Without
    groups the single job would be leased after the 20,000; with them, within the first two leases
    (the rotation's cost does not depend on the burst's size)."""
    burst = 20_000
    for start in range(0, burst, 1000):
        rq.push("q", "jobs", 0, 1, [(i, spec(f"big-{i}", payload=i, group="big"))
                                    for i in range(start, start + 1000)])
    rq.push("q", "jobs", 0, 1, [(burst, spec("small-0", group="small"))])
    first_two = lease(rq, 1) + lease(rq, 1)
    assert "small-0" in first_two
    assert waiting(redis_client, "big") and len(waiting(redis_client, "big")) == burst - 1
    # A worker leasing batches gets it in its first batch.
    rq.push("q", "jobs", 0, 1, [(burst + 1, spec("small-1", group="small"))])
    assert "small-1" in lease(rq, 10)


@LIMITS
def test_groups_take_turns_one_job_each(rq: RedisQueue, redis_client: redis.Redis, limit: int) -> None:
    set_limit(rq, limit)
    add(rq, "a", "a1", "a2", "a3")
    add(rq, "b", "b1", "b2")
    add(rq, None, "d1", "d2")  # the default group takes turns too
    add(rq, "c", "c1")
    assert [lease(rq, 1)[0] for _ in range(8)] == ["a1", "b1", "c1", "d1", "a2", "b2", "d2", "a3"]
    assert turns(redis_client) == [] and counts(redis_client) == as_kept(limit, {"a": "3", "b": "2", "c": "1",
                                                                                "#ready": "0"})


@LIMITS
def test_a_batch_is_shared_round_robin(rq: RedisQueue, redis_client: redis.Redis, limit: int) -> None:
    set_limit(rq, limit)
    add(rq, "a", *[f"a{i}" for i in range(10)])
    add(rq, "b", "b1", "b2")
    add(rq, "c", *[f"c{i}" for i in range(10)])
    got = lease(rq, 8)
    assert sorted(got) == ["a0", "a1", "a2", "b1", "b2", "c0", "c1", "c2"]
    # b emptied and left; a and c were served and go to the end in their order
    assert turns(redis_client) == ["a", "c"]
    assert counts(redis_client) == as_kept(limit, {"a": "3", "b": "2", "c": "3", "#ready": "14"})


@LIMITS
def test_a_batch_of_one_job_a_group_drops_exactly_the_groups_it_emptied(rq: RedisQueue,
                                                                        redis_client: redis.Redis,
                                                                        limit: int) -> None:
    """lease.lua learns a group is empty from its pop and one EXISTS over the groups served in full,
    not from a count first: with some groups emptied and some not in one batch, turns must keep
    exactly the ones with a job left, in order, and then all of them drained."""
    set_limit(rq, limit)
    add(rq, "a", "a1", "a2")
    add(rq, "b", "b1")
    add(rq, "c", "c1", "c2")
    add(rq, "d", "d1")
    add(rq, "e", "e1", "e2", "e3")  # beyond the batch's heads
    assert sorted(lease(rq, 4)) == ["a1", "b1", "c1", "d1"]
    assert turns(redis_client) == ["e", "a", "c"]
    assert counts(redis_client) == as_kept(limit, {"a": "1", "b": "1", "c": "1", "d": "1", "#ready": "5"})
    assert sorted(lease(rq, 4)) == ["a2", "c2", "e1", "e2"]  # e takes what a and c cannot
    assert turns(redis_client) == ["e"]
    assert lease(rq, 4) == ["e3"] and turns(redis_client) == []
    assert counts(redis_client) == as_kept(limit, {"a": "2", "b": "1", "c": "2", "d": "1", "e": "3",
                                             "#ready": "0"})


def test_priority_orders_jobs_within_a_group(rq: RedisQueue) -> None:
    add(rq, "a", "low", priority=0)
    add(rq, "a", "high", priority=9)
    add(rq, "b", "b-low", priority=0)
    assert lease(rq, 1) == ["high"]  # a's turn: its highest priority first
    assert lease(rq, 1) == ["b-low"]  # then b's turn, whatever a holds
    assert lease(rq, 1) == ["low"]


def test_a_group_at_its_limit_is_skipped_until_a_lease_ends(rq: RedisQueue,
                                                            redis_client: redis.Redis) -> None:
    rq.set_config("q", max_in_flight_per_group=2)
    add(rq, "a", "a1", "a2", "a3", "a4")
    add(rq, "b", "b1")
    got = rq.lease("q", 10, LEASE_MS)
    assert sorted(j.job_id for j in got) == ["a1", "a2", "b1"]
    assert [j.group for j in got if j.job_id == "a1"] == ["a"]
    assert turns(redis_client) == [] and counts(redis_client) == {"a": "2", "b": "1", "#ready": "2"}
    assert lease(rq, 10) == []  # a is at its limit: nothing to lease
    a1 = next(j for j in got if j.job_id == "a1")
    rq.ack("q", "a1", a1.lease_token)
    assert turns(redis_client) == ["a"] and counts(redis_client)["a"] == "1"
    assert lease(rq, 10) == ["a3"]
    assert turns(redis_client) == []


def test_raising_the_limit_puts_groups_back_in_turns(rq: RedisQueue, redis_client: redis.Redis) -> None:
    rq.set_config("q", max_in_flight_per_group=1)
    add(rq, "a", "a1", "a2")
    assert lease(rq, 5) == ["a1"] and turns(redis_client) == []
    rq.set_config("q", max_in_flight_per_group=0)
    assert turns(redis_client) == ["a"]
    assert lease(rq, 5) == ["a2"]


def test_a_lowered_limit_drops_the_group_at_its_next_turn(rq: RedisQueue, redis_client: redis.Redis) -> None:
    add(rq, "a", "a1", "a2")
    add(rq, "b", "b1", "b2")
    assert lease(rq, 2) == ["a1", "b1"]
    rq.set_config("q", max_in_flight_per_group=1)
    assert lease(rq, 5) == []  # both at the new limit: dropped from turns
    assert turns(redis_client) == [] and counts(redis_client)["#ready"] == "2"


def test_max_in_flight_still_bounds_the_queue(rq: RedisQueue) -> None:
    rq.set_config("q", max_in_flight=3)
    add(rq, "a", "a1", "a2", "a3")
    add(rq, "b", "b1", "b2", "b3")
    assert len(lease(rq, 10)) == 3
    assert lease(rq, 10) == []


# --- the ends of a lease -----------------------------------------------------------------------

@LIMITS
def test_fail_gives_the_lease_back_and_a_retry_waits_in_its_group(rq: RedisQueue, redis_client: redis.Redis,
                                                                 limit: int) -> None:
    set_limit(rq, limit)
    add(rq, "a", "a1", max_attempts=2)
    [j] = rq.lease("q", 1, LEASE_MS)
    assert counts(redis_client) == as_kept(limit, {"a": "1", "#ready": "0"}) and turns(redis_client) == []
    assert rq.fail("q", "a1", j.lease_token, "boom", retry_after_ms=0) == "retry"
    assert counts(redis_client) == {"#ready": "1"}  # the count went to 0: the field is gone
    assert waiting(redis_client, "a") == ["a1"] and turns(redis_client) == ["a"]
    [j] = rq.lease("q", 1, LEASE_MS)
    assert rq.fail("q", "a1", j.lease_token, "boom", retry_after_ms=0) == "dead"  # attempts used up
    assert counts(redis_client) == {"#ready": "0"} and turns(redis_client) == []
    assert redis_client.zrange(K.dead, 0, -1) == ["a1"]


def test_a_retry_later_is_promoted_into_its_group(rq: RedisQueue, redis_client: redis.Redis) -> None:
    add(rq, "a", "a1")
    [j] = rq.lease("q", 1, LEASE_MS)
    assert rq.fail("q", "a1", j.lease_token, "boom", retry_after_ms=60_000) == "retry"
    assert redis_client.zrange(K.delayed, 0, -1) == ["a1"] and turns(redis_client) == []
    redis_client.zadd(K.delayed, {"a1": 1}, xx=True)  # due now
    assert rq.reap("q") == 0  # promoted, nothing expired
    assert waiting(redis_client, "a") == ["a1"] and turns(redis_client) == ["a"]
    assert counts(redis_client) == {"#ready": "1"}
    assert lease(rq, 1) == ["a1"]


def test_release_puts_the_job_back_in_its_group(rq: RedisQueue, redis_client: redis.Redis) -> None:
    rq.set_config("q", max_in_flight_per_group=1)
    add(rq, "a", "a1", "a2")
    [j] = rq.lease("q", 1, LEASE_MS)
    assert turns(redis_client) == []  # at its limit
    rq.release("q", "a1", j.lease_token)
    assert counts(redis_client) == {"#ready": "2"} and turns(redis_client) == ["a"]
    assert sorted(waiting(redis_client, "a")) == ["a1", "a2"]


def test_an_expired_lease_goes_to_the_front_of_its_group(rq: RedisQueue, redis_client: redis.Redis) -> None:
    add(rq, "a", "a1", "a2", "a3")
    [j] = rq.lease("q", 1, LEASE_MS)
    assert j.job_id == "a1"
    expire(redis_client, "a1")
    assert rq.reap("q") == 1
    assert counts(redis_client) == {"#ready": "3"} and turns(redis_client) == ["a"]
    assert waiting(redis_client, "a") == ["a1", "a2", "a3"]  # ahead of the band: it waited longest
    score = redis_client.zscore(K.group("a"), "a1")
    assert score is not None and score <= 9 * BAND - FRONT + int(redis_client.get(K.seq) or 0)
    assert job(redis_client, "q", "a1")["a"] == "1"


def test_an_expired_lease_found_by_lease_gives_back_its_count(rq: RedisQueue,
                                                              redis_client: redis.Redis) -> None:
    rq.set_config("q", max_in_flight_per_group=1)
    add(rq, "a", "a1", "a2")
    lease(rq, 1)
    expire(redis_client, "a1")
    assert lease(rq, 1) == ["a1"]  # reclaimed first, then leased again: a is under its limit
    assert counts(redis_client) == {"a": "1", "#ready": "1"}


def test_cancel_of_a_waiting_grouped_job(rq: RedisQueue, redis_client: redis.Redis) -> None:
    add(rq, "a", "a1", "a2")
    assert rq.cancel("q", "a1") == "removed"
    assert waiting(redis_client, "a") == ["a2"] and turns(redis_client) == ["a"]
    assert rq.cancel("q", "a2") == "removed"
    assert waiting(redis_client, "a") == [] and turns(redis_client) == []  # its last job: out of turns
    assert counts(redis_client) == {"#ready": "0"}
    assert not redis_client.exists(K.job("a1"))


def test_cancel_of_a_leased_grouped_job_ends_at_its_ack(rq: RedisQueue, redis_client: redis.Redis) -> None:
    add(rq, "a", "a1", "a2")
    rq.set_config("q", max_in_flight_per_group=1)
    [j] = rq.lease("q", 1, LEASE_MS)
    assert rq.cancel("q", "a1") == "requested"
    assert counts(redis_client)["a"] == "1"
    rq.ack("q", "a1", j.lease_token)
    assert counts(redis_client) == {"#ready": "1"} and turns(redis_client) == ["a"]


@LIMITS
def test_ack_many_counts_each_group(rq: RedisQueue, redis_client: redis.Redis, limit: int) -> None:
    set_limit(rq, limit)
    add(rq, "a", "a1", "a2")
    add(rq, "b", "b1")
    add(rq, None, "d1")
    jobs = rq.lease("q", 4, LEASE_MS)
    assert counts(redis_client) == as_kept(limit, {"a": "2", "b": "1", "#ready": "0"})
    assert rq.ack_many("q", [(j.job_id, j.lease_token) for j in jobs]) == [None] * 4
    assert counts(redis_client) == {"#ready": "0"} and turns(redis_client) == []


def test_a_redriven_job_goes_back_to_its_group(rq: RedisQueue, redis_client: redis.Redis) -> None:
    add(rq, "a", "a1", max_attempts=1)
    [j] = rq.lease("q", 1, LEASE_MS)
    rq.fail("q", "a1", j.lease_token, "boom", retry_after_ms=0)
    assert rq.dead_spec("q", "a1").group == "a"
    assert rq.redrive("q", "a1", 7) == 1
    assert waiting(redis_client, "a") == ["a1"] and turns(redis_client) == ["a"]
    [again] = rq.lease("q", 1, LEASE_MS)
    assert (again.job_id, again.group, again.redrive_gen) == ("a1", "a", 7)


def test_config_lua_refuses_a_bad_per_group_limit_before_writing(redis_client: redis.Redis) -> None:
    script = redis_client.register_script(source("config.lua"))
    keys = [K.config, *K.group_keys, K.job_prefix, K.leased]
    script(keys=keys, args=["max_in_flight_per_group", "3"])
    before = snapshot(redis_client)
    for value in ["-1", "1.5", "x", "", "1000000001"]:
        with pytest.raises(redis.ResponseError, match="INVALID_INPUT"):
            script(keys=keys, args=["max_in_flight_per_group", value])
    assert snapshot(redis_client) == before


def test_the_handler_sees_the_group(rq: RedisQueue) -> None:
    add(rq, "org:7", "a")
    add(rq, None, "b")
    jobs = {j.job_id: j.as_job() for j in rq.lease("q", 2, LEASE_MS)}
    assert jobs["a"].group == "org:7" and jobs["b"].group is None


# --- leased counts only under a limit ------------------------------------------------------------

def test_setting_a_limit_counts_the_leases_in_flight_and_clearing_it_drops_the_counts(
        rq: RedisQueue, redis_client: redis.Redis) -> None:
    add(rq, "a", "a1", "a2", "a3")
    add(rq, "b", "b1")
    add(rq, None, "d1")
    jobs = {j.job_id: j for j in rq.lease("q", 4, LEASE_MS)}
    assert sorted(jobs) == ["a1", "a2", "b1", "d1"]
    assert "#counted" not in redis_client.hgetall(K.groups) and counts(redis_client) == {"#ready": "1"}
    rq.set_config("q", max_in_flight_per_group=2)  # counted from the leased set: a has 2, b 1
    assert redis_client.hget(K.groups, "#counted") == "1"
    assert counts(redis_client) == {"a": "2", "b": "1", "#ready": "1"}
    assert lease(rq, 5) == []  # a at its limit; b has no job left
    assert turns(redis_client) == []
    rq.ack("q", "a1", jobs["a1"].lease_token)
    assert counts(redis_client) == {"a": "1", "b": "1", "#ready": "1"} and turns(redis_client) == ["a"]
    [a3] = rq.lease("q", 5, LEASE_MS)
    assert a3.job_id == "a3" and counts(redis_client) == {"a": "2", "b": "1", "#ready": "0"}
    rq.set_config("q", max_in_flight_per_group=0)
    assert counts(redis_client) == {"#ready": "0"} and "#counted" not in redis_client.hgetall(K.groups)
    rq.ack_many("q", [(j.job_id, j.lease_token) for j in (jobs["a2"], jobs["b1"], a3)])
    assert counts(redis_client) == {"#ready": "0"}  # no count left behind, none gone negative


def test_removing_the_limit_puts_a_group_dropped_at_it_back_in_turns(rq: RedisQueue,
                                                                    redis_client: redis.Redis) -> None:
    rq.set_config("q", max_in_flight_per_group=1)
    add(rq, "a", "a1", "a2")
    assert lease(rq, 5) == ["a1"] and turns(redis_client) == []
    rq.set_config("q", max_in_flight_per_group=0)
    assert turns(redis_client) == ["a"] and counts(redis_client) == {"#ready": "1"}
    assert lease(rq, 5) == ["a2"]


# --- the layout before: turns in a zset, counts kept unmarked ---------------------------------------

def old_layout(client: redis.Redis, order: list[str], leased_counts: dict[str, int]) -> None:
    """What the scripts before this layout (main at 459d3bd) leave: turns a zset group -> turn
    number, '#turn' the last number, and every group's leased count with no '#counted' mark. Built
    from today's state: the list and its marks become the zset."""
    client.delete(K.turns)
    marks = [k for k in client.hkeys(K.groups) if k.startswith(">") or k == "#counted"]
    if marks:
        client.hdel(K.groups, *marks)
    client.zadd(K.turns_zset, {g: i + 1 for i, g in enumerate(order)})
    client.hset(K.groups, mapping={"#turn": len(order), **{g: n for g, n in leased_counts.items()}})


def test_the_first_lease_moves_the_old_turns_zset_into_the_list(rq: RedisQueue,
                                                                redis_client: redis.Redis) -> None:
    add(rq, "a", "a1", "a2")
    add(rq, "b", "b1", "b2")
    add(rq, "c", "c1")
    [a1] = rq.lease("q", 1, LEASE_MS)
    old_layout(redis_client, ["b", "c", "a"], {"a": 1})
    add(rq, "d", "d1")  # pushed by today's code before any lease: the list has d, the zset the rest
    assert redis_client.lrange(K.turns, 0, -1) == ["d"]
    assert lease(rq, 1) == ["d1"]  # the zset's groups joined behind d, in their order
    assert not redis_client.exists(K.turns_zset) and "#turn" not in redis_client.hgetall(K.groups)
    assert turns(redis_client) == ["b", "c", "a"]
    assert counts(redis_client) == {"#ready": "4"}  # no limit: the unmarked count is gone
    assert [lease(rq, 1)[0] for _ in range(4)] == ["b1", "c1", "a2", "b2"]
    rq.ack("q", "a1", a1.lease_token)
    assert counts(redis_client) == {"#ready": "0"} and turns(redis_client) == []


def test_an_old_layout_with_a_limit_is_counted_afresh_at_the_first_lease(rq: RedisQueue,
                                                                        redis_client: redis.Redis) -> None:
    add(rq, "a", "a1", "a2", "a3")
    add(rq, "b", "b1")
    leased = lease(rq, 2)
    assert sorted(leased) == ["a1", "b1"]
    # config.lua of the layout before set the limit without the mark, and its counts were stale
    redis_client.hset(K.config, "max_in_flight_per_group", 2)
    old_layout(redis_client, ["a"], {"a": 5, "b": 1, "gone": 3})
    assert lease(rq, 5) == ["a2"]  # a had 1 lease, not 5: one more fits under 2
    assert redis_client.hget(K.groups, "#counted") == "1"
    assert counts(redis_client) == {"a": "2", "b": "1", "#ready": "1"} and turns(redis_client) == []


def test_the_default_group_joins_behind_the_old_zsets_groups(rq: RedisQueue,
                                                             redis_client: redis.Redis) -> None:
    add(rq, "a", "a1", "a2")
    add(rq, "b", "b1")
    old_layout(redis_client, ["b", "a"], {})
    add(rq, None, "d1")
    assert lease(rq, 3) == ["b1", "a1", "d1"] and turns(redis_client) == ["a"]
    assert not redis_client.exists(K.turns_zset)
