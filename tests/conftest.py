"""Shared fixtures: real servers on free ports, started lazily, once per session (per xdist worker).

No test assumes a server is already running. Dummy AWS credentials are set for
the whole run so that no boto3 client can ever reach a real account.
"""

from __future__ import annotations

import gc
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice_dev.local import servers

for _k, _v in servers.DUMMY_AWS_ENV.items():
    os.environ[_k] = _v
os.environ.pop("AWS_PROFILE", None)

EVENTS = Path(__file__).parent / "events"


def pytest_unconfigure() -> None:
    """Leave what the tests built to the process's exit: the interpreter's last collections over a
    worker's heap (in-process moto, clients, hypothesis) took 2-3 s at the end of every pytest
    process on a loaded machine, a wait at the end of every tier (tests/tooling/test_pytest_exit.py)."""
    gc.freeze()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Server]:
    server = servers.start_redis(workdir=tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: servers.Server) -> Iterator[str]:
    """A clean database for every test."""
    import redis

    url = redis_server.extra["url"]
    client = redis.Redis.from_url(url)
    client.flushall()
    client.close()
    yield url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[object]:
    import redis

    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Server]:
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    server = servers.start_moto(log_path=log)
    yield server
    server.stop()


@pytest.fixture
def moto_url(moto_server: servers.Server) -> str:
    return moto_server.extra["url"]


@pytest.fixture(scope="session")
def tansu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Server]:
    """A Kafka-protocol broker with in-memory storage (fast; loses data on restart)."""
    log = tmp_path_factory.mktemp("tansu") / "tansu.log"
    server = servers.start_tansu(log_path=log)
    yield server
    server.stop()


@pytest.fixture
def unique() -> str:
    """A short unique suffix for table, topic and queue names shared across a session."""
    return uuid.uuid4().hex[:10]


@pytest.fixture
def event_json() -> object:
    import json

    def load(name: str) -> dict[str, object]:
        return json.loads((EVENTS / name).read_text())  # type: ignore[no-any-return]

    return load
