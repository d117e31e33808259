"""What bounding the reads of team-writable hashes costs every queue (session 36; docs/security.md,
"Hashes a team may stuff"): this tree's ``sample.lua`` and ``stats.lua`` against a base commit's
(``BASE``, before the bounds), on one redis-server in one run.

Both texts are loaded side by side (the base's assembled from ``git show`` with its own _lib.lua,
as ``scripts.source`` assembles this tree's) and called with the same KEYS and ARGV (the layout did
not change). Redis's own time in scripts (INFO commandstats, ``base_tree.script_usec``) is read
around each call; the two sides alternate which goes first. Ordinary queues: a waits hash of a few
buckets (what a lease batch leaves) and a config hash of three fields (``CALLS`` calls a side per
round, ``ROUNDS`` rounds, medians of the per-round means). Stuffed queues (what a team's own user
can write by hand): 100,000 waits fields, twenty 1 MB waits values, 100,000 config fields, a 10 MB
config value (``STUFFED`` calls a side, the waits stuffed again before each, the median).

Prints {"bench": "stuffed", "base", "load_before", "load_after", "ordinary_us": {"sample": {"base",
"this"}, "stats": {...}}, "stuffed_ms": {"<case>": {"base", "this"}}}.
"""

from __future__ import annotations

import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from benchmarks.base_tree import script_usec
from benchmarks.common import emit, log, lua_at, redis_server
from sluice.backends.redis import scripts
from sluice.backends.redis.keys import QueueKeys
from sluice.core import depth

BASE = "8b99c7b"  # main when session 36 began: sample.lua and stats.lua read the hashes whole
ROUNDS, CALLS, STUFFED = 9, 200, 5


def base_source(name: str) -> str:
    return lua_at(BASE, name)


class Side:
    """One side's scripts on its own queue (a stuffed sample of the base stores its whole histogram,
    which the next sample's LINDEX of the depth list would read)."""

    def __init__(self, client: redis.Redis, texts: dict[str, str], queue: str) -> None:
        self.client, self.k = client, QueueKeys(queue)
        self.sha = {name: client.script_load(text) for name, text in texts.items()}

    def sample(self) -> None:
        K = self.k
        self.client.evalsha(self.sha["sample.lua"], 2, K.waits, K.depth, 100, 5, 50, 1,
                            depth.SAMPLES_KEPT, depth.SAMPLES_TTL_MS, 0)

    def stats(self) -> None:
        K = self.k
        self.client.evalsha(self.sha["stats.lua"], 11, K.job_prefix, K.ready, K.delayed, K.leased,
                            K.dead, K.config, K.idle, K.seq, K.finished, K.used, K.groups)


def timed(client: redis.Redis, call: Callable[[], None], before_each: Callable[[], None] = lambda: None,
          *, settle: bool = False) -> float:
    """Redis's time in ``call``'s script. ``settle``: collect Lua's garbage first, so a side is not
    charged for the strings the other side's read of a stuffed hash left (Redis steps Lua's
    collector inside later scripts)."""
    before_each()
    if settle:
        client.eval("collectgarbage('collect') return 0", 0)
    start = script_usec(client)
    call()
    return script_usec(client) - start


def stuff(client: redis.Redis, key: str, fields: int) -> None:
    for start in range(0, fields, 10_000):
        client.hset(key, mapping={f"x{n}": 1 for n in range(start, min(fields, start + 10_000))})


def ordinary(client: redis.Redis, sides: dict[str, Side]) -> dict[str, dict[str, float]]:
    """Median µs a call of each script on an ordinary queue, per side."""
    few_waits = {str(depth.bucket(w)): 3 for w in (80, 150, 400, 2_000)}
    per_round: dict[str, dict[str, list[float]]] = {s: {"base": [], "this": []} for s in ("sample", "stats")}
    for r in range(ROUNDS):
        client.flushall()
        for side in sides.values():
            client.hset(side.k.config, mapping={"max_in_flight": 5, "rate_per_s": "2.0",
                                                "policy_attempts": 3})
        order = ("base", "this") if r % 2 == 0 else ("this", "base")
        for script in ("sample", "stats"):
            spent = {"base": 0.0, "this": 0.0}
            for _ in range(CALLS):
                for name in order:
                    side = sides[name]
                    spent[name] += timed(client, getattr(side, script),
                                         lambda w=side.k.waits: client.hset(w, mapping=few_waits))
            for name in order:
                per_round[script][name].append(spent[name] / CALLS)
        last = {s: f"{per_round[s]['base'][-1]:.1f} vs {per_round[s]['this'][-1]:.1f} µs" for s in per_round}
        log(f"round {r}: sample {last['sample']}, stats {last['stats']}")
    return {s: {name: round(statistics.median(v), 2) for name, v in by_side.items()}
            for s, by_side in per_round.items()}


def stuff_once(client: redis.Redis, side: Side, case: str) -> None:
    """What stays stuffed (a config hash: no script empties it)."""
    if case == "config_100k_fields":
        stuff(client, side.k.config, 100_000)
    elif case == "config_10MB_value":
        client.hset(side.k.config, "sensitive", '["' + "x" * 10_000_000 + '"]')


def restuff(client: redis.Redis, side: Side, case: str) -> None:
    """What is stuffed again before each call (a waits hash: the base's sample empties it)."""
    if case == "waits_100k_fields":
        stuff(client, side.k.waits, 100_000)
    elif case == "waits_20x1MB_values":
        client.hset(side.k.waits, mapping={str(b): "9" * 1_000_000 for b in range(20)})


def stuffed(client: redis.Redis, sides: dict[str, Side]) -> dict[str, dict[str, float]]:
    """Median ms a call on a stuffed queue, per case and side."""
    out: dict[str, dict[str, float]] = {}
    for case in ("waits_100k_fields", "waits_20x1MB_values", "config_100k_fields", "config_10MB_value"):
        client.flushall()
        script = "sample" if case.startswith("waits") else "stats"
        for side in sides.values():
            stuff_once(client, side, case)
        took: dict[str, list[float]] = {"base": [], "this": []}
        for n in range(STUFFED):
            for name in (("base", "this") if n % 2 == 0 else ("this", "base")):
                side = sides[name]
                took[name].append(timed(client, getattr(side, script),
                                        lambda side=side, case=case: restuff(client, side, case),
                                        settle=True))
        out[case] = {name: round(statistics.median(v) / 1000, 2) for name, v in took.items()}
        log(f"{case}: {out[case]}")
    return out


def main() -> None:
    load_before = list(os.getloadavg())
    names = ("sample.lua", "stats.lua")
    with redis_server() as url:
        client = redis.Redis.from_url(url)
        sides = {"base": Side(client, {n: base_source(n) for n in names}, "base"),
                 "this": Side(client, {n: scripts.source(n) for n in names}, "this")}
        emit("stuffed", base=BASE, load_before=load_before, rounds=ROUNDS, calls=CALLS,
             ordinary_us=ordinary(client, sides), stuffed_ms=stuffed(client, sides),
             load_after=list(os.getloadavg()))


if __name__ == "__main__":
    main()
