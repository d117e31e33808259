"""Issue 27, item 2 (Redis): each function's Redis user, on a real redis-server with ACLs.

The users are ``sluice.backends.redis.acl``'s rules (the template's access strings are the same,
tests/infra/test_template_redis_users.py). A team's credentials get NOPERM on another team's keys
and write nothing; its own queue's lease life cycle works; each Sluice user runs its function's
real script methods, and is refused the ones of other functions.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
import redis

from sluice.backends.redis import acl
from sluice.backends.redis.admin import RedisAdmin
from sluice.backends.redis.config import RedisQueueConfig
from sluice.backends.redis.connection import RedisConnection
from sluice.backends.redis.keys import QUEUES_KEY, QueueKeys
from sluice.backends.redis.queue import RedisJobQueue
from sluice.backends.redis.relay_engine import RedisRelayEngine
from sluice.backends.redis.scripts import RedisScriptLoader, source, worker_allow_list
from sluice.core.config import Settings
from sluice.core.errors import ConfigError, NotPermitted, ScriptNotAllowed
from sluice.core.models import DecodedJob, SettleEntry
from sluice.core.script_loads import ScriptIntake, request, sha1
from sluice.relay.ownership import RELAY_QUEUE, partition_job
from sluice.relay.recovery.adapters import RedisEpochs
from tests.backends.acl_support import acl_server, admin_client
from tests.backends.test_engine_support import snapshot, spec

pytestmark = pytest.mark.integration

USERS: dict[str, tuple[str, list[str] | None]] = {
    "team-a": ("worker", ["a", "thumbs-*"]), "team-b": ("worker", ["b"]),
    "sluice-worker": ("worker", None), "sluice-gateway": ("gateway", None),
    "sluice-operator": ("operator", None), "sluice-relay": ("relay", None),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from acl_server(tmp_path_factory.mktemp("redis-acl"), USERS)


@pytest.fixture
def admin(server: str) -> Iterator[redis.Redis]:
    yield from admin_client(server)


def conn(url: str, user: str, *, loader: bool = True) -> RedisConnection:
    """As ``user``; a worker's connection (whose user may not SCRIPT LOAD) with the loader its
    composition root gives it (``loader``), played by ``InternalLoader``."""
    c = RedisConnection.from_settings(Settings(redis_url=url, redis_username=user,
                                               redis_password=f"pw-{user}"))  # type: ignore[arg-type]
    if loader and USERS[user][0] == "worker":
        c.scripts.use_loader(InternalLoader(url), acl.WORKER.scripts)
    return c


class InternalLoader:
    """A worker's ``ScriptLoader`` as the internal function answers it: its call, checked against
    the allow-list (``ScriptIntake``), then SCRIPT LOAD as the internal function's user (the gateway's)."""

    def __init__(self, url: str) -> None:
        self.url, self.calls = url, 0

    def load(self, texts: Mapping[str, str]) -> None:
        self.calls += 1
        gateway = conn(self.url, "sluice-gateway")
        try:
            ScriptIntake(RedisScriptLoader(gateway.client), worker_allow_list())(request(texts))
        finally:
            gateway.close()


def refused(call: Callable[[], Any]) -> None:
    """``call`` fails with NOPERM (through the adapter: NotPermitted)."""
    with pytest.raises((NotPermitted, redis.exceptions.ResponseError)) as err:
        call()
    text = str(err.value)
    assert isinstance(err.value, NotPermitted | redis.exceptions.NoPermissionError) or "can't" in text, text


def test_a_team_runs_its_own_queues_lease_life_cycle(server: str, admin: redis.Redis) -> None:
    full = RedisJobQueue(RedisConnection.from_url(server))
    full.enqueue_many([spec(f"j{i}", "a") for i in range(4)] + [spec("t1", "thumbs-small")])
    team = RedisJobQueue(conn(server, "team-a"))
    first, second, third, fourth = team.lease("a", 4, 30_000, "w1")
    assert team.extend("a", first.job_id, first.lease_token, 30_000).deadline_ms > 0
    team.ack("a", first.job_id, first.lease_token)
    assert team.fail("a", second.job_id, second.lease_token, "boom", 0) == "retry"
    team.release("a", third.job_id, third.lease_token)
    assert team.fail("a", fourth.job_id, fourth.lease_token, "bad", permanent=True) == "dead"
    assert team.idle("a", "w1", 1_000) == 1 and team.idle("a", "w1", 0) == 0
    assert team.wait_for_work("a", 10) is False
    assert team.wait_for_work("a", 10, "w1") is False  # its own wake list: a queue key too
    (thumb,) = team.lease("thumbs-small", 1)
    team.ack("thumbs-small", thumb.job_id, thumb.lease_token)


def test_a_teams_credentials_get_noperm_on_another_teams_keys_and_write_nothing(
        server: str, admin: redis.Redis) -> None:
    full = RedisJobQueue(RedisConnection.from_url(server))
    full.enqueue_many([spec("b1", "b"), spec("a1", "a")])
    before = snapshot(admin)
    team = RedisJobQueue(conn(server, "team-a"))
    raw = team.conn.client
    b, a = QueueKeys("b"), QueueKeys("a")
    lease_sha = admin.script_load(source("lease.lua"))  # loaded by someone else: still refused
    other_from_inside = admin.script_load(f"return redis.call('DEL', '{b.ready}')")
    for call in (lambda: raw.script_load("return 1"), lambda: raw.lpush(b.wake, "x"),
                 lambda: raw.hget(b.job("b1"), "p"),
                 lambda: raw.zadd(b.ready, {"evil": 0}),
                 lambda: raw.evalsha(lease_sha, 10, b.job_prefix, b.ready, b.delayed, b.leased, b.dead,
                                     b.tokens, b.seq, b.config, b.settle, b.finished, 1, 1000, 1),
                 lambda: raw.evalsha(other_from_inside, 1, a.ready),  # own KEYS, another's key inside
                 lambda: raw.eval("return 1", 0), lambda: raw.flushall(), lambda: raw.flushdb(),
                 lambda: raw.keys("*"), lambda: raw.scan(0), lambda: raw.config_get("*"),
                 lambda: raw.execute_command("ACL", "LIST"), lambda: raw.script_flush(),
                 lambda: raw.sadd(QUEUES_KEY, "x"), lambda: raw.get("sluice:epoch"),
                 lambda: raw.execute_command("DEBUG", "SLEEP", "0"),
                 lambda: team.lease("b", 1), lambda: team.ack("b", "b1", 1), lambda: team.cancel("b", "b1"),
                 lambda: team.lease(RELAY_QUEUE, 1), lambda: team.enqueue(spec("x", "a"))):
        refused(call)
    assert snapshot(admin) == before


ENDLESS = "while true do end"


def test_a_team_may_not_load_its_own_lua_so_cannot_stall_the_shared_redis(server: str,
                                                                          admin: redis.Redis) -> None:
    """The hole (docs/security.md): a team's user could SCRIPT LOAD an endless loop and EVALSHA it,
    and every other client got BUSY. Now SCRIPT LOAD is NOPERM for every worker user, and the
    internal function's load takes only shipped worker scripts: the loop is never in the cache."""
    for user in ("team-a", "team-b", "sluice-worker"):
        raw = conn(server, user).client
        refused(lambda raw=raw: raw.script_load(ENDLESS))  # type: ignore[misc]
        refused(lambda raw=raw: raw.eval(ENDLESS, 0))  # type: ignore[misc]
    with pytest.raises(ScriptNotAllowed, match="deploy Sluice's stack first"):
        InternalLoader(server).load({"lease.lua": ENDLESS})
    with pytest.raises(ScriptNotAllowed):  # one bad text: none of the call is loaded
        InternalLoader(server).load({"ack.lua": source("ack.lua"), "lease.lua": ENDLESS})
    assert admin.script_exists(sha1(ENDLESS)) == [False]


