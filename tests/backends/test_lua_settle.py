"""The settle set: endings Redis makes with no worker left to tell the jobs table.

A lease that expires on its job's last attempt, or after a cancel request, ends the job
inside a script (reclaim, from lease.lua and reap.lua); so do fail.lua and release.lua
when a cancel request or the attempt limit overrides the worker's verdict. Each such
ending is recorded in ``keys.settle`` in the same script, and settled.lua forgets it
once the relay has written it to DynamoDB. Checked here by the keys left behind.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

from sluice.backends.redis.engine import RedisQueue
from sluice.backends.redis.keys import QueueKeys
from sluice.backends.redis.scripts import source
from sluice.core.errors import AlreadyFinished, InvalidInput
from sluice.core.models import JobState, SettleEntry
from tests.backends.test_engine_support import leased, score, snapshot, spec, where

pytestmark = pytest.mark.integration
K = QueueKeys("q")




def settle(client: redis.Redis) -> dict[str, float]:
    return {str(m): s for m, s in client.zrange(K.settle, 0, -1, withscores=True)}


def test_expiry_on_the_last_attempt_is_recorded_with_the_dead_letter(rq: RedisQueue,
                                                                    redis_client: redis.Redis) -> None:
    # 300 ms leases: b's lease call reclaims a lapsed lease inline, and with 20 ms a loaded CI
    # machine let a's lapse before b was leased (reap then found 1)
    leased(rq, "a", lease_ms=300, max_attempts=1)
    leased(rq, "b", lease_ms=300, max_attempts=3)  # attempts left: back to ready, nothing to settle
    time.sleep(0.4)
    assert rq.reap("q") == 2
    assert where(redis_client, "q", "a") == {"dead"} and where(redis_client, "q", "b") == {"ready"}
    assert settle(redis_client) == {"dead:0:a": score(redis_client, "q", "dead", "a")}
    [ended] = rq.unsettled("q")
    assert (ended.job_id, ended.queue, ended.status, ended.last_error) == (
        "a", "q", JobState.DEAD, "lease expired on attempt 1")
    assert ended.ended_at_ms == score(redis_client, "q", "dead", "a")


def test_expiry_found_by_a_lease_call_is_recorded_too(rq: RedisQueue, redis_client: redis.Redis) -> None:
    leased(rq, "a", lease_ms=20, max_attempts=1)
    time.sleep(0.05)
    assert rq.lease("q", 1, 1_000) == []  # reclaimed inline, then nothing to lease
    assert list(settle(redis_client)) == ["dead:0:a"]


def test_expiry_after_a_cancel_request_is_recorded_as_cancelled(rq: RedisQueue,
                                                                redis_client: redis.Redis) -> None:
    leased(rq, "a", lease_ms=20, max_attempts=5)
    rq.cancel("q", "a")
    time.sleep(0.05)
    rq.reap("q")
    assert where(redis_client, "q", "a") == set()
    assert list(settle(redis_client)) == ["cancelled:0:a"]
    [ended] = rq.unsettled("q")
    assert (ended.status, ended.last_error) == (JobState.CANCELLED, None)  # the hash is gone


def test_fail_records_only_the_endings_the_worker_did_not_choose(rq: RedisQueue,
                                                                redis_client: redis.Redis) -> None:
    j = leased(rq, "perm", max_attempts=5)
    # the worker's own verdict
    assert rq.fail("q", "perm", j.lease_token, "bad input", permanent=True) == "dead"
    j = leased(rq, "last", max_attempts=1)
    assert rq.fail("q", "last", j.lease_token, "boom") == "dead"  # attempts used up
    j = leased(rq, "flag", max_attempts=5)
    rq.cancel("q", "flag")
    assert rq.fail("q", "flag", j.lease_token, "boom") == "cancelled"  # a cancel request overrides the retry
    j = leased(rq, "retry", max_attempts=5)
    assert rq.fail("q", "retry", j.lease_token, "boom") == "retry"
    assert sorted(settle(redis_client)) == ["cancelled:0:flag", "dead:0:last"]


def test_release_of_a_cancel_requested_job_is_recorded(rq: RedisQueue, redis_client: redis.Redis) -> None:
    j = leased(rq, "a")
    rq.cancel("q", "a")
    rq.release("q", "a", j.lease_token)
    k = leased(rq, "b")
    rq.release("q", "b", k.lease_token)
    assert list(settle(redis_client)) == ["cancelled:0:a"]


def test_redrive_drops_the_entry_of_a_job_given_another_chance(rq: RedisQueue,
                                                               redis_client: redis.Redis) -> None:
    for job_id in ("a", "b"):
        leased(rq, job_id, lease_ms=20, max_attempts=1)
    time.sleep(0.05)
    rq.reap("q")
    assert rq.redrive("q", "a") == 1
    assert list(settle(redis_client)) == ["dead:0:b"]
    assert rq.redrive("q") == 1
    assert settle(redis_client) == {}


def test_settled_forgets_only_entries_unchanged_since_they_were_read(rq: RedisQueue,
                                                                    redis_client: redis.Redis) -> None:
    for job_id in ("a", "b"):
        leased(rq, job_id, lease_ms=20, max_attempts=1)
    time.sleep(0.05)
    rq.reap("q")
    read = rq.unsettled("q")
    assert [e.job_id for e in read] == ["a", "b"]
    # Meanwhile "b" was redriven, leased and ended again: a newer entry, not settled yet.
    rq.redrive("q", "b")
    leased_again = rq.lease("q", 1, 20)
    assert [j.job_id for j in leased_again] == ["b"]
    time.sleep(0.05)
    rq.reap("q")
    assert rq.settled("q", read) == 1
    [left] = rq.unsettled("q")
    assert left.job_id == "b" and left.ended_at_ms > read[1].ended_at_ms
    assert rq.settled("q", []) == 0


def test_unsettled_reads_the_oldest_first_and_is_bounded(rq: RedisQueue) -> None:
    for i in range(5):
        leased(rq, f"j{i}", lease_ms=20, max_attempts=1)
    time.sleep(0.05)
    rq.reap("q")
    assert len(rq.unsettled("q", limit=3)) == 3
    with pytest.raises(InvalidInput):
        rq.unsettled("q", limit=0)


@pytest.mark.parametrize("argv", [
    [],                                   # no entries
    ["dead:a"],                           # a member without its score
    ["done:a", "1"],                      # not an ending settle records
    ["dead:", "1"],                       # no job id
    ["dead:a b", "1"],                    # a job id no script would have written
    ["dead:" + "x" * 129, "1"],           # too long
    ["dead:a", "1.5"],                    # not an integer score
    ["dead:a", "1", "cancelled:b", "x"],  # the second pair is bad: nothing is removed
    ["dead:0:a", "1", "yes"],             # residue is "0" or "1"
    ["dead:0:a", "1", "0", "dead:0:b", "1"],  # the second triple is cut short
])
def test_settled_lua_validates_before_writing(rq: RedisQueue, redis_client: redis.Redis,
                                              argv: list[str]) -> None:
    leased(rq, "a", lease_ms=20, max_attempts=1)
    time.sleep(0.05)
    rq.reap("q")
    script = redis_client.register_script(source("settled.lua"))
    before = snapshot(redis_client)
    with pytest.raises(redis.ResponseError, match="INVALID_INPUT"):
        script(keys=[K.settle, K.job_prefix, K.dead, K.used], args=argv)
    assert snapshot(redis_client) == before


def test_a_settle_entrys_member_matches_what_the_scripts_write() -> None:
    cancelled = SettleEntry(job_id="a", queue="q", status=JobState.CANCELLED, ended_at_ms=1)
    assert cancelled.member == "cancelled:0:a"
    redriven = SettleEntry(job_id="a", queue="q", status=JobState.DEAD, ended_at_ms=1, redrive_gen=7)
    assert redriven.member == "dead:7:a"
    older = SettleEntry.parse("dead:a", "q", 5)  # the format before redrive generations
    assert (older.job_id, older.status, older.redrive_gen, older.member) == (
        "a", JobState.DEAD, None, "dead:a")
    newer = SettleEntry.parse("cancelled:3:a.b-c", "q", 5)
    assert (newer.job_id, newer.status, newer.redrive_gen, newer.member) == (
        "a.b-c", JobState.CANCELLED, 3, "cancelled:3:a.b-c")


# --- issue 13: the redrive generation, and the cancel of a reclaimed job ---------------------------


def test_redrive_stores_the_generation_lease_hands_it_out_and_endings_carry_it(
        rq: RedisQueue, redis_client: redis.Redis) -> None:
    leased(rq, "a", lease_ms=20, max_attempts=1)
    time.sleep(0.05)
    rq.reap("q")
    assert list(settle(redis_client)) == ["dead:0:a"]
    assert rq.redrive("q", "a", generation=3) == 1
    assert redis_client.hget(K.job("a"), "g") == "3"
    assert settle(redis_client) == {} and where(redis_client, "q", "a") == {"ready"}
    [again] = rq.lease("q", 1, 20)
    assert (again.job_id, again.redrive_gen, again.attempt) == ("a", 3, 1)
    time.sleep(0.05)
    rq.reap("q")  # the redriven run's lease expires on its last attempt too
    assert list(settle(redis_client)) == ["dead:3:a"]
    assert [e.redrive_gen for e in rq.unsettled("q")] == [3]
    assert rq.redrive("q", "a") == 1  # generation 0 (no jobs table): the job keeps its generation
    assert redis_client.hget(K.job("a"), "g") == "3" and settle(redis_client) == {}


def test_redrive_drops_a_pending_cancelled_ending_and_an_older_format_entry(
        rq: RedisQueue, redis_client: redis.Redis) -> None:
    j = leased(rq, "a", max_attempts=5)
    rq.cancel("q", "a")
    assert rq.fail("q", "a", j.lease_token, "boom", permanent=True) == "dead"
    # As fail.lua left a cancel-requested failure before issue 29 (dead, "cancelled:<g>:<id>"), and an
    # entry written before generations existed.
    redis_client.zadd(K.settle, {"cancelled:0:a": 1, "dead:a": 1})
    assert set(settle(redis_client)) == {"cancelled:0:a", "dead:a"}
    rq.redrive("q", "a", generation=1)
    assert settle(redis_client) == {}


def test_settled_forgets_entries_of_both_formats(rq: RedisQueue, redis_client: redis.Redis) -> None:
    redis_client.zadd(K.settle, {"dead:a": 5, "cancelled:2:b": 6})
    read = rq.unsettled("q")
    assert [(e.job_id, e.redrive_gen) for e in read] == [("a", None), ("b", 2)]
    assert rq.settled("q", read) == 2
    assert settle(redis_client) == {}


def test_cancel_with_settle_records_the_removal_of_a_waiting_job(rq: RedisQueue,
                                                                 redis_client: redis.Redis) -> None:
    leased(rq, "a", lease_ms=20, max_attempts=5)
    time.sleep(0.05)
    rq.reap("q")  # its holder died: back in ready, while the jobs table still says leased
    redis_client.hset(K.job("a"), "g", "2")  # as an earlier redrive of generation 2 left it
    assert rq.cancel("q", "a", settle=True) == "removed"
    assert where(redis_client, "q", "a") == set() and not redis_client.exists(K.job("a"))
    assert list(settle(redis_client)) == ["cancelled:2:a"]
    rq.enqueue(spec("b"))
    assert rq.cancel("q", "b") == "removed"  # without settle: the store has cancelled it already
    assert list(settle(redis_client)) == ["cancelled:2:a"]


def test_cancel_with_settle_of_a_leased_job_only_marks_it(rq: RedisQueue, redis_client: redis.Redis) -> None:
    leased(rq, "a")
    assert rq.cancel("q", "a", settle=True) == "requested"
    assert redis_client.hget(K.job("a"), "c") == "1" and settle(redis_client) == {}


@pytest.mark.parametrize("script,keys,argv", [
    ("cancel.lua", lambda: [K.job("a"), K.ready, K.delayed, K.dead, K.tokens, K.settle], ["a", "2"]),
    ("cancel.lua", lambda: [K.job("a"), K.ready, K.delayed, K.dead, K.tokens, K.settle], ["a", "1", "1"]),
    ("cancel.lua", lambda: [K.job("a"), K.ready, K.delayed, K.dead, K.tokens, K.settle], ["a", "0", "x"]),
    ("redrive.lua", lambda: [K.job_prefix, K.dead, K.ready, K.seq, K.settle], ["a", "1", "-1"]),
    ("redrive.lua", lambda: [K.job_prefix, K.dead, K.ready, K.seq, K.settle], ["a", "1", "1e3"]),
])
def test_cancel_and_redrive_validate_before_writing(rq: RedisQueue, redis_client: redis.Redis, script: str,
                                                    keys: Any, argv: list[str]) -> None:
    leased(rq, "a", lease_ms=20, max_attempts=1)
    time.sleep(0.05)
    rq.reap("q")
    before = snapshot(redis_client)
    with pytest.raises(redis.ResponseError, match="INVALID_INPUT"):
        redis_client.register_script(source(script))(keys=keys(), args=argv)
    assert snapshot(redis_client) == before


# --- issue 29, item 8: the dead set holds only dead jobs -------------------------------------------


def test_settled_takes_a_residue_out_of_the_dead_set(rq: RedisQueue, redis_client: redis.Redis) -> None:
    """The relay found the items of "a" succeeded (its worker crashed before the last ack) and of "b"
    failed: "a"'s dead job goes with its entry (hash, dead entry, bytes); "b" stays a dead job."""
    for job_id in ("a", "b"):
        leased(rq, job_id, lease_ms=20, max_attempts=1)
    time.sleep(0.05)
    rq.reap("q")
    used = int(redis_client.get(K.used))
    size_b = int(redis_client.hget(K.job("b"), "sz"))
    read = rq.unsettled("q")
    assert rq.settled("q", read, [e for e in read if e.job_id == "a"]) == 2
    assert where(redis_client, "q", "a") == set() and not redis_client.exists(K.job("a"))
    assert where(redis_client, "q", "b") == {"dead"} and redis_client.exists(K.job("b"))
    assert int(redis_client.get(K.used)) == size_b < used
    assert settle(redis_client) == {}


