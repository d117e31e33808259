"""Redis ACL rules for each function that talks to Redis (ElastiCache RBAC; ``sluice dev``'s redis-server).

Pure: a role and, for a worker, the queues it serves (names and prefix patterns such as
``thumbs-*``) in, Redis ACL rules out. ``template.yaml``'s ``AWS::ElastiCache::User``
resources carry ``access_string`` of each role (tests/infra checks they are equal), and
``sluice dev`` sets the same users on its redis-server (``setuser_args``).

Keys. Every key of queue ``q`` is ``sluice:{q}:*`` (``keys``), so a queue's keys are one glob:
``~sluice:{q}:*``; a prefix pattern ``thumbs-*`` becomes ``~sluice:{thumbs-*}:*``. Braces are
literal in Redis's glob, and a queue name holds none of ``{}:[]*?\\``, so the pattern matches
the keys of exactly the queues whose names match ``thumbs-*``. A worker touches no global key
(its scripts, lease/extend/ack/fail/release/idle, and the BLPOP of its wake list take only its
queue's keys), so a team's user needs nothing beyond its queues' patterns. The global keys
(``sluice:queues`` and its companions ``sluice:queues:{sluice:queues}:*``, ``sluice:epoch*``) are the
relay's, and the registry's keys also the gateway's (it reserves a new queue before its first 202)
and the operator's.

Commands. Scripts run with the caller's permissions: Redis checks EVALSHA's KEYS against the
user's key patterns, and then each ``redis.call`` inside the script against its commands and
keys. A user that may EVALSHA and SCRIPT LOAD can therefore run any Lua it writes, but only
with the commands and keys listed here; so each role's commands are exactly those its scripts
call (``SCRIPT_COMMANDS``, checked against the Lua sources by tests/unit/test_redis_acl.py)
plus the few it sends itself. Nothing else: no FLUSHALL/FLUSHDB, KEYS, SCAN, CONFIG, ACL,
DEBUG, MONITOR, SCRIPT FLUSH/KILL, SHUTDOWN, CLIENT, MODULE, EVAL (redis-py's scripts use
EVALSHA, and SCRIPT LOAD after a NOSCRIPT).

SCRIPT LOAD. Only Sluice's own roles (``loads_scripts``): a team's user that could load its own
Lua could load ``while true do end``, and its EVALSHA would stall the shared Redis for every
team (BUSY), with no Sluice user allowed SCRIPT KILL, and a script that wrote first cannot be
killed at all. A worker's scripts are loaded for it by the internal function, which loads only
texts on the allow-list of shipped worker scripts (``lua/worker_scripts.sha1``; docs/security.md).

The syntax is Redis 6.2's (ElastiCache accepts it; the local redis-server is 6.2): no
selectors, no ``%R~`` read-only patterns, no ``reset`` (ElastiCache refuses it in an access
string; ``setuser_args`` resets locally before the rules).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass

from sluice.backends.redis.keys import CALLER_BUCKETS, PREFIX, REGISTRY_KEYS
from sluice.core.errors import InvalidQueueName
from sluice.core.models import RESERVED_QUEUE_PREFIX, validate_public_queue

# The commands each script calls: its own body's, and those of the _lib.lua helpers it calls
# (directly or through other helpers). tests/unit/test_redis_acl.py derives the same sets from
# the Lua sources and fails on any difference, so a new redis.call cannot go unlisted. A command
# with subcommands is granted the one a script calls (``memory|usage``: not MEMORY PURGE or DOCTOR).
SCRIPT_COMMANDS: dict[str, frozenset[str]] = {name: frozenset(commands.split()) for name, commands in {
    "ack.lua": "decrby del exists hdel hexists hincrby hmget hsetnx rpush time zadd zcard zrem "
               "zremrangebyrank",
    "cancel.lua": "decrby del exists hdel hexists hget hincrby hmget hset hstrlen lrem time zadd zcard zrem "
                  "zscore",
    "config.lua": "hdel hget hgetall hmget hset hsetnx rpush zcard zrange",
    "enqueue.lua": "exists get hincrby hset hsetnx incrby rpush set time zadd",
    "enqueue_internal.lua": "exists get hincrby hset hsetnx incrby rpush set time zadd",
    "extend.lua": "exists hget time zadd",
    "fail.lua": "decrby del exists get hdel hexists hget hincrby hmget hset hsetnx incrby rpush set time "
                "zadd zcard zrem",
    "idle.lua": "pexpire pttl time zadd zcard zrem zremrangebyscore",
    "fields.lua": "hget hstrlen",
    "listing.lua": "hkeys hlen zrange",
    "lease.lua": "decrby del exists get hdel hexists hget hgetall hincrby hmget hset hsetnx incrby lpop "
                 "pexpire rpush set time zadd zcard zpopmin zrange zrangebyscore zremrangebyrank",
    "purge.lua": "decrby del hget hstrlen zrange zremrangebyrank",
    "push.lua": "del exists get hdel hexists hget hincrby hmget hset hsetnx hstrlen incrby lpush ltrim "
                "pexpire rpush set strlen time zadd zcard zrem zrevrangebyscore",
    "rate.lua": "hget hmget hset hstrlen time",
    "reap.lua": "decrby del get hdel hexists hget hincrby hmget hset hsetnx hstrlen incrby lpop pexpire "
                "rpush set time zadd zcard zrangebyscore zremrangebyrank",
    "rebase.lua": "hget hset hstrlen",
    "sample.lua": "del hgetall hlen lindex ltrim memory|usage pexpire rpush time",
    "redrive.lua": "get hdel hincrby hmget hset hsetnx incrby rpush set time zadd zrange zrem zscore",
    "register.lua": "exists sadd scard sismember",
    "registry_load.lua": "sadd set",
    "release.lua": "decrby del exists get hdel hexists hget hincrby hmget hsetnx incrby rpush set time zadd "
                   "zcard zrem",
    "settled.lua": "decrby del hget hstrlen zrem zscore",
    "stats.lua": "get hget hgetall hlen hstrlen memory|usage strlen time zcard zcount zrangebyscore",
    "throttle.lua": "hmget hset pexpire time",
    "timeline.lua": "lpop pexpire rpush",
    "trim.lua": "decrby del hget hstrlen time zcard zrange zrem zscore",
}.items()}

# Every connection: the health check, scripts (EVALSHA), and what redis-py's cluster client reads
# at start (the slot map, COMMAND for key positions).
_CONNECTION = ("ping", "evalsha", "command", "cluster|slots", "cluster|shards")
# A role that loads its own scripts after a NOSCRIPT: Sluice's, never a worker's (module doc); the
# internal function (the gateway's user) asks which are cached first (scripts.RedisScriptLoader).
_LOADS_SCRIPTS = ("script|load", "script|exists")

# Never granted to any role, whatever a future edit adds (tests/unit/test_redis_acl.py).
FORBIDDEN = frozenset({"flushall", "flushdb", "keys", "scan", "config", "acl", "debug", "monitor",
                       "script|flush", "script|kill", "script", "shutdown", "client", "module", "eval",
                       "swapdb", "migrate", "replicaof", "slaveof", "save", "bgsave", "bgrewriteaof",
                       "function", "select", "move", "rename", "renamenx", "restore", "sort", "object"})


@dataclass(frozen=True, slots=True)
class Role:
    """What one kind of function does in Redis: the scripts it runs, the commands it sends
    itself, and which keys: every queue's and the global keys (``all_keys``), every public
    queue's (``public_queues``) plus ``global_keys``, or only the queues it is given (a worker)."""

    name: str
    scripts: tuple[str, ...]
    commands: tuple[str, ...] = ()
    all_keys: bool = False
    public_queues: bool = False
    global_keys: tuple[str, ...] = ()
    loads_scripts: bool = False  # SCRIPT LOAD (module doc): Sluice's own functions only

    def all_commands(self) -> list[str]:
        out = set(_CONNECTION) | set(self.commands)
        if self.loads_scripts:
            out.update(_LOADS_SCRIPTS)
        for script in self.scripts:
            out |= SCRIPT_COMMANDS[script]
        return sorted(out)