def test_after_redis_lost_its_scripts_a_teams_worker_has_them_loaded_by_the_internal_function(
        server: str, admin: redis.Redis) -> None:
    """After a restart or failover (SCRIPT FLUSH here) a worker's EVALSHA meets NOSCRIPT; its user
    may not SCRIPT LOAD, so it asks its loader once (every worker script at once) and runs again."""
    RedisJobQueue(RedisConnection.from_url(server)).enqueue_many([spec("f1", "a"), spec("f2", "a")])
    admin.script_flush()
    alone = RedisJobQueue(conn(server, "team-a", loader=False))
    refused(lambda: alone.lease("a", 1))  # NOSCRIPT, then its own SCRIPT LOAD: NOPERM
    assert admin.script_exists(sha1(source("lease.lua"))) == [False]
    team = RedisJobQueue(conn(server, "team-a"))
    loader = team.conn.scripts.loader
    assert isinstance(loader, InternalLoader)
    first, second = team.lease("a", 2, 30_000, "w1")
    team.ack("a", first.job_id, first.lease_token)
    assert team.fail("a", second.job_id, second.lease_token, "boom", 0) == "retry"
    assert team.idle("a", "w1", 0) == 0
    assert loader.calls == 1  # the first NOSCRIPT loaded them all
    assert admin.script_exists(*(sha1(source(n)) for n in acl.WORKER.scripts)) == [True] * 7
    assert admin.script_exists(sha1(ENDLESS)) == [False]


