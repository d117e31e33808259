"""Small helpers shared by the benchmarks: a throwaway redis-server, the PING
yardstick, Redis's own CPU accounting, a round-trip counter, JSON output.

Run a benchmark as ``python benchmarks/bench_<name>.py`` (what ``make bench`` does).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis

from sluice.local.servers import start_redis


def emit(bench: str, **figures: Any) -> None:
    """One JSON object per line, "bench" first."""
    print(json.dumps({"bench": bench, **figures}), flush=True)


@contextmanager
def redis_server() -> Iterator[str]:
    """A fresh redis-server on a free port (no persistence); yields its URL."""
    server = start_redis()
    try:
        yield server.extra["url"]
    finally:
        server.stop()


def ping_per_s(url: str, seconds: float = 1.0) -> float:
    """The single-client redis-py PING rate: the yardstick for this noisy machine."""
    client = redis.Redis.from_url(url)
    try:
        client.ping()
        count, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds:
            for _ in range(100):
                client.ping()
            count += 100
        return count / elapsed
    finally:
        client.close()


def redis_cpu_s(url: str) -> float:
    """The server's own CPU time so far (user + system), from INFO cpu."""
    client = redis.Redis.from_url(url)
    try:
        info = client.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    finally:
        client.close()


class CountingRedis(redis.Redis):  # type: ignore[type-arg]
    """A client that counts the requests it sends: one per command (no pipelines used)."""

    round_trips = 0

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.round_trips += 1
        return super().execute_command(*args, **options)


def counting_client(url: str) -> CountingRedis:
    return CountingRedis.from_url(url, decode_responses=True)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
