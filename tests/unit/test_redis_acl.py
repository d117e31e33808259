"""The Redis ACL rules of each function (``sluice.backends.redis.acl``), pure: the key patterns
against Redis's glob, the commands against the Lua sources, nothing dangerous granted.

Real redis-server checks of the same rules: tests/backends/test_redis_acl.py."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import fields
from importlib import resources

import pytest
import redis

from sluice.backends.redis import acl
from sluice.backends.redis.auth import RotatingToken
from sluice.backends.redis.keys import EPOCH_KEY, QUEUES_KEY, QueueKeys, shard_epoch_key
from sluice.backends.redis.scripts import source, translate
from sluice.core.errors import BackendUnavailable, InvalidQueueName, NotPermitted

_CALL = re.compile(r"""redis\.p?call\(\s*['"]([A-Za-z]+)['"]""")
# A command granted by its subcommand only (acl.SCRIPT_COMMANDS): its calls name it literally.
_SUBCOMMAND = re.compile(r"""redis\.p?call\(\s*['"](MEMORY)['"]\s*,\s*['"]([A-Za-z]+)['"]""")


def called_commands(text: str) -> set[str]:
    """The commands ``text`` calls by name, lower case; ``memory|usage`` for a MEMORY USAGE."""
    whole = {c.lower() for c in _CALL.findall(text)}
    subs = {f"{c.lower()}|{sub.lower()}" for c, sub in _SUBCOMMAND.findall(text)}
    return (whole - {c.split("|")[0] for c in subs}) | subs if subs else whole


def redis_glob(pattern: str, key: str) -> bool:
    """Redis's stringmatch for the patterns used here: *, ?, [..], [^..]; braces literal."""
    return fnmatch.fnmatchcase(key, pattern.replace("[^", "[!"))


def allowed(rules: list[str], key: str) -> bool:
    return any(redis_glob(r[1:], key) for r in rules if r.startswith("~"))


def queue_keys(queue: str) -> list[str]:
    k = QueueKeys(queue)
    props = ["ready", "delayed", "leased", "dead", "settle", "tokens", "seq", "config", "bucket", "idle",
             "wake", "finished", "job_prefix"]
    return [getattr(k, p) for p in props] + [k.job("job-1"), k.relayed("sluice.jobs", 3)]


def lua_scripts() -> list[str]:
    folder = resources.files("sluice.backends.redis") / "lua"
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".lua") and p.name != "_lib.lua")


def _lua(name: str) -> str:
    return (resources.files("sluice.backends.redis") / "lua" / name).read_text(encoding="utf-8")


def derived_commands(script: str) -> set[str]:
    """The commands ``script`` can call: its body's, and those of every _lib.lua helper it calls,
    directly or through another helper (a call by name: the scripts pass no functions around)."""
    helpers = {m.group(1): m.group(0) for m in
               re.finditer(r"(?ms)^local function (\w+)\(.*?(?=^local function |\Z)", _lua("_lib.lua"))}

    def called(text: str) -> set[str]:
        return {h for h in helpers if re.search(rf"\b{h}\s*\(", text)}

    body = _lua(script).replace("--@include _lib.lua", "")
    todo, seen = called(body), set()
    while todo:
        helper = todo.pop()
        if helper not in seen:
            seen.add(helper)
            todo |= called(helpers[helper].split("\n", 1)[1])  # not its own header
    return {c for text in [body, *(helpers[h] for h in seen)] for c in called_commands(text)}


def test_script_commands_are_exactly_what_each_lua_source_calls() -> None:
    assert sorted(acl.SCRIPT_COMMANDS) == lua_scripts()
    for name, listed in acl.SCRIPT_COMMANDS.items():
        assert set(listed) == derived_commands(name), name
        called = called_commands(source(name))
        assert set(listed) <= called, name  # and each is called somewhere in its source


def test_no_command_is_called_but_by_name() -> None:
    """The derivation above reads ``redis.call('NAME'``: a computed command name would escape it."""
    for name in [*lua_scripts(), "_lib.lua"]:
        assert len(re.findall(r"redis\.p?call\(", _lua(name))) == len(_CALL.findall(_lua(name))), name


