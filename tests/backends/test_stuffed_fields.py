"""Session 36: values a team's own Redis user may write by hand into the keys of its queue, read by the
relay (push.lua, rate.lua) and by every gateway, relay and operator (stats.lua), on a real
redis-server with the ACL users (``sluice.backends.redis.acl``).

A 10 MB value in a field such a script read made each call copy it into Lua with Redis blocked for
everyone: push.lua 37-54 ms a call (``paused``, ``max_bytes``, ``used``), rate.lua 21-32 ms, stats.lua
4-130 ms (the seq, the used counter, the groups' ``#ready``, the finished counts, the head job's
``m``), at every push and stats call of that queue. Each is now read within the size a script writes
it, and what an oversized or malformed value means hurts only that team's queue (docs/security.md,
"Values a team may stuff"). Times from SLOWLOG, as tests/backends/test_stuffed_hashes.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from sluice.backends.redis import acl
from sluice.backends.redis.config import RedisQueueConfig
from sluice.backends.redis.connection import RedisConnection
from sluice.backends.redis.keys import QueueKeys
from sluice.backends.redis.relay_engine import MAX_ERR_BYTES, RedisRelayEngine
from sluice.backends.redis.scripts import JobFields, PushResult, source
from sluice.core import bus as ev
from sluice.core.bus import EventBus
from sluice.core.errors import SluiceError
from sluice.core.models import JobSpec
from sluice.relay import Relay
from sluice.relay.config import RelayConfig
from sluice.relay.pusher import own_keys
from sluice.relay.queues import QueueStates
from sluice_dev.fakes import FakeSource
from tests.backends.acl_support import (
    TEAM_AND_READERS,
    acl_server,
    admin_client,
    conn,
    script_us,
    slowest_script_us,
    team,
)
from tests.backends.relay_proc import NullStore

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

USERS = TEAM_AND_READERS
K = QueueKeys("a")
BIG = "9" * 10_000_000  # digits: a value that also parses, as far as a number goes
BOUND_US = 5_000  # a bounded call takes about 0.1 ms; the 10 MB reads took 4-130 ms (SLOWLOG)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from acl_server(tmp_path_factory.mktemp("redis-fields"), USERS)


@pytest.fixture
def admin(server: str) -> Iterator[redis.Redis]:
    yield from admin_client(server, slowlog=True)


_offsets = iter(range(1, 1_000_000))


def push(relay: RedisConnection, budget: int = 0, group: str = "") -> PushResult:
    """One fresh job for queue a (partition 0 of topic t, owner token 1)."""
    n = next(_offsets)
    return relay.scripts.push(K, "t", 0, 1, [(n, JobFields(f"j{n}", '{"x":1}', "5,3,30000,0", 0, group), 0)],
                              budget)


@pytest.mark.parametrize("field", ["paused", "max_bytes"])
def test_an_oversized_config_field_is_not_read_by_push_and_holds_only_that_queue(
        server: str, admin: redis.Redis, field: str) -> None:
    """A longer paused reads as paused (the team's queue waits, as an operator's pause has it wait), a
    longer max_bytes as unset (the deployment's budget). Before: 37-54 ms a push, and not paused."""
    relay = conn(server, "sluice-relay")
    team(server).hset(K.config, field, BIG)
    result, took = script_us(admin, lambda: push(relay, budget=1 << 30))
    assert took < BOUND_US, took
    if field == "paused":
        assert result.paused and result.left == 1 and admin.zcard(K.ready) == 0
    else:
        assert result.pushed == 1 and not result.paused


def test_an_oversized_used_counter_is_not_read_by_push_and_is_counted_again_from_zero(
        server: str, admin: redis.Redis) -> None:
    """Before: 18-40 ms at every push after one SET, and nothing taken ever again (the 10 MB of nines
    read as infinity). Now the first push drops it (freeing 10 MB: a few ms once, as the team's own
    SET costs) and the next pushes read an ordinary counter (SLOWLOG: the second push)."""
    relay = conn(server, "sluice-relay")
    team(server).set(K.used, BIG)
    result, took = script_us(admin, lambda: push(relay, budget=1 << 30))
    assert took < BOUND_US and result.pushed == 1, (took, result)
    assert int(admin.get(K.used)) == 2 * int(admin.hget(K.job(f"j{result.offset}"), "sz"))  # both pushes


@pytest.mark.parametrize("used", ["abc", "99999999999999999999", "-5"])
def test_a_used_counter_incrby_would_refuse_is_dropped_before_push_writes_anything(
        server: str, admin: redis.Redis, used: str) -> None:
    """Before: push.lua wrote the relayed offset and the job's hash, then INCRBY failed: the script
    stopped with the grouped job in no ready zset and its record behind the stored offset (lost)."""
    relay = conn(server, "sluice-relay")
    team(server).set(K.used, used)
    result = push(relay, group="g1")
    job = f"j{result.offset}"
    assert result.pushed == 1 and admin.zscore(K.group("g1"), job) is not None
    assert int(admin.get(K.used)) == int(admin.hget(K.job(job), "sz"))


def test_an_oversized_rate_reads_as_the_strictest(server: str, admin: redis.Redis) -> None:
    """rate_per_s grants nothing; burst is 1. Before: 21-32 ms a call, and rate_per_s of ten million
    nines read as infinity (one granted from the full bucket, then every one asked)."""
    relay, own = conn(server, "sluice-relay"), team(server)
    own.hset(K.config, "rate_per_s", BIG)
    granted, took = script_us(admin, lambda: relay.scripts.rate(K, 10))
    assert granted == 0 and took < BOUND_US, (granted, took)
    own.hset(K.config, mapping={"rate_per_s": "0.001", "burst": BIG})
    admin.delete(K.bucket)
    granted, took = script_us(admin, lambda: relay.scripts.rate(K, 10))
    assert granted == 0 and took < BOUND_US, (granted, took)  # the first call took the one token
    admin.delete(K.bucket)
    assert relay.scripts.rate(K, 10) == 1


def _head_m(own: redis.Redis, relay: RedisConnection) -> None:
    n = push(relay).offset
    own.hset(K.job(f"j{n}"), "m", "5,3,30000," + BIG)


STATS_CASES: dict[str, Callable[[redis.Redis, RedisConnection], Any]] = {
    "seq": lambda own, relay: own.set(K.seq, BIG),
    "used": lambda own, relay: own.set(K.used, BIG),
    "groups #ready": lambda own, relay: own.hset(K.groups, "#ready", BIG),
    "finished succeeded": lambda own, relay: own.hset(K.finished, "succeeded", BIG),
    "the head job's m": _head_m,
}


@pytest.mark.parametrize("case", list(STATS_CASES))
def test_an_oversized_value_stats_reads_is_not_read_for_any_user(server: str, admin: redis.Redis,
                                                                   case: str) -> None:
    """Before: 4-130 ms a call (the head job's m 130 ms), for every gateway's, relay's and operator's
    stats of the queue; the finished count's 10 MB of digits also failed the reply's parse."""
    own = team(server)
    STATS_CASES[case](own, conn(server, "sluice-relay"))
    own.hset(K.finished, "dead", "7")
    for user in ("sluice-gateway", "sluice-relay", "sluice-operator"):
        c = conn(server, user)
        stats, took = script_us(admin, lambda c=c: c.scripts.stats(K))  # type: ignore[misc]
        assert took < BOUND_US, (user, took)
        assert stats.finished.dead == 7 and stats.used_bytes >= 0 and stats.ready >= 0
        if case in ("used", "finished succeeded", "groups #ready"):
            assert stats.used_bytes == 0 and stats.finished.succeeded == 0 and stats.ready == 0
        if case == "the head job's m":
            assert stats.ready == 1 and stats.oldest_ready_age_ms == -1


@pytest.mark.parametrize("value", ["abc", "-3", "1e400"])
def test_a_malformed_count_reads_as_none_rather_than_failing_the_stats_reply(
        server: str, admin: redis.Redis, value: str) -> None:
    own = team(server)
    own.hset(K.finished, mapping={"succeeded": value, "dead": "2"})
    own.set(K.used, value)
    stats = conn(server, "sluice-gateway").scripts.stats(K)
    assert stats.finished.succeeded == 0 and stats.finished.dead == 2 and stats.used_bytes == 0


def test_a_user_whose_access_string_predates_strlen_still_pushes_and_reads_stats(
        server: str, admin: redis.Redis) -> None:
    """While ElastiCache has not yet applied the new access strings, STRLEN is refused: the value is
    read whole, as before, rather than every push and stats call failing."""
    for role in ("relay", "gateway"):
        rules = [r for r in acl.rules(role) if r != "+strlen"]
        assert len(rules) == len(acl.rules(role)) - 1
        admin.execute_command("ACL", "SETUSER", f"old-{role}", "reset", "on", f">pw-old-{role}", *rules)
    own = team(server)
    own.set(K.used, "100")
    own.hset(K.config, "paused", "1")
    relay = conn(server, "old-relay")
    assert push(relay, budget=1 << 30).paused
    own.hdel(K.config, "paused")
    assert push(relay, budget=1 << 30).pushed == 1
    assert conn(server, "old-gateway").scripts.stats(K).used_bytes > 100


def test_a_relayed_owner_or_offset_that_is_no_token_reads_as_none(server: str, admin: redis.Redis) -> None:
    """Before: a 10 MB owner refused every push of the queue (STALE_TOKEN, the 10 MB echoed: 175 ms a
    push, and a reply the client could not parse), and an offset of ten million nines skipped every
    record after it (read as infinity). Now neither is a token: the push takes its records and
    writes its own (the first push frees the 10 MB values, once)."""
    relay = conn(server, "sluice-relay")
    team(server).hset(K.relayed("t", 0), mapping={"owner": BIG, "offset": BIG})
    result, took = script_us(admin, lambda: push(relay))  # the second push: the first overwrote them
    assert took < BOUND_US and result.pushed == 1, (took, result)
    assert admin.hget(K.relayed("t", 0), "owner") == "1"


@pytest.mark.parametrize("offset", ["abc", "1" * 5_000, BIG])
def test_the_relays_read_of_a_relayed_offset_that_is_no_offset_is_minus_one(
        server: str, admin: redis.Redis, offset: str) -> None:
    """Before: int() of it raised (ValueError, "Exceeds the limit (4300 digits)"), and the 10 MB
    crossed to the relay."""
    team(server).hset(K.relayed("t", 0), "offset", offset)
    engine = RedisRelayEngine(conn(server, "sluice-relay"))
    admin.config_resetstat()
    assert engine.relayed_offset("a", "t", 0, 1) == -1
    assert len(offset) <= 16 or "cmdstat_hget" not in admin.info("commandstats")  # the long ones unread
    team(server).hset(K.relayed("t", 0), "offset", "41")
    assert engine.relayed_offset("a", "t", 0, 1) == 41


def test_a_settle_set_naming_one_stuffed_job_a_hundred_times_reads_its_err_not_at_all(
        server: str, admin: redis.Redis) -> None:
    """The relay's maintenance reads the err of the oldest 100 settle entries' jobs. Before: 100
    members naming one job with a 10 MB err read 1 GB each maintenance (684 ms of HMGET in Redis,
    2 GB in the relay). Now each job once, and an err only within what fail.lua writes."""
    own = team(server)
    own.hset(K.job("j1"), "err", "x" * 10_000_000)
    own.hset(K.job("j2"), "err", "lease expired on attempt 3")
    own.zadd(K.settle, {**{f"dead:{g}:j1": 1 for g in range(100)}, "dead:0:j2": 0})
    engine = RedisRelayEngine(conn(server, "sluice-relay"))
    admin.config_resetstat()
    entries = engine.unsettled("a", 101)
    assert len(entries) == 101 and entries[0].last_error == "lease expired on attempt 3"
    assert all(e.last_error is None for e in entries[1:])
    stats = admin.info("commandstats")
    assert stats["cmdstat_hmget"]["calls"] == 1 and "cmdstat_hget" not in stats, stats  # j2's err alone
    assert f"if #err > {MAX_ERR_BYTES} then" in source("fail.lua")


def test_an_oversized_policy_is_not_read_by_reap(server: str, admin: redis.Redis) -> None:
    """One ZADD of a lapsed entry makes every reap read the policy. Before: 30 MB read each reap
    (SLOWLOG 68 ms). Now none told: the caller's max_attempts (3) decides."""
    relay, own = conn(server, "sluice-relay"), team(server)
    own.hset(K.config, "policy_attempts", "9" * 30_000_000)

    def lapsed() -> tuple[int, int]:
        admin.hset(K.job("lj"), mapping={"p": "{}", "m": "5,3,30000,1", "a": "1", "sz": "10", "v": "2"})
        admin.zadd(K.leased, {"lj": 1})
        admin.hset(K.tokens, "lj", "5")
        return relay.scripts.reap(K, 500)

    reaped, took = script_us(admin, lapsed)
    assert reaped == (1, 0) and took < BOUND_US, (reaped, took)
    assert admin.hget(K.job("lj"), "a") == "2" and admin.zscore(K.ready, "lj") is not None


def test_a_relay_whose_access_string_predates_hstrlen_reads_the_settle_errors_whole(
        server: str, admin: redis.Redis) -> None:
    rules = [r for r in acl.rules("relay") if r not in ("+hstrlen", "+strlen")]
    admin.execute_command("ACL", "SETUSER", "older-relay", "reset", "on", ">pw-older-relay", *rules)
    team(server).hset(K.job("j2"), "err", "boom")
    team(server).zadd(K.settle, {"dead:0:j2": 0})
    engine = RedisRelayEngine(conn(server, "older-relay"))
    assert [e.last_error for e in engine.unsettled("a", 10)] == ["boom"]


def test_a_three_byte_config_value_no_script_writes_fails_no_users_read_of_the_queue(
        server: str, admin: redis.Redis) -> None:
    """Before: ``max_in_flight`` ``abc`` raised ValueError in every read of the queue's config (the
    relay's refresh, in its plan of every queue: each step failed; every gateway's admission; the
    operator's list of all queues). Now it reads as unset, the queue's other settings as written."""
    team(server).hset(K.config, mapping={"max_in_flight": "abc", "rate_per_s": "-1", "paused": "1"})
    got = RedisRelayEngine(conn(server, "sluice-relay")).stats("a")
    assert got.config.max_in_flight == 0 and got.config.rate_per_s == 0 and got.config.paused
    for user in ("sluice-gateway", "sluice-operator"):
        assert RedisQueueConfig(conn(server, user)).get_config("a").paused


def test_a_key_of_the_wrong_type_holds_that_queue_alone_in_the_relays_reads(server: str,
                                                                             admin: redis.Redis) -> None:
    """The team's user may DEL a key of its queue and SET a string in its place: every script touching
    it fails (WRONGTYPE). Before, the relay's re-read raised in its plan of every queue, each step."""
    team(server).delete(K.ready)
    team(server).set(K.ready, "x")
    states = QueueStates(RedisRelayEngine(conn(server, "sluice-relay")), RelayConfig(), EventBus())
    assert states.get("a", 100.0).blocked and states.states["a"].unreadable
    assert not states.get("b", 100.0).blocked  # another queue reads as ever
    team(server).delete(K.ready)
    assert not states.get("a", 200.0).blocked  # read again after refresh_s: no longer held


@pytest.mark.parametrize("key", [K.idle, K.wake, K.relayed("t", 0)])
def test_a_push_only_key_of_the_wrong_type_fails_as_the_queues_own_keys(server: str, admin: redis.Redis,
                                                                          key: str) -> None:
    """The relay holds a queue alone for such an error (``pusher.own_keys``: a reply no code maps),
    and fails the round for Redis failing (``BackendUnavailable``) as before."""
    team(server).delete(key)
    team(server).set(key, "x")
    with pytest.raises(SluiceError) as refused:
        push(conn(server, "sluice-relay"))
    assert own_keys(refused.value) and "WRONGTYPE" in str(refused.value)


def test_a_forged_relayed_owner_holds_its_queue_alone_and_the_partitions_other_queue_flows(
        server: str, admin: redis.Redis) -> None:
    """The team's user writes its queue's relayed owner as 2**53-1 (docs/security.md, "A forged relayed
    owner"). Before, push.lua refused every push into it as stale and the relay dropped the partition
    at its first push there, and again after each take-over: another team's queue on that partition
    waited. Now the relay's lease on the partition says no relay holds that owner: the queue alone is
    held, and flows again once its team deletes the key."""
    topic, other = "sluice.jobs", QueueKeys("b")
    forged = K.relayed(topic, 0)
    team(server).hset(forged, mapping={"owner": str(2**53 - 1), "offset": "-1"})
    source = FakeSource(topic=topic, n_partitions=1)
    for i in range(10):
        for queue in ("a", "b"):
            source.append_spec(0, JobSpec(job_id=f"{queue}-{i}", queue=queue, payload={"n": i}))
    held: list[ev.OwnerForged] = []
    bus = EventBus()
    bus.subscribe(held.append, ev.OwnerForged)
    engine = RedisRelayEngine(conn(server, "sluice-relay"))
    relay = Relay(engine, NullStore(), source, None, relay_id="r1", events=bus,  # type: ignore[arg-type]
                  config=RelayConfig(poll_ms=10, commit_s=0, batch=4, refresh_s=0.05))
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and admin.zcard(other.ready) < 10:
            relay.step()
        assert admin.zcard(other.ready) == 10 and admin.zcard(K.ready) == 0  # before: b waited behind a
        assert 0 in relay.ownership.owned and relay.report.partitions_lost == 0
        assert admin.hget(forged, "owner") == str(2**53 - 1)  # nothing pushed over it
        team(server).delete(forged)
        while time.monotonic() < deadline and admin.zcard(K.ready) < 10:
            relay.step()
    finally:
        relay.stop()
    assert admin.zcard(K.ready) == 10 and admin.zcard(other.ready) == 10
    assert [(e.queue, e.held) for e in held] == [("a", True), ("a", False)]



# A job's sz, written by the team's user, read by the scripts that delete a job for another user:
# trim.lua and settled.lua (the relay's maintenance), purge.lua (the operator), cancel.lua (a gateway).
# Before: read whole (HGET), and a value DECRBY refuses (10 MB of nines: infinity in Lua; 20 digits:
# 1e+20; 1e400) failed the script at release_bytes, after it had deleted the job's hash.
STUFFED_SZ = ["9" * 10_000_000, "99999999999999999999", "1e400"]
USED = 5_000  # the queue's used counter before: an ordinary job's sz is 300


def _job(server: str, admin: redis.Redis, job_id: str, sz: str, zset: str) -> None:
    """A job of queue a in ``zset`` (dead: died at 1 ms), its sz then written by the team's own user."""
    admin.hset(K.job(job_id), mapping={"p": "{}", "m": "5,3,30000,1", "a": "3", "sz": "300", "v": "2"})
    admin.zadd(zset, {job_id: 1})
    admin.set(K.used, USED)
    team(server).hset(K.job(job_id), "sz", sz)


@pytest.mark.parametrize("sz", STUFFED_SZ, ids=["10MB", "20-digits", "1e400"])
def test_a_stuffed_sz_counts_nothing_in_the_relays_trim_of_dead_jobs(server: str, admin: redis.Redis,
                                                                     sz: str) -> None:
    """Before: trim.lua deleted the hash, then DECRBY failed (the dead entry left for the next trim;
    the 10 MB copied into Lua: 29-46 ms, SLOWLOG). Now the job is trimmed whole and the team's
    ordinary job still gives its 300 bytes back: the stuffed one counts 0."""
    relay = conn(server, "sluice-relay")
    _job(server, admin, "big", sz, K.dead)
    admin.hset(K.job("ok"), mapping={"p": "{}", "m": "5,3,30000,1", "sz": "300", "v": "2"})
    admin.zadd(K.dead, {"ok": 2})
    admin.slowlog_reset()
    assert relay.scripts.trim(K, 0, 1, 10) == (2, 0)
    assert admin.zcard(K.dead) == 0 and not admin.exists(K.job("big"), K.job("ok"))
    assert int(admin.get(K.used)) == USED - 300
    assert slowest_script_us(admin) < BOUND_US


@pytest.mark.parametrize("sz", STUFFED_SZ, ids=["10MB", "20-digits", "1e400"])
def test_a_stuffed_sz_counts_nothing_in_the_operators_purge(server: str, admin: redis.Redis, sz: str) -> None:
    """Before: purge.lua deleted the hashes, then DECRBY failed with the dead entries still there."""
    _job(server, admin, "big", sz, K.dead)
    admin.slowlog_reset()
    assert conn(server, "sluice-operator").scripts.purge(K, 10) == 1
    assert admin.zcard(K.dead) == 0 and not admin.exists(K.job("big")) and int(admin.get(K.used)) == USED
    assert slowest_script_us(admin) < BOUND_US


@pytest.mark.parametrize("sz", STUFFED_SZ, ids=["10MB", "20-digits", "1e400"])
def test_a_stuffed_sz_counts_nothing_in_the_relays_settled(server: str, admin: redis.Redis, sz: str) -> None:
    """Before: settled.lua took the settle entry and the dead entry, deleted the hash, then failed:
    the relay saw an error for an entry it had settled."""
    _job(server, admin, "big", sz, K.dead)
    admin.zadd(K.settle, {"dead:0:big": 7})
    admin.slowlog_reset()
    assert conn(server, "sluice-relay").scripts.settled(K, [("dead:0:big", 7, True)]) == 1
    assert admin.zcard(K.settle) == 0 and admin.zcard(K.dead) == 0 and not admin.exists(K.job("big"))
    assert int(admin.get(K.used)) == USED
    assert slowest_script_us(admin) < BOUND_US


@pytest.mark.parametrize("sz", STUFFED_SZ, ids=["10MB", "20-digits", "1e400"])
def test_a_stuffed_sz_counts_nothing_in_a_gateways_cancel(server: str, admin: redis.Redis, sz: str) -> None:
    """Before: cancel.lua took the job out of ready and deleted it, then failed before counting it
    cancelled and recording the settle entry the jobs table needs (its item stayed "leased")."""
    _job(server, admin, "big", sz, K.ready)
    admin.slowlog_reset()
    assert conn(server, "sluice-gateway").scripts.cancel(K, "big", settle=True) == "removed"
    assert admin.zcard(K.ready) == 0 and not admin.exists(K.job("big")) and int(admin.get(K.used)) == USED
    assert admin.hget(K.finished, "cancelled") == "1" and admin.zcard(K.settle) == 1
    assert slowest_script_us(admin) < BOUND_US


@pytest.mark.parametrize("used", ["abc", "99999999999999999999", "-9223372036854775800", "9" * 10_000_000])
def test_a_used_counter_decrby_would_refuse_is_dropped_by_the_scripts_that_give_bytes_back(
        server: str, admin: redis.Redis, used: str) -> None:
    """The team SETs its used counter. Before: trim.lua deleted the job, then DECRBY failed (not an
    integer; or it would overflow); the same in purge, settled, cancel and reclaim. Now it is dropped
    (_lib.lua release_bytes, by pcall), as push.lua drops it, and counted from 0 again."""
    _job(server, admin, "j", "300", K.dead)
    team(server).set(K.used, used)
    admin.slowlog_reset()
    assert conn(server, "sluice-relay").scripts.trim(K, 0, 1, 10) == (1, 0)
    assert admin.zcard(K.dead) == 0 and not admin.exists(K.job("j"), K.used)
    assert slowest_script_us(admin) < BOUND_US  # DECRBY refuses a 10 MB value by its length


def _leased(server: str, admin: redis.Redis, sz: str, cancel: bool = False) -> RedisConnection:
    """Job j of queue a leased (token 5), its sz written by the team; the team's worker connection,
    with the worker scripts loaded for it (as the internal function loads them)."""
    _job(server, admin, "j", sz, K.leased)
    admin.zadd(K.leased, {"j": 2**50})
    admin.hset(K.tokens, "j", "5")
    if cancel:
        admin.hset(K.job("j"), "c", "1")
    for name in ("ack.lua", "fail.lua", "release.lua"):
        admin.script_load(source(name))
    return conn(server, "team-a")


@pytest.mark.parametrize("sz", STUFFED_SZ, ids=["10MB", "20-digits", "1e400"])
@pytest.mark.parametrize("end", ["ack", "fail", "release"])
def test_a_stuffed_sz_counts_nothing_in_the_teams_own_worker_scripts(server: str, admin: redis.Redis,
                                                                     sz: str, end: str) -> None:
    """The team hurts only itself here, but the rule holds: before, ack.lua deleted the hash and
    failed at DECRBY with the lease entry and token left; fail.lua and release.lua (a cancel
    requested) took the lease entry and token first. No worker command is added (no HSTRLEN: the sz
    is still read whole, then checked)."""
    worker = _leased(server, admin, sz, cancel=end != "ack")
    if end == "ack":
        assert worker.scripts.ack(K, [("j", 5)]) == [None]
    elif end == "fail":
        assert worker.scripts.fail(K, "j", 5, "boom", 0, False) == "cancelled"
    else:
        assert worker.scripts.release(K, "j", 5) == "cancelled"
    assert not admin.exists(K.job("j")) and admin.zcard(K.leased) == 0 and not admin.hexists(K.tokens, "j")
    assert int(admin.get(K.used)) == USED


def test_an_ordinary_sz_is_still_given_back_by_every_script_that_deletes_a_job(
        server: str, admin: redis.Redis) -> None:
    relay = conn(server, "sluice-relay")
    def settled() -> object:
        admin.zadd(K.settle, {"dead:0:j": 7})
        return relay.scripts.settled(K, [("dead:0:j", 7, True)])

    for n, delete in enumerate([lambda: relay.scripts.trim(K, 0, 1, 10),
                                lambda: conn(server, "sluice-operator").scripts.purge(K, 10), settled,
                                lambda: conn(server, "sluice-gateway").scripts.cancel(K, "j", False, True)]):
        _job(server, admin, "j", str(1000 + n), K.dead)
        delete()
        assert not admin.exists(K.job("j")) and int(admin.get(K.used)) == USED - 1000 - n, n


@pytest.mark.parametrize("sz", STUFFED_SZ, ids=["10MB", "20-digits", "1e400"])
def test_a_stuffed_sz_of_a_lapsed_cancelled_job_counts_nothing_in_the_relays_reap(
        server: str, admin: redis.Redis, sz: str) -> None:
    """reclaim (reap.lua; lease.lua's too) reads sz with the job's other fields. Before: it deleted the
    cancelled job's hash, then DECRBY failed: its lease entry and token left, nothing settled. Now the
    sz counts 0 (still read whole by the HMGET: docs/security.md, "What remains")."""
    _job(server, admin, "lj", sz, K.leased)
    admin.hset(K.job("lj"), "c", "1")
    admin.hset(K.tokens, "lj", "5")
    assert conn(server, "sluice-relay").scripts.reap(K, 500) == (1, 0)
    assert not admin.exists(K.job("lj")) and admin.zcard(K.leased) == 0 and not admin.hexists(K.tokens, "lj")
    assert admin.zrange(K.settle, 0, -1) == ["cancelled:0:lj"] and int(admin.get(K.used)) == USED


def test_a_relay_whose_access_string_predates_hstrlen_still_trims_a_stuffed_sz(server: str,
                                                                                admin: redis.Redis) -> None:
    """While ElastiCache has not applied the access strings, size_of reads sz whole (pcall) and still
    counts it 0: the trim completes."""
    rules = [r for r in acl.rules("relay") if r not in ("+hstrlen", "+strlen")]
    admin.execute_command("ACL", "SETUSER", "older-relay", "reset", "on", ">pw-older-relay", *rules)
    _job(server, admin, "big", "9" * 10_000_000, K.dead)
    assert conn(server, "older-relay").scripts.trim(K, 0, 1, 10) == (1, 0)
    assert admin.zcard(K.dead) == 0 and int(admin.get(K.used)) == USED
