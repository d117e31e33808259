"""The Redis engine's facades by role (``sluice.backends.redis``): each one has what its port asks,
and the composite ``engine.RedisQueue`` answers every call of every facade with the same signature."""

from __future__ import annotations

import inspect

import pytest
import redis

from sluice.backends.redis.admin import RedisAdmin
from sluice.backends.redis.config import RedisQueueConfig
from sluice.backends.redis.connection import RedisConnection
from sluice.backends.redis.engine import RedisQueue
from sluice.backends.redis.queue import RedisJobQueue
from sluice.backends.redis.relay_engine import RedisRelayEngine
from sluice.core.ports import JobQueue, WorkWaiter
from sluice.gateway.admission import ViewSource
from sluice.relay.ports import RelayEngine

FACADES = (RedisJobQueue, RedisRelayEngine, RedisAdmin, RedisQueueConfig)


def _public(cls: type) -> dict[str, inspect.Signature]:
    """What instances of ``cls`` answer, its bases' methods included."""
    return {name: inspect.signature(member) for name, member in inspect.getmembers(cls, inspect.isfunction)
            if not name.startswith("_")}


def _port(protocol: type) -> set[str]:
    return {name for name in vars(protocol) if not name.startswith("_") and callable(vars(protocol)[name])}


@pytest.mark.parametrize("facade", FACADES, ids=lambda f: f.__name__)
def test_the_composite_passes_on_every_call_of_each_facade(facade: type) -> None:
    composite = _public(RedisQueue)
    for name, signature in _public(facade).items():
        if name in {"from_settings", "close"}:
            continue
        assert name in composite, f"RedisQueue does not answer {facade.__name__}.{name}"
        assert composite[name] == signature, (facade.__name__, name)


@pytest.mark.parametrize(("facade", "ports"), [
    (RedisJobQueue, (JobQueue, WorkWaiter, ViewSource)),
    (RedisRelayEngine, (RelayEngine,)),
    (RedisQueue, (JobQueue, WorkWaiter, ViewSource, RelayEngine)),
], ids=lambda v: getattr(v, "__name__", ""))
def test_each_facade_has_what_its_consumers_ports_ask(facade: type, ports: tuple[type, ...]) -> None:
    for port in ports:
        missing = _port(port) - set(dir(facade))
        assert not missing, (facade.__name__, port.__name__, missing)


def test_the_facades_share_one_connection() -> None:
    client = redis.Redis()  # no connection is opened until a command is sent
    conn = RedisConnection(client)
    jobs, relay = RedisJobQueue(conn), RedisRelayEngine(conn)
    assert isinstance(jobs, WorkWaiter)
    assert jobs.admin.conn is jobs.config.conn is relay.jobs.conn is relay.conn is conn
    assert relay.client is client
    whole = RedisQueue(client)
    assert whole.client is client and whole.jobs.conn is whole.conn is whole.admin.conn is whole.config.conn
