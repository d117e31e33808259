"""Session 36: hashes a team's own Redis user may write by hand, read by Sluice's functions, on a real
redis-server with the ACL users (``sluice.backends.redis.acl``).

A team's worker user has HSET on every key of its queues (its scripts need it, and Redis checks a
script's calls against its caller's rights), so it can stuff its queue's waits hash (which the
relay's ``sample.lua`` takes) and its config hash (which ``stats.lua`` reads for every gateway,
relay and operator). Each read must stay bounded: the script's time is taken from SLOWLOG (every
command logged with its microseconds), and a bound a read of the stuffed hash exceeds many times
over (157-393 ms for the waits, 145 ms for the config before the fix) must hold.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from sluice.backends.redis import acl
from sluice.backends.redis.config import RedisQueueConfig
from sluice.backends.redis.connection import RedisConnection
from sluice.backends.redis.keys import QueueKeys
from sluice.backends.redis.scripts import RedisScriptLoader, source
from sluice.core import depth
from sluice.core.depth import MAX_BUCKET
from sluice.core.script_loads import sha1
from tests.backends.acl_support import TEAM_AND_READERS, acl_server, admin_client, conn, script_us, team

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

USERS = TEAM_AND_READERS
K = QueueKeys("a")
BOUND_US = 20_000  # a bounded read takes well under 1 ms; the stuffed hashes' reads took 145-648 ms


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from acl_server(tmp_path_factory.mktemp("redis-stuffed"), USERS)


@pytest.fixture
def admin(server: str) -> Iterator[redis.Redis]:
    yield from admin_client(server, slowlog=True)


def stuff(client: redis.Redis, key: str, fields: int, value: str = "1") -> None:
    for start in range(0, fields, 10_000):
        client.hset(key, mapping={f"x{n}": value for n in range(start, min(fields, start + 10_000))})


def sample(relay: RedisConnection) -> bool:
    return relay.scripts.sample(K, [1, 2, 3, 4], 720, 3_600_000, 0)


@pytest.mark.parametrize("how", ["100,000 fields", "twenty 1 MB values"])
def test_a_waits_hash_a_team_stuffs_by_hand_is_dropped_unread_by_the_sample(
        server: str, admin: redis.Redis, how: str) -> None:
    relay, own = conn(server, "sluice-relay"), team(server)
    sample(relay)

    def stuffed_sample() -> bool:  # script_us samples twice: the hash is stuffed again for each
        own.hset(K.waits, mapping={"26": 4, "53": 1})  # what lease.lua counts, then the team's own
        if how == "100,000 fields":
            stuff(own, K.waits, 100_000)
        else:
            own.hset(K.waits, mapping={str(b): "9" * 1_000_000 for b in range(20)})
        return sample(relay)

    appended, took = script_us(admin, stuffed_sample)
    assert appended and took < BOUND_US, took
    last = admin.lindex(K.depth, -1)
    assert last.split(",", 1)[1] == "1,2,3,4"  # the depths, no histogram
    assert admin.hget(K.waits, "26") == "4"  # left as it was: the team's to delete
    own.delete(K.waits)  # a team that stops stuffing has its waits sampled again
    own.hset(K.waits, "26", 2)
    assert sample(relay) and admin.lindex(K.depth, -1).endswith(";26:2")


def test_the_most_a_lease_writes_is_still_sampled_whole(server: str, admin: redis.Redis) -> None:
    """Every bucket lease.lua may write (0..MAX_BUCKET), each with a count of six digits (a million
    first leases in 10 s): within the bounds, and the sample within what a read decodes."""
    relay = conn(server, "sluice-relay")
    team(server).hset(K.waits, mapping={str(b): "999999" for b in range(MAX_BUCKET + 1)})
    assert sample(relay)
    stored = admin.lindex(K.depth, -1)
    _, _, histogram = stored.partition(";")
    assert len(histogram.split(",")) == MAX_BUCKET + 1 and not admin.exists(K.waits)
    decoded = depth.decode(stored)
    assert decoded is not None and decoded[0].started == 999999 * (MAX_BUCKET + 1)


def test_a_histogram_a_read_would_skip_is_left_out_and_the_depths_kept(server: str,
                                                                      admin: redis.Redis) -> None:
    """200 hand-made fields of 250-byte names (within the field and byte bounds) made a 51 KB sample,
    which every read of the hour skipped (over MAX_SAMPLE), depths and all, and which stayed in the
    depth list: 720 of them 37 MB for the operator's read. Now the sample keeps its depths alone."""
    relay = conn(server, "sluice-relay")
    team(server).hset(K.waits, mapping={f"{n:03d}" + "x" * 247: "1" for n in range(200)})
    assert sample(relay)
    stored = admin.lindex(K.depth, -1)
    assert len(stored) <= depth.MAX_SAMPLE and stored.split(",", 1)[1] == "1,2,3,4"
    decoded = depth.decode(stored)
    assert decoded is not None and decoded[0].ready == 1 and not admin.exists(K.waits)


def test_sample_lua_keeps_the_cores_sample_bound() -> None:
    assert f"local MAX_SAMPLE = {depth.MAX_SAMPLE}\n" in source("sample.lua")