def test_the_default_worker_reaches_every_public_queue_but_no_reserved_one(server: str,
                                                                           admin: redis.Redis) -> None:
    RedisJobQueue(RedisConnection.from_url(server)).enqueue(spec("c1", "c"))
    worker = RedisJobQueue(conn(server, "sluice-worker"))
    (job,) = worker.lease("c", 1)
    worker.ack("c", job.job_id, job.lease_token)
    refused(lambda: worker.lease(RELAY_QUEUE, 1))
    refused(lambda: worker.registry("c"))
    refused(lambda: worker.conn.client.flushall())


def _dead_job(server: str, queue: str, job_id: str) -> None:
    full = RedisJobQueue(RedisConnection.from_url(server))
    full.enqueue(spec(job_id, queue, max_attempts=1))
    (job,) = full.lease(queue, 1)
    assert full.fail(queue, job.job_id, job.lease_token, "x", permanent=True) == "dead"


def test_the_gateway_runs_the_public_apis_calls_only(server: str, admin: redis.Redis) -> None:
    _dead_job(server, "g", "g-dead")
    RedisJobQueue(RedisConnection.from_url(server)).enqueue_many([spec("g1", "g"), spec("g2", "g")])
    gateway = RedisJobQueue(conn(server, "sluice-gateway"))
    assert gateway.stats("g").ready == 2 and gateway.registry("g") == (True, 1)
    assert gateway.memory_percent() is None
    assert gateway.holds("g", "g1") is True
    assert gateway.cancel("g", "g2") == "removed"
    # Not refused: config.lua on a public queue (its commands, HMGET/HSET, are cancel's too, and an
    # ACL is per key, not per field); since issue 28 the gateway registers a new queue (its reservation
    # before a 202: test_the_gateway_reserves_a_new_queue_within_the_limit_as_its_user).
    for call in (lambda: gateway.purge_dead("g"), lambda: gateway.redrive("g"), lambda: gateway.queues(),
                 lambda: gateway.lease("g", 1),
                 lambda: gateway.stats(RELAY_QUEUE), lambda: gateway.conn.client.flushall()):
        refused(call)