def test_settled_keeps_the_job_of_an_entry_that_changed(rq: RedisQueue, redis_client: redis.Redis) -> None:
    leased(rq, "a", lease_ms=20, max_attempts=1)
    time.sleep(0.05)
    rq.reap("q")
    read = rq.unsettled("q")
    redis_client.zadd(K.settle, {read[0].member: read[0].ended_at_ms + 1})  # ended again since the read
    assert rq.settled("q", read, read) == 0
    assert where(redis_client, "q", "a") == {"dead"} and redis_client.exists(K.job("a"))


def test_cancel_of_a_dead_job_the_store_cancelled_removes_it(rq: RedisQueue,
                                                             redis_client: redis.Redis) -> None:
    """cancelled: the jobs table has cancelled the job already, so a dead-lettered job Redis still holds
    is not a dead job: removed (not counted again). Without (the store said leased, or the caller
    does not know) it is too late to cancel: ALREADY_FINISHED, nothing written."""
    leased(rq, "a", lease_ms=20, max_attempts=1)
    time.sleep(0.05)
    rq.reap("q")
    before = snapshot(redis_client)
    for settle in (True, False):
        with pytest.raises(AlreadyFinished):
            rq.cancel("q", "a", settle=settle)
    assert snapshot(redis_client) == before
    counted = redis_client.hgetall(K.finished)
    assert rq.cancel("q", "a", cancelled=True) == "removed"
    assert where(redis_client, "q", "a") == set() and not redis_client.exists(K.job("a"))
    assert not redis_client.exists(K.used) and redis_client.hgetall(K.finished) == counted
