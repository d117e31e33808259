"""What a repeated ``load_scripts`` call costs Redis (session 36; docs/security.md, "Who loads a
worker's scripts"): the internal function's loader (``RedisScriptLoader``: SCRIPT EXISTS, then
SCRIPT LOAD of what is missing) against loading every text each call (what it did before), both
with the seven shipped worker scripts already cached, as a team repeating the call in a loop finds
them. One redis-server; the two alternate, ``CALLS`` calls each per round, ``ROUNDS`` rounds.
Redis's time from INFO commandstats (``cmdstat_script``: Redis 6.2 counts SCRIPT's subcommands as
one), the client's wall time with it.

Prints {"bench": "script_loads", "load", "texts_bytes", "redis_us_per_call": {"load_all",
"exists_first"}, "wall_us_per_call": {...}}.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Mapping
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from benchmarks.common import emit, log, redis_server
from sluice.backends.redis import acl
from sluice.backends.redis.scripts import RedisScriptLoader, source

ROUNDS, CALLS = 7, 200


class LoadAll(RedisScriptLoader):
    """The loader before session 36: SCRIPT LOAD of every text, cached or not."""

    def missing(self, texts: Mapping[str, str]) -> dict[str, str]:
        return dict(texts)


def script_usec(client: redis.Redis) -> float:
    return float(client.info("commandstats").get("cmdstat_script", {}).get("usec", 0))


def main() -> None:
    texts = {name: source(name) for name in acl.WORKER.scripts}
    with redis_server() as url:
        client = redis.Redis.from_url(url)
        loaders = {"load_all": LoadAll(client), "exists_first": RedisScriptLoader(client)}
        loaders["load_all"].load(texts)
        redis_us: dict[str, list[float]] = {name: [] for name in loaders}
        wall_us: dict[str, list[float]] = {name: [] for name in loaders}
        for r in range(ROUNDS):
            for name in (("load_all", "exists_first") if r % 2 == 0 else ("exists_first", "load_all")):
                before, start = script_usec(client), time.perf_counter()
                for _ in range(CALLS):
                    loaders[name].load(texts)
                wall_us[name].append((time.perf_counter() - start) * 1e6 / CALLS)
                redis_us[name].append((script_usec(client) - before) / CALLS)
            log(f"round {r}: redis {redis_us['load_all'][-1]:.1f} vs {redis_us['exists_first'][-1]:.1f} µs")
        emit("script_loads", load=list(os.getloadavg()), rounds=ROUNDS, calls=CALLS,
             texts_bytes=sum(len(t.encode()) for t in texts.values()),
             redis_us_per_call={n: round(statistics.median(v), 1) for n, v in redis_us.items()},
             wall_us_per_call={n: round(statistics.median(v), 1) for n, v in wall_us.items()})


if __name__ == "__main__":
    main()