def test_the_gateway_reserves_a_new_queue_within_the_limit_as_its_user(server: str,
                                                                      admin: redis.Redis) -> None:
    """Issue 28: the gateway's user runs register.lua (its reservation before a 202) and, on a cache
    Redis lost, registry_load.lua (loaded from the durable registry), on the registry's three keys;
    it still lists nothing (no SMEMBERS) and touches no reserved queue's keys."""
    from sluice.backends.redis.keys import REGISTRY_LOADED_KEY
    from sluice.core.errors import QueueNotAllowed
    from sluice.core.limits import Limits

    RedisRelayEngine(conn(server, "sluice-relay")).enqueue_internal(partition_job("sluice.jobs", 0, 30_000))
    user = conn(server, "sluice-gateway")
    gateway = RedisJobQueue(RedisConnection(user.client, Limits(max_queues=2)))
    gateway.conn.registry_source = lambda: ["known"]  # what DynamoDB's queues table holds
    assert gateway.register("fresh") is True  # cold: loaded "known" first, then 1 of 2 public names
    assert admin.get(REGISTRY_LOADED_KEY) == "1"
    assert gateway.registry("fresh") == (True, 2)  # sluice-relay does not count
    with pytest.raises(QueueNotAllowed, match="registry full"):
        gateway.register("third")
    assert admin.smembers(QUEUES_KEY) == {"known", "fresh", RELAY_QUEUE}
    refused(lambda: user.client.smembers(QUEUES_KEY))
    refused(lambda: gateway.lease(RELAY_QUEUE, 1))  # the reserved queue's keys stay the relay's


def test_the_operator_runs_the_admin_calls_only(server: str, admin: redis.Redis) -> None:
    _dead_job(server, "o", "o-dead")
    _dead_job(server, "o", "o-dead2")
    op = conn(server, "sluice-operator")
    ops, config = RedisAdmin(op), RedisQueueConfig(op)
    assert ops.stats("o").dead == 2 and ops.queues() == ["o"] and ops.registry("o") == (True, 1)
    assert [d.job_id for d in ops.dead_letters("o")] == ["o-dead", "o-dead2"]
    assert ops.dead_spec("o", "o-dead").job_id == "o-dead"
    assert ops.redrive("o", "o-dead", 1) == 1 and ops.purge_dead("o") == 1
    assert config.set_config("o", paused=True).paused and config.get_config("o").paused
    assert ops.overdue_leases("o") == 0 and ops.memory_percent() is None
    queue = RedisJobQueue(op)
    for call in (lambda: queue.lease("o", 1), lambda: queue.cancel("o", "o-dead"),
                 lambda: op.client.get("sluice:epoch"), lambda: ops.stats(RELAY_QUEUE),
                 lambda: op.client.flushall()):
        refused(call)


def test_the_relay_runs_its_calls(server: str, admin: redis.Redis) -> None:
    relay = RedisRelayEngine(conn(server, "sluice-relay"))
    records = [(o, DecodedJob(f"r{o}", "r", f'{{"n":{o}}}', 0, 1, 30_000, 0, 1_700_000_000_000))
               for o in range(3)]
    (pushed,) = relay.push_many("sluice.jobs", [("r", 0, 7, records)])
    assert not isinstance(pushed, Exception) and pushed.pushed == 3
    assert relay.relayed_offset("r", "sluice.jobs", 0, 7) == 2
    relay.register("r")
    assert relay.take_rate("r", 1) >= 0
    assert relay.enqueue_internal(partition_job("sluice.jobs", 0, 30_000)) is True
    (own,) = relay.lease(RELAY_QUEUE, 1, 30_000, "relay-1")
    relay.extend(RELAY_QUEUE, own.job_id, own.lease_token, 30_000)
    relay.release(RELAY_QUEUE, own.job_id, own.lease_token)
    (own,) = relay.lease(RELAY_QUEUE, 1, 30_000, "relay-1")
    relay.ack(RELAY_QUEUE, own.job_id, own.lease_token)
    assert relay.reap("r") == 0 and relay.stats("r").ready == 3 and relay.queues() == ["r", RELAY_QUEUE]
    _dead_job(server, "r", "r-dead")
    full = RedisJobQueue(RedisConnection.from_url(server))
    full.enqueue(spec("r-cancel", "r"))
    assert full.cancel("r", "r-cancel", settle=True) == "removed"  # an ending the relay settles
    assert relay.unsettled("r")
    assert relay.settled("r", [SettleEntry.parse(e.member, "r", e.ended_at_ms, None)
                               for e in relay.unsettled("r")]) == 1
    assert relay.trim_dead("r", 0, 1)[1] == 0 and relay.redrive("r") >= 0  # ran as the relay: no NOPERM
    relay.set_config("r", rate_per_s=5.0)
    assert relay.memory_percent() is None
    epochs = RedisEpochs(relay.client)
    assert epochs.current() == epochs.peek() and epochs.rebase("r", "sluice.jobs", 0, 8, 1) is True
    refused(lambda: relay.client.flushall())
    refused(lambda: relay.client.keys("*"))