@pytest.mark.parametrize("how", ["100,000 fields", "a 10 MB sensitive value"])
def test_a_config_hash_a_team_stuffs_by_hand_is_read_only_as_far_as_the_fields_scripts_write(
        server: str, admin: redis.Redis, how: str) -> None:
    own = team(server)
    own.hset(K.config, mapping={"max_in_flight": "5", "paused": "1", "policy_attempts": "3"})
    if how == "100,000 fields":
        stuff(own, K.config, 100_000)
    else:
        own.hset(K.config, "sensitive", '["' + "x" * 10_000_000 + '"]')
    want = {"max_in_flight": "5", "paused": "1", "policy_attempts": "3"}
    for user in ("sluice-gateway", "sluice-relay", "sluice-operator"):
        c = conn(server, user)
        stats, took = script_us(admin, lambda c=c: c.scripts.stats(K))  # type: ignore[misc]
        assert took < BOUND_US and stats.config == want, (user, took)
    got = RedisQueueConfig(conn(server, "sluice-operator")).get_config("a")
    assert got.max_in_flight == 5 and got.paused and got.sensitive == ()


def test_a_config_as_large_as_config_lua_writes_is_read_whole(server: str, admin: redis.Redis) -> None:
    operator = conn(server, "sluice-operator")
    config = RedisQueueConfig(operator)
    config.set_config("a", max_in_flight=7, rate_per_s=2.5, paused=True, burst=3, high_watermark=10,
                      low_watermark=2, max_delayed=9, max_dead=8, max_in_flight_per_group=1,
                      max_bytes=1 << 40)
    # config.lua's longest sensitive list (32 entries of 1,024 characters; the API's are shorter)
    sensitive = json.dumps(["/" + f"{n:02d}" + "x" * 1_021 for n in range(32)])
    assert 32 * 1_024 < len(sensitive) <= 40_000
    operator.scripts.config(K, {"sensitive": sensitive})
    team(server).hset(K.config, "unknown_but_small", "1")  # read with the rest: within the bounds
    stats = operator.scripts.stats(K)
    assert len(stats.config) == 12 and stats.config["unknown_but_small"] == "1"
    assert stats.config["sensitive"] == sensitive
    assert config.get_config("a").max_bytes == 1 << 40


NEW_COMMANDS = {"+hlen", "+hstrlen", "+memory|usage"}


def test_a_user_whose_access_string_predates_the_bounds_still_runs_both_scripts(server: str,
                                                                                admin: redis.Redis) -> None:
    """While ElastiCache has not yet applied the template's new access strings, the new layer's
    scripts meet NOPERM on HLEN, MEMORY USAGE and HSTRLEN: they read the hashes whole, as before,
    rather than fail every stats call (the gateway's admission) and every sample."""
    for role in ("relay", "gateway"):
        rules = [r for r in acl.rules(role) if r not in NEW_COMMANDS]
        assert len(rules) == len(acl.rules(role)) - 3
        admin.execute_command("ACL", "SETUSER", f"old-{role}", "reset", "on", f">pw-old-{role}", *rules)
    own = team(server)
    own.hset(K.waits, mapping={"26": 4})
    own.hset(K.config, mapping={"max_in_flight": "5", "paused": "1"})
    old_relay = conn(server, "old-relay")
    assert sample(old_relay) and admin.lindex(K.depth, -1).endswith(";26:4")
    for user in ("old-relay", "old-gateway"):
        assert conn(server, user).scripts.stats(K).config == {"max_in_flight": "5", "paused": "1"}
    stuff(own, K.config, 40)  # over the field bound: the known fields, which need HSTRLEN
    assert conn(server, "old-gateway").scripts.stats(K).config["max_in_flight"] == "5"


def test_on_a_cluster_the_bounds_hold_and_a_script_lost_by_one_primary_is_loaded_again(
        redis_cluster: Any, redis_cluster_url: str) -> None:
    """MEMORY USAGE takes its key from KEYS (the queue's slot), and SCRIPT EXISTS asks every primary:
    a text one primary lost (its restart) counts as missing, so the loader loads it everywhere."""
    c = RedisConnection.from_url(redis_cluster_url)
    raw = c.client
    stuff(raw, K.waits, 1_000)
    assert c.scripts.sample(K, [1, 2, 3, 4], 720, 3_600_000, 0)
    assert raw.lindex(K.depth, -1).split(",", 1)[1] == "1,2,3,4"
    raw.hset(K.config, mapping={"max_in_flight": "5"})
    stuff(raw, K.config, 1_000)
    assert c.scripts.stats(K).config == {"max_in_flight": "5"}
    texts = {name: source(name) for name in acl.WORKER.scripts}
    loader = RedisScriptLoader(raw)
    loader.load(texts)
    assert loader.missing(texts) == {}
    with redis.Redis.from_url(redis_cluster.node_urls[1]) as node:
        node.script_flush()
    assert loader.missing(texts) == texts
    loader.load(texts)
    for url in redis_cluster.node_urls:
        with redis.Redis.from_url(url) as node:
            assert node.script_exists(*(sha1(t) for t in texts.values())) == [True] * 7
