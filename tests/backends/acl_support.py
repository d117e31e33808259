"""A redis-server with Sluice's ACL users, for the tests that act as one of them (a team's own worker
user sending commands by hand, the relay's, a gateway's): the users come from
``sluice.backends.redis.acl`` exactly as the template's access strings do, each with password
``pw-<name>``."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import redis

from sluice.backends.redis import acl
from sluice.backends.redis.connection import RedisConnection
from sluice.core.config import Settings
from sluice_dev.local import servers

Users = Mapping[str, tuple[str, list[str] | None]]  # user name: (role, its queues; None for Sluice's own)

# A team's worker user on queue "a" and the three users of Sluice's own functions that read its keys.
TEAM_AND_READERS: dict[str, tuple[str, list[str] | None]] = {
    "team-a": ("worker", ["a"]), "sluice-relay": ("relay", None), "sluice-gateway": ("gateway", None),
    "sluice-operator": ("operator", None)}


def acl_server(workdir: Path, users: Users) -> Iterator[str]:
    """A module fixture's body: a redis-server in ``workdir`` with ``users``; yields its URL."""
    srv = servers.start_redis(workdir=workdir)
    try:
        admin = redis.Redis.from_url(srv.extra["url"], decode_responses=True)
        for name, (role, queues) in users.items():
            admin.execute_command(*acl.setuser_args(name, f"pw-{name}", role, queues))
        admin.close()
        yield srv.extra["url"]
    finally:
        srv.stop()


def admin_client(url: str, *, slowlog: bool = False) -> Iterator[redis.Redis]:
    """A test fixture's body: the default user on an emptied server (``slowlog``: every command logged)."""
    client = redis.Redis.from_url(url, decode_responses=True)
    client.flushall()
    if slowlog:
        client.config_set("slowlog-log-slower-than", 0)
    yield client
    client.close()


def conn(url: str, user: str) -> RedisConnection:
    """Sluice's own connection as ``user``."""
    return RedisConnection.from_settings(Settings(redis_url=url, redis_username=user,
                                                  redis_password=f"pw-{user}"))  # type: ignore[arg-type]


def team(url: str, user: str = "team-a") -> redis.Redis:
    """The team's own worker user, sending commands by hand."""
    return redis.Redis.from_url(url, username=user, password=f"pw-{user}", decode_responses=True)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def slowest_script_us(admin: redis.Redis) -> int:
    """The longest EVALSHA in SLOWLOG since its last reset, in microseconds."""
    took = [e["duration"] for e in admin.slowlog_get(128) if _text(e["command"]).startswith("EVALSHA")]
    assert took, admin.slowlog_get(128)
    return max(took)


def script_us(admin: redis.Redis, call: Callable[[], Any]) -> tuple[Any, int]:
    """``call``'s result and the longest EVALSHA it ran, in microseconds (SLOWLOG): ``call`` runs
    twice, the first loading the script and warming the connection."""
    call()
    admin.slowlog_reset()
    out = call()
    return out, slowest_script_us(admin)