def test_a_function_connects_as_its_user_from_its_settings(server: str, admin: redis.Redis) -> None:
    """``RedisConnection.from_settings`` authenticates as ``redis_username`` (CLIENT LIST names it)."""
    c = conn(server, "team-b")
    c.client.ping()
    assert "team-b" in {client["user"] for client in admin.client_list()}


def test_a_users_rotated_password_is_read_again_after_wrongpass(server: str, admin: redis.Redis,
                                                                 moto_url: str, unique: str) -> None:
    """The user's secret ({"username", "password"}) changes in Secrets Manager and then in Redis (the
    rotation gives the user the new password): a new connection meets WRONGPASS, re-reads, goes on."""
    import boto3

    name = f"rot-{unique}"
    admin.execute_command(*acl.setuser_args(name, "first", "worker", ["rot"]))
    settings = Settings(aws_endpoint_url=moto_url, redis_url=server)
    sm = boto3.client("secretsmanager", region_name=settings.aws_region, endpoint_url=moto_url)
    arn = sm.create_secret(Name=f"sluice/test/redis/{name}",
                           SecretString=json.dumps({"username": name, "password": "first"}))["ARN"]
    RedisJobQueue(RedisConnection.from_url(server)).enqueue_many([spec("r1", "rot"), spec("r2", "rot")])
    mine = settings.model_copy(update={"redis_auth_secret_arn": arn})
    queue = RedisJobQueue(RedisConnection.from_settings(mine))
    queue.conn.scripts.use_loader(InternalLoader(server), acl.WORKER.scripts)
    try:
        assert [j.job_id for j in queue.lease("rot", 1)] == ["r1"]
        sm.put_secret_value(SecretId=arn, SecretString=json.dumps({"username": name, "password": "second"}))
        admin.execute_command(*acl.setuser_args(name, "second", "worker", ["rot"]))
        admin.client_kill_filter(_type="normal", skipme=True)
        assert [j.job_id for j in queue.lease("rot", 1)] == ["r2"]  # WRONGPASS, re-read, retried
        with pytest.raises(NotPermitted):
            queue.lease("other", 1)
        other = settings.model_copy(update={"redis_auth_secret_arn": arn, "redis_username": "someone-else"})
        with pytest.raises(ConfigError):
            RedisConnection.from_settings(other).client.ping()
    finally:
        queue.close()


def test_a_worker_appends_a_jobs_timeline_and_the_operator_reads_it_as_their_users(
        server: str, admin: redis.Redis) -> None:
    """Issue 32: timeline.lua as a team's worker user (its own queues only), LRANGE as the operator."""
    from sluice.backends.redis.timeline import RedisTimeline
    from sluice.core import timeline

    team = RedisTimeline(conn(server, "team-a"), ttl_ms=60_000)
    team.append("a", "j1", [timeline.encode("grant", 1, worker="w", token=3)])
    refused(lambda: team.append("b", "j1", [timeline.encode("grant", 1, token=3)]))
    assert not admin.exists(QueueKeys("b").timeline("j1"))
    assert RedisTimeline(conn(server, "sluice-operator"), ttl_ms=1000).read("a", "j1")[0]["token"] == 3
    refused(lambda: RedisTimeline(conn(server, "sluice-gateway"), ttl_ms=1000).read("a", "j1"))


