"""The Redis lease engine: lease+ack throughput of no-op jobs and Redis CPU per job.

Prints, one JSON object per line:
  {"bench": "lease_ack", "batch": B, "processes": P, "jobs_per_s", "ping_per_s",
   "round_trips_per_job", "redis_cpu_us_per_job"}   for B in (1, 50), P in (1, 2)
  {"bench": "lifecycle", "redis_cpu_us_per_job", ...}  push (in relay-sized batches) ->
                                                      lease -> ack, per job
  {"bench": "lease_groups", "batch", "groups", "ratio", ...}  lease cost with fair groups against
                                                      the engine before them (c44b81f), in the
                                                      same run: benchmarks/engine_groups.py
  {"bench": "engine_cost", "ratio", "scripts_us_per_job", "server", ...}  Redis's CPU per job over
                                                      a pipeline run (maintenance included) and
                                                      µs per script, against c44b81f in the
                                                      same run: benchmarks/engine_cost.py

ping_per_s (single-client redis-py PING against the same server, measured in the same
run, just before and after each lease_ack run, averaged) is the yardstick: targets are
relative to it because this machine is noisy. The lifecycle figure is the best of five runs
(see ``lifecycle``), with the median alongside.
Redis CPU is the server's own accounting (INFO cpu: used_cpu_user + used_cpu_sys)
over the measured window, divided by jobs. Round trips are counted in the client.
Each worker leases exactly its share of the jobs, so no empty poll is counted.
"""

from __future__ import annotations

import multiprocessing as mp
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from benchmarks import engine_cost, engine_groups
from benchmarks.common import (
    counting_client,
    drain,
    emit,
    log,
    ping_per_s,
    redis_cpu_s,
    redis_server,
)
from sluice.backends.redis.engine import RedisQueue
from sluice.core.models import JobSpec

LEASE_MS = 30_000
PUSH_BATCH = 500  # Settings.relay_batch: what the relay pushes at once
RUNS = [(1, 1, 6_000), (1, 2, 8_000), (50, 1, 60_000), (50, 2, 60_000)]  # (batch, processes, jobs)
LIFECYCLE_JOBS, LIFECYCLE_RUNS = 10_000, 5


def fill(url: str, queue: str, jobs: int) -> None:
    """Push ``jobs`` no-op jobs as the relay would: batches with offsets."""
    q = RedisQueue.from_url(url)
    for start in range(0, jobs, PUSH_BATCH):
        records = [(i, JobSpec(job_id=f"{queue}-{i}", queue=queue, payload={"n": i}))
                   for i in range(start, min(jobs, start + PUSH_BATCH))]
        q.push(queue, "bench", 0, 1, records)
    q.close()


def work(url: str, queue: str, batch: int, quota: int, go: Any, out: Any) -> None:
    """Lease and ack ``quota`` jobs, ``batch`` at a time, as a no-op worker would."""
    client = counting_client(url)
    q = RedisQueue(client)
    go.wait()
    client.round_trips = 0
    done = 0
    while done < quota:
        leased = q.lease(queue, min(batch, quota - done), LEASE_MS, "bench")
        if not leased:
            break
        if len(leased) == 1:
            q.ack(queue, leased[0].job_id, leased[0].lease_token)
        else:
            errors = q.ack_many(queue, [(j.job_id, j.lease_token) for j in leased])
            assert not any(errors), errors
        done += len(leased)
    out.put((done, client.round_trips, time.monotonic()))
    client.close()


def warm_up(url: str) -> None:
    """Load every script once so no run pays for SCRIPT LOAD."""
    fill(url, "warm", 10)
    q = RedisQueue.from_url(url)
    for job in q.lease("warm", 10, LEASE_MS):
        q.ack("warm", job.job_id, job.lease_token)
    q.close()


def lease_ack(url: str, batch: int, processes: int, jobs: int) -> None:
    redis.Redis.from_url(url).flushall()
    warm_up(url)
    queue = f"bench-{batch}-{processes}"
    fill(url, queue, jobs)
    ctx = mp.get_context("fork")
    go, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=work, args=(url, queue, batch, jobs // processes, go, out))
             for _ in range(processes)]
    for p in procs:
        p.start()
    ping_before = ping_per_s(url, 1.0)  # the yardstick, around the run it is compared with
    cpu0 = redis_cpu_s(url)
    start = time.monotonic()
    go.set()
    results = [out.get(timeout=120) for _ in procs]
    cpu1 = redis_cpu_s(url)
    for p in procs:
        p.join()
    ping = (ping_before + ping_per_s(url, 1.0)) / 2
    done = sum(r[0] for r in results)
    trips = sum(r[1] for r in results)
    elapsed = max(r[2] for r in results) - start
    emit("lease_ack", batch=batch, processes=processes, jobs=done,
         jobs_per_s=round(done / elapsed), ping_per_s=round(ping),
         ratio_to_ping=round(done / elapsed / ping, 2),
         round_trips_per_job=round(trips / done, 4),
         redis_cpu_us_per_job=round((cpu1 - cpu0) * 1e6 / done, 2))


def lifecycle_once(url: str, jobs: int) -> tuple[float, float]:
    """Redis CPU (µs per job) of pushing ``jobs`` and of leasing and acking them."""
    redis.Redis.from_url(url).flushall()
    warm_up(url)
    queue = "life"
    cpu0 = redis_cpu_s(url)
    fill(url, queue, jobs)
    cpu1 = redis_cpu_s(url)
    q = RedisQueue.from_url(url)
    done = drain(q, queue, LEASE_MS)
    cpu2 = redis_cpu_s(url)
    q.close()
    assert done == jobs, (done, jobs)
    return (cpu1 - cpu0) * 1e6 / jobs, (cpu2 - cpu1) * 1e6 / jobs


def lifecycle(url: str, jobs: int, runs: int) -> None:
    """The best of ``runs``: other processes on a shared machine only ever add to the CPU
    Redis is charged (cache misses, vCPU steal), so the minimum is the closest to the
    engine's own cost. The median and every run are printed too."""
    results = sorted((lifecycle_once(url, jobs) for _ in range(runs)), key=sum)
    push_us, lease_ack_us = results[0]
    emit("lifecycle", jobs=jobs, push_batch=PUSH_BATCH, lease_ack_batch=50,
         redis_cpu_us_per_job=round(push_us + lease_ack_us, 2),
         push_us_per_job=round(push_us, 2), lease_ack_us_per_job=round(lease_ack_us, 2),
         median_us_per_job=round(sum(results[len(results) // 2]), 2),
         runs_us_per_job=[round(sum(r), 2) for r in results])


def main() -> None:
    started = time.monotonic()
    with redis_server() as url:
        for batch, processes, jobs in RUNS:
            lease_ack(url, batch, processes, jobs)
        lifecycle(url, LIFECYCLE_JOBS, LIFECYCLE_RUNS)
        engine_groups.compare(url, emit)
    engine_cost.compare_servers(emit)  # on each redis-server at hand, its own
    log(f"bench_engine took {time.monotonic() - started:.1f}s")


if __name__ == "__main__":
    main()