@pytest.mark.parametrize("role", sorted(acl.ROLES))
def test_no_role_may_run_a_dangerous_command(role: str) -> None:
    commands = {r[1:] for r in acl.rules(role, ["a"]) if r.startswith("+")}
    assert not commands & acl.FORBIDDEN
    assert not any(r.startswith("+@") or r in {"allcommands", "allkeys", "~*", "nopass"} for r in
                   acl.rules(role, ["a"]))
    assert acl.rules(role, ["a"]).index("-@all") < min(i for i, r in enumerate(acl.rules(role, ["a"]))
                                                        if r.startswith("+"))


def test_a_team_worker_reaches_its_own_queues_keys_only() -> None:
    rules = acl.rules("worker", ["payments", "thumbs-*"])
    for queue in ("payments", "thumbs-small", "thumbs-"):
        assert all(allowed(rules, key) for key in queue_keys(queue)), queue
    for queue in ("payments2", "paymentsx", "thumbs", "thumbsx", "other", "sluice-relay", "p"):
        assert not any(allowed(rules, key) for key in queue_keys(queue)), queue
    for key in (QUEUES_KEY, EPOCH_KEY, shard_epoch_key("abc"), "other", "sluice:{payments}"):
        assert not allowed(rules, key), key


def test_a_prefix_pattern_is_the_queue_pattern_with_literal_braces() -> None:
    assert acl.queue_key_pattern("thumbs-*") == "~sluice:{thumbs-*}:*"
    assert acl.queue_key_pattern("payments") == "~sluice:{payments}:*"


@pytest.mark.parametrize("bad", ["*", "s*", "sluice*", "sluice-*", "sluice-relay", "sluice-x*", "a*b", "a**",
                                 "a}b", "a]*", "[a]*", "A", "", "a:b", "a?*", 7])
def test_a_queue_pattern_that_could_reach_others_or_sluices_own_is_refused(bad: object) -> None:
    with pytest.raises(InvalidQueueName):
        acl.queue_key_pattern(bad)  # type: ignore[arg-type]


def test_a_worker_without_queues_is_refused() -> None:
    with pytest.raises(InvalidQueueName):
        acl.rules("worker", [])


@pytest.mark.parametrize("queue", ["a", "s", "sl", "slu", "slui", "sluic", "sluice", "sluicex", "sluice_x",
                                   "sluicee-x", "slx", "t", "0", "s-", "sluic-e", "x" * 64])
def test_public_patterns_cover_every_public_queue(queue: str) -> None:
    rules = acl.public_queue_patterns()
    assert all(allowed(rules, key) for key in queue_keys(queue))


@pytest.mark.parametrize("queue", ["sluice-relay", "sluice-", "sluice-x", "sluice-relay-ownership"])
def test_public_patterns_cover_no_reserved_queue_and_no_global_key(queue: str) -> None:
    rules = acl.public_queue_patterns()
    assert not any(allowed(rules, key) for key in queue_keys(queue))
    assert not any(allowed(rules, key) for key in (QUEUES_KEY, EPOCH_KEY, shard_epoch_key("x")))


def test_the_default_worker_gets_every_public_queue_and_no_global_key() -> None:
    rules = acl.rules("worker")
    assert allowed(rules, QueueKeys("anything").ready)
    assert not allowed(rules, QueueKeys("sluice-relay").ready)
    assert not allowed(rules, QUEUES_KEY)


def test_gateway_and_operator_reach_the_registry_not_the_epoch_nor_reserved_queues() -> None:
    for role in ("gateway", "operator"):
        rules = acl.rules(role)
        assert allowed(rules, QUEUES_KEY) and allowed(rules, QueueKeys("a").job("j"))
        assert not allowed(rules, EPOCH_KEY) and not allowed(rules, QueueKeys("sluice-relay").ready)


def test_the_relay_reaches_every_sluice_key_and_nothing_else() -> None:
    rules = acl.rules("relay")
    assert all(allowed(rules, k) for k in [*queue_keys("sluice-relay"), QUEUES_KEY, EPOCH_KEY,
                                            shard_epoch_key("x")])
    assert not allowed(rules, "other:key")