# A worker (a team's, or Sluice's default one): its lease life cycle and its wait for work.
# timeline.lua (a job's timeline, issue 32) calls only commands the others already do. No SCRIPT
# LOAD: the internal function loads these scripts for it (``sluice.core.script_loads``).
WORKER = Role("worker", ("lease.lua", "extend.lua", "ack.lua", "fail.lua", "release.lua", "idle.lua",
                         "timeline.lua"), ("blpop",))
# The public API (GatewayFunction; InternalFunction and FiringsFunction run the same enqueue
# pipeline): the admission view (stats.lua, the registry, memory), the reservation of a new queue
# before its first 202 (register.lua; registry_load.lua after a Redis loss: issue 28), GET's
# holds, DELETE's cancel, and the per-caller throttle's buckets (throttle.lua, one key per caller:
# keys.caller_bucket).
GATEWAY = Role("gateway", ("stats.lua", "cancel.lua", "throttle.lua", "register.lua", "registry_load.lua"),
               ("zscore", "hget", "hstrlen", "sismember", "scard", "info"), public_queues=True,
               global_keys=(*REGISTRY_KEYS, CALLER_BUCKETS), loads_scripts=True)
# The operator routes (/v1/admin): stats, dead letters (list, redrive, purge), queue settings, a
# job's timeline (LRANGE, issue 32), and the ready listing with its fair groups (listing.lua). Its
# reads of what a team may write by hand ask their sizes first (fields.lua's HSTRLEN, MEMORY USAGE, HLEN:
# sluice.core.read_bounds); stats.lua calls them too, so its access string is the same with them.
OPERATOR = Role("operator", ("stats.lua", "redrive.lua", "purge.lua", "config.lua", "register.lua",
                            "registry_load.lua", "listing.lua", "fields.lua"),
                ("smembers", "sismember", "scard", "time", "zcount", "zrange", "hmget", "hget", "hstrlen",
                 "hlen", "memory|usage", "zscore", "hgetall", "info", "lrange"), public_queues=True,
                global_keys=REGISTRY_KEYS, loads_scripts=True)
