"""What bounding the relay's and the gateways' reads of values a team may write by hand costs every
queue (session 36; docs/security.md, "Values a team may stuff"): this tree's ``push.lua``,
``rate.lua``, ``stats.lua`` and ``reap.lua`` against ``BASE`` (main before the bounds), on one
redis-server in one run.

Both texts are loaded side by side (the base's assembled from ``git show`` with its own _lib.lua, as
``bench_stuffed`` does) and called with the same KEYS and ARGV, each side on its own queue, the two
alternating which goes first. Redis's own time in scripts (INFO commandstats) is read around each
call. Ordinary queues: a config hash of three fields (max_in_flight, rate_per_s, policy_attempts);
push.lua takes ``BATCH`` fresh jobs a call (the relay's batch), with the deployment's byte budget on
(``budget``) and off (``no_budget``), and one job a call (``push_one_job``: a call's fixed cost
alone, which the bounds add to); rate.lua asks for ``BATCH``; stats.lua reads a queue of
``BATCH`` ready jobs; reap.lua finds nothing to reclaim (the maintenance's usual call). ``CALLS``
calls a side per round, ``ROUNDS`` rounds, medians of the per-round means.

Prints {"bench": "fields", "base", "load_before", "load_after", "us_per_call": {"<case>": {"base",
"this"}}, "push_us_per_job": {"budget": {...}, "no_budget": {...}}}.
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

BASE = "f6071cc"  # main when this work began: push, rate, stats and reap read the values whole
NAMES = ("push.lua", "rate.lua", "stats.lua", "reap.lua")
ROUNDS, CALLS, BATCH = 7, 100, 500


def base_source(name: str) -> str:
    return lua_at(BASE, name)


class Side:
    def __init__(self, client: redis.Redis, texts: dict[str, str], queue: str) -> None:
        self.client, self.k = client, QueueKeys(queue)
        self.sha = {name: client.script_load(text) for name, text in texts.items()}
        self.offset = 0

    def _run(self, name: str, keys: list[str], args: list[object]) -> None:
        self.client.evalsha(self.sha[name], len(keys), *keys, *args)

    def push(self, budget: int, n: int = BATCH) -> None:
        flat: list[str] = []
        for _ in range(n):
            self.offset += 1
            flat += [str(self.offset), f"j{self.offset}", '{"n":1}', "5,3,30000,0", "0", "0", "", ""]
        self._run("push.lua", scripts.push_keys(self.k, "t", 0), scripts.push_argv(1, flat, budget))

    def rate(self) -> None:
        self._run("rate.lua", [self.k.bucket, self.k.config], [BATCH])

    def stats(self) -> None:
        K = self.k
        self._run("stats.lua", [K.job_prefix, K.ready, K.delayed, K.leased, K.dead, K.config, K.idle, K.seq,
                                K.finished, K.used, K.groups], [])

    def reap(self) -> None:
        K = self.k
        self._run("reap.lua", [K.job_prefix, K.ready, K.delayed, K.leased, K.dead, K.tokens, K.seq, K.settle,
                               K.finished, K.used, *K.group_keys, K.config, K.timeline_prefix], [500, 0, 64])


def timed(client: redis.Redis, call: Callable[[], None]) -> float:
    start = script_usec(client)
    call()
    return script_usec(client) - start


CASES: dict[str, Callable[[Side], None]] = {
    "push_budget": lambda s: s.push(1 << 40),
    "push_no_budget": lambda s: s.push(0),
    "push_one_job": lambda s: s.push(1 << 40, 1),  # the fixed cost a call alone
    "rate": Side.rate,
    "stats": Side.stats,
    "reap": Side.reap,
}


def ordinary(client: redis.Redis, sides: dict[str, Side]) -> dict[str, dict[str, float]]:
    per_round: dict[str, dict[str, list[float]]] = {c: {"base": [], "this": []} for c in CASES}
    for r in range(ROUNDS):
        order = ("base", "this") if r % 2 == 0 else ("this", "base")
        for case, call in CASES.items():
            client.flushall()
            for side in sides.values():
                client.hset(side.k.config, mapping={"max_in_flight": 5, "rate_per_s": "1000000",
                                                    "policy_attempts": 3})
                side.push(0)  # a queue with work: stats finds its heads, seq and used are set
            spent = {"base": 0.0, "this": 0.0}
            for _ in range(CALLS):
                for name in order:
                    spent[name] += timed(client, lambda side=sides[name], call=call: call(side))  # type: ignore[misc]
            for name in order:
                per_round[case][name].append(spent[name] / CALLS)
        log(f"round {r}: " + ", ".join(f"{c} {v['base'][-1]:.1f} vs {v['this'][-1]:.1f} µs"
                                       for c, v in per_round.items()))
    return {c: {name: round(statistics.median(v), 2) for name, v in by_side.items()}
            for c, by_side in per_round.items()}


def main() -> None:
    load_before = list(os.getloadavg())
    with redis_server() as url:
        client = redis.Redis.from_url(url)
        sides = {"base": Side(client, {n: base_source(n) for n in NAMES}, "base"),
                 "this": Side(client, {n: scripts.source(n) for n in NAMES}, "this")}
        per_call = ordinary(client, sides)
        emit("fields", base=BASE, load_before=load_before, rounds=ROUNDS, calls=CALLS, batch=BATCH,
             us_per_call=per_call,
             push_us_per_job={c.removeprefix("push_"): {n: round(v / BATCH, 3)
                                                        for n, v in per_call[c].items()}
                              for c in ("push_budget", "push_no_budget")},
             load_after=list(os.getloadavg()))


if __name__ == "__main__":
    main()
