"""What the depth hour costs Redis (issue 32's closing review; docs/cost.md, "Depth over time"):
lease.lua counting each first lease's wait (KEYS[16], one HINCRBY per distinct bucket of a call)
against the same lease.lua without it (no KEYS[16]: nothing counted), and sample.lua, the relay's
one call per queue every 10 s.

One redis-server, two queues filled alike with ``JOBS`` jobs whose enqueue times spread over a
minute; the two are leased ``BATCH`` at a time in turns (which goes first alternates), and Redis's
own time in scripts (INFO commandstats, µs, ``base_tree.script_usec``) is read around each call, so
both see the same moments of a shared machine. ``ROUNDS`` rounds; the figures are the medians of
the per-round µs per job, and ``added`` the median of the rounds' differences (paired: a round's
two sides saw the same load). Then ``SAMPLES`` sample.lua calls after a lease batch each (a histogram of
a few buckets to take), timed the same way.

Prints {"bench": "depth", "load", "lease_us_per_job": {"with_waits", "without", "added"},
"sample_us_per_call", "rounds", "jobs", "batch"}.
"""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from benchmarks.base_tree import script_usec
from benchmarks.common import emit, log, redis_server
from sluice.backends.redis.engine import RedisQueue
from sluice.backends.redis.keys import QueueKeys
from sluice.core import depth
from sluice.core.clock import wall_ms
from sluice.core.models import JobSpec

JOBS, BATCH, ROUNDS, SAMPLES = 5_000, 50, 9, 200


def fill(rq: RedisQueue, queue: str) -> None:
    now = wall_ms()
    rq.enqueue_many([JobSpec(job_id=f"j{i}", queue=queue, payload={"i": i}, enqueued_at_ms=now - i * 12)
                     for i in range(JOBS)])


def lease(rq: RedisQueue, k: QueueKeys, waits: bool) -> int:
    keys = [k.job_prefix, k.ready, k.delayed, k.leased, k.dead, k.tokens, k.seq, k.config, k.settle,
            k.finished, k.used, *k.group_keys, k.turns_zset, *([k.waits] if waits else [])]
    reply = rq.conn.scripts._run("lease.lua", keys, [BATCH, 30_000, 0])
    return (len(reply) - 2) // 2


def main() -> None:
    with redis_server() as url:
        rq = RedisQueue.from_url(url)
        client = redis.Redis.from_url(url)
        per_round: dict[bool, list[float]] = {True: [], False: []}
        for r in range(ROUNDS):
            client.flushall()
            fill(rq, "with")
            fill(rq, "without")
            spent = {True: 0.0, False: 0.0}
            leased = {True: 0, False: 0}
            for b in range(JOBS // BATCH):
                for waits in ((True, False) if (b + r) % 2 == 0 else (False, True)):
                    before = script_usec(client)
                    n = lease(rq, QueueKeys("with" if waits else "without"), waits)
                    spent[waits] += script_usec(client) - before
                    leased[waits] += n
            for waits in (True, False):
                per_round[waits].append(spent[waits] / leased[waits])
            log(f"round {r}: {per_round[True][-1]:.2f} vs {per_round[False][-1]:.2f} µs a job")
        k = QueueKeys("with")
        samples = []
        for _ in range(SAMPLES):
            client.hset(k.waits, mapping={str(depth.bucket(w)): 3 for w in (80, 150, 400, 2_000)})
            before = script_usec(client)
            rq.conn.scripts.sample(k, [100, 5, 50, 1], depth.SAMPLES_KEPT, depth.SAMPLES_TTL_MS, 0)
            samples.append(script_usec(client) - before)
        with_waits, without = statistics.median(per_round[True]), statistics.median(per_round[False])
        emit("depth", load=list(os.getloadavg()), rounds=ROUNDS, jobs=JOBS, batch=BATCH,
             lease_us_per_job={"with_waits": round(with_waits, 3), "without": round(without, 3),
                               "added": round(statistics.median(
                                   a - b for a, b in zip(per_round[True], per_round[False], strict=True)), 3),
                               "added_per_round": [round(a - b, 2) for a, b in
                                                   zip(per_round[True], per_round[False], strict=True)]},
             sample_us_per_call=round(statistics.median(samples), 2),
             stored_sample_bytes=len(client.lindex(k.depth, -1) or b""),
             depth_list_memory_bytes=client.memory_usage(k.depth))


if __name__ == "__main__":
    main()