# The relay: every queue (its partition ownership lives in a reserved one) and the global keys.
RELAY = Role("relay", ("push.lua", "register.lua", "registry_load.lua", "rate.lua", "lease.lua", "extend.lua",
                       "ack.lua", "release.lua", "enqueue_internal.lua", "reap.lua", "settled.lua",
                       "trim.lua", "sample.lua",
                       "stats.lua", "redrive.lua", "config.lua", "rebase.lua"),
             ("hget", "zrange", "hmget", "hgetall", "smembers", "info", "get", "set"), all_keys=True,
             loads_scripts=True)

ROLES: dict[str, Role] = {r.name: r for r in (WORKER, GATEWAY, OPERATOR, RELAY)}

# The functions of template.yaml that talk to Redis, and the role each one's user has. The
# countdown and events functions read no Redis and have no user.
FUNCTION_ROLES: dict[str, str] = {
    "RelayFunction": "relay", "WorkerFunction": "worker", "GatewayFunction": "gateway",
    "InternalFunction": "gateway", "FiringsFunction": "gateway", "OperatorFunction": "operator",
}


def function_role(logical_id: str) -> Role | None:
    """The role of the template function ``logical_id``; None for one that reads no Redis."""
    name = FUNCTION_ROLES.get(logical_id)
    return None if name is None else ROLES[name]


_PREFIX_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}\*$")