def test_the_operator_lists_grouped_ready_jobs_and_marks_sensitive_fields_as_its_user(server: str,
                                                                           admin: redis.Redis) -> None:
    """Issue 32's review: listing.lua (a fair group's ready jobs) and the sensitive setting
    (config.lua's field) as the operator's Redis user."""
    from tests.backends.test_engine_support import make_queue

    for rq in make_queue(server):
        rq.enqueue_many([spec("lg-1", queue="lg", group="t1"), spec("lg-2", queue="lg"),
                         spec("lg-3", queue="lg", group="t2")])
    op = conn(server, "sluice-operator")
    ops, config = RedisAdmin(op), RedisQueueConfig(op)
    assert sorted(j.job_id for j in ops.list_jobs("lg", "ready").jobs) == ["lg-1", "lg-2", "lg-3"]
    assert ops.list_jobs("lg", "ready", prefix="lg-3").jobs[0].group == "t2"
    assert config.set_config("lg", sensitive=["/id"]).sensitive == ("/id",)


def _loads(admin: redis.Redis) -> int:
    """SCRIPT LOADs since the slow log was reset (every command is logged: the fixture's threshold 0;
    Redis 6.2's commandstats count SCRIPT as one command)."""
    commands = (e["command"] for e in admin.slowlog_get(4096))
    return sum(1 for c in commands if (c.decode() if isinstance(c, bytes) else c).startswith("SCRIPT LOAD"))


def test_a_team_repeating_load_scripts_has_redis_load_nothing_already_cached(server: str,
                                                                            admin: redis.Redis) -> None:
    """Session 36: any team's worker may invoke the internal function's load_scripts in a loop with
    the shipped texts. Each call SCRIPT LOADed all seven (Redis hashed about 70 KB again each time);
    now one SCRIPT EXISTS finds them cached and nothing is loaded, until Redis loses them."""
    texts = {name: source(name) for name in acl.WORKER.scripts}
    intake = InternalLoader(server)
    admin.script_flush()
    admin.config_set("slowlog-max-len", 4096)
    admin.config_set("slowlog-log-slower-than", 0)
    admin.slowlog_reset()
    intake.load(texts)
    assert _loads(admin) == 7
    for _ in range(20):
        intake.load(texts)
    assert _loads(admin) == 7  # before: 7 more a call
    admin.script_flush()  # a restart or failover: the next call loads them all again
    intake.load({"lease.lua": texts["lease.lua"], "ack.lua": texts["ack.lua"]})
    assert _loads(admin) == 9
    intake.load(texts)
    assert _loads(admin) == 14
    assert admin.script_exists(*(sha1(t) for t in texts.values())) == [True] * 7
    admin.config_set("slowlog-log-slower-than", 10_000)


def test_a_loader_whose_user_predates_script_exists_loads_every_text(server: str, admin: redis.Redis) -> None:
    """A gateway user whose access string ElastiCache has not yet changed (no ``script|exists``)
    loads every text, as before session 36, rather than fail a worker's load."""
    rules = [r for r in acl.rules("gateway") if r != "+script|exists"]
    assert len(rules) == len(acl.rules("gateway")) - 1
    admin.execute_command("ACL", "SETUSER", "old-gateway", "reset", "on", ">pw-old-gateway", *rules)
    old = RedisConnection.from_settings(Settings(redis_url=server, redis_username="old-gateway",
                                                 redis_password="pw-old-gateway"))  # type: ignore[arg-type]
    admin.script_flush()
    texts = {name: source(name) for name in acl.WORKER.scripts}
    ScriptIntake(RedisScriptLoader(old.client), worker_allow_list())(request(texts))
    assert admin.script_exists(*(sha1(t) for t in texts.values())) == [True] * 7
    refused(lambda: old.client.execute_command("SCRIPT", "EXISTS", sha1(texts["ack.lua"])))