def test_each_role_runs_the_scripts_of_its_function() -> None:
    """What each function's code calls (read in backends/redis: queue, admin, config, relay_engine,
    relay/recovery); the real calls as each user: tests/backends/test_redis_acl.py."""
    assert set(acl.WORKER.scripts) == {"lease.lua", "extend.lua", "ack.lua", "fail.lua", "release.lua",
                                       "idle.lua", "timeline.lua"}
    # Issue 32: a job's timeline (timeline.lua) needs no command a worker did not have; the operator
    # reads it (LRANGE), nobody else does.
    assert "lrange" in acl.OPERATOR.all_commands()
    assert "lrange" not in acl.WORKER.all_commands() + acl.GATEWAY.all_commands()
    assert "push.lua" in acl.RELAY.scripts and "rebase.lua" in acl.RELAY.scripts
    assert "purge.lua" not in acl.GATEWAY.scripts and "purge.lua" in acl.OPERATOR.scripts
    # Issue 28: the gateway reserves a new queue before its first 202 (register.lua), and loads the
    # registry's cache after a Redis loss (registry_load.lua); it still lists nothing (no SMEMBERS).
    assert {"register.lua", "registry_load.lua"} <= set(acl.GATEWAY.scripts)
    assert "smembers" not in acl.GATEWAY.all_commands()
    assert "push.lua" not in acl.OPERATOR.scripts + acl.GATEWAY.scripts + acl.WORKER.scripts
    assert not {"set", "get"} & set(acl.WORKER.commands)


def test_no_worker_may_load_a_script_and_sluices_own_roles_may() -> None:
    """A team's user that could SCRIPT LOAD could run ``while true do end`` and stall every team
    (docs/security.md): the internal function loads a worker's scripts; EVAL is never granted."""
    assert not {"script|load", "script", "eval"} & set(acl.WORKER.all_commands())
    assert "script|load" not in acl.worker_command_rules().replace("+", " ").split()
    assert "script|load" not in acl.rules("worker", ["a"]) and "+script|load" not in acl.rules("worker", None)
    for role in (acl.GATEWAY, acl.OPERATOR, acl.RELAY):
        assert "script|load" in role.all_commands(), role.name
        assert not {"eval", "script", "script|kill", "script|flush"} & set(role.all_commands())


def test_access_strings_and_setuser_args() -> None:
    assert acl.access_string("worker", ["a"]) == "on ~sluice:{a}:* " + acl.worker_command_rules()
    assert acl.worker_command_rules().startswith("-@all +")
    args = acl.setuser_args("team-a", "pw", "worker", ["a"])
    assert args[:6] == ["ACL", "SETUSER", "team-a", "reset", "on", ">pw"]
    line = acl.acl_file_line("team-a", "pw", "worker", ["a"])
    assert line.startswith("user team-a on #") and "pw" not in line.split()


def test_every_function_role_is_a_role() -> None:
    assert set(acl.FUNCTION_ROLES.values()) <= set(acl.ROLES)
    assert "CountdownFunction" not in acl.FUNCTION_ROLES and "EventsFunction" not in acl.FUNCTION_ROLES
    assert {f.name for f in fields(acl.Role)} >= {"scripts", "commands"}


def test_noperm_becomes_not_permitted_with_a_clear_message() -> None:
    direct = translate(redis.exceptions.NoPermissionError(
        "this user has no permissions to run the 'flushall' command or its subcommand"))
    inner = translate(redis.exceptions.ResponseError(
        "Error running script (call to f_1): @user_script:1: @user_script: 1: The user executing the script "
        "can't access at least one of the keys mentioned in the command arguments"))
    for exc in (direct, inner):
        assert isinstance(exc, NotPermitted) and "Redis user" in str(exc) and exc.code == "NOT_PERMITTED"
    assert isinstance(translate(redis.exceptions.AuthenticationError("WRONGPASS")), BackendUnavailable)


def test_credentials_with_a_username_are_read_again_when_refused() -> None:
    reads = iter([("team-a", "one"), ("team-a", "two")])
    creds = RotatingToken(lambda: next(reads))
    assert creds.get_credentials() == ("team-a", "one")
    assert creds.refresh(("team-a", "one")) is True
    assert creds.get_credentials() == ("team-a", "two")
    assert creds.refresh(("team-a", "one")) is True  # already changed: no second read
    assert RotatingToken(lambda: "token").get_credentials() == ("token",)