def queue_key_pattern(queue: str) -> str:
    """``~sluice:{<queue>}:*`` for a public queue name or a prefix pattern ``<prefix>*``.

    InvalidQueueName for anything else, and for a pattern that could match one of Sluice's own
    queues (``sluice-*``, or a prefix of it such as ``s*``): a worker never gets those."""
    if isinstance(queue, str) and queue.endswith("*"):
        if not _PREFIX_RE.fullmatch(queue):
            raise InvalidQueueName(f"invalid queue pattern {queue!r}: a queue name prefix then one '*'")
        prefix = queue[:-1]
        if prefix.startswith(RESERVED_QUEUE_PREFIX) or RESERVED_QUEUE_PREFIX.startswith(prefix):
            raise InvalidQueueName(f"queue pattern {queue!r} would cover Sluice's own queues "
                                   f"({RESERVED_QUEUE_PREFIX}*)")
    else:
        validate_public_queue(queue)
    return f"~{PREFIX}:{{{queue}}}:*"


def public_queue_patterns() -> list[str]:
    """Key patterns for every queue whose name does not start with ``sluice-`` (the public ones).

    Redis 6.2's ACL has no negative patterns, so: names whose i-th character differs from
    ``sluice-``'s (``[^s]*``, ``s[^l]*``, ...) and the names that are proper prefixes of it
    (``s`` ... ``sluice``). A reserved queue's keys start ``sluice:{sluice-`` and match none."""
    reserved = RESERVED_QUEUE_PREFIX
    out = [f"~{PREFIX}:{{{reserved[:i]}[^{reserved[i]}]*}}:*" for i in range(len(reserved))]
    out += [f"~{PREFIX}:{{{reserved[:i]}}}:*" for i in range(1, len(reserved))]
    return out


def key_rules(role: Role, queues: Iterable[str] | None = None) -> list[str]:
    """The key patterns of ``role``; a worker's from ``queues`` (None: every public queue, the
    default worker, which serves whatever no team's worker does)."""
    if role.all_keys:
        return [f"~{PREFIX}:*"]
    if role.public_queues or queues is None:
        patterns = public_queue_patterns()
    else:
        patterns = sorted({queue_key_pattern(q) for q in queues})
        if not patterns:
            raise InvalidQueueName("a worker's Redis user needs at least one queue")
    return patterns + [f"~{key}" for key in role.global_keys]


def rules(role: str | Role, queues: Iterable[str] | None = None) -> list[str]:
    """ACL rules (keys, then ``-@all`` and each allowed command) of ``role`` for ``queues``."""
    r = ROLES[role] if isinstance(role, str) else role
    return [*key_rules(r, queues), "-@all", *(f"+{c}" for c in r.all_commands())]


def access_string(role: str | Role, queues: Iterable[str] | None = None) -> str:
    """An ElastiCache ``AccessString``: ``on`` and the rules (passwords are set apart)."""
    return " ".join(["on", *rules(role, queues)])


def worker_command_rules() -> str:
    """The command part of a worker's access string: what a team stack appends to its key
    patterns (built with !Join from its Queues, infra/team.yaml)."""
    return " ".join(rules(WORKER, ["q"])[1:])


def setuser_args(username: str, password: str, role: str | Role,
                 queues: Iterable[str] | None = None) -> list[str]:
    """``ACL SETUSER`` arguments for a local redis-server: reset, on, the password, the rules."""
    return ["ACL", "SETUSER", username, "reset", "on", f">{password}", *rules(role, queues)]


def acl_file_line(username: str, password: str, role: str | Role, queues: Iterable[str] | None = None) -> str:
    """One line of a redis-server ``aclfile`` (the password stored as its SHA-256)."""
    digest = hashlib.sha256(password.encode()).hexdigest()
    return " ".join(["user", username, "on", f"#{digest}", *rules(role, queues)])


def disabled_default_line() -> str:
    """The ``default`` user switched off: a connection that does not AUTH can do nothing."""
    return "user default off resetkeys -@all"

