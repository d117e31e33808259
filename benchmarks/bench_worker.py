"""The worker's full path against its parts: does the runtime add little beyond its I/O?

Prints, one JSON object per line, for P = 1 and 2 worker processes:
  {"bench": "worker", "processes": P, "jobs_per_s", "redis_only_jobs_per_s", "fenced_write_per_s",
   "p50_job_overhead_ms", "full_vs_slowest_part", ...}

- jobs_per_s: no-op jobs through sluice.Worker (lease in batches of 10, grant the
  fencing token, run the handler on its thread, fenced result write, ack; heartbeat
  thread running, Powertools JSON logs at INFO to /dev/null, metrics in memory).
- redis_only_jobs_per_s: the same lease (batches of 10) + ack per job on RedisQueue alone.
- fenced_write_per_s: the store's part of one job alone: grant (mints the token) +
  fenced write_result. A fenced write cannot exist without its grant, so this is the
  DynamoDB cost of one job; write_only_per_s is the write by itself, for reference.
- p50_job_overhead_ms: per job, the runtime's own time: wall time of one job in the
  runner minus the time spent inside queue and store calls (the handler is a no-op, so
  its thread start and join count as overhead).
Target: jobs_per_s >= 80% of min(redis_only_jobs_per_s, fenced_write_per_s).

Each window runs DURATION seconds with P processes started at once (a barrier), against
one redis-server and one moto server started here; full path and store windows alternate
ROUNDS times and the ratio is the median of per-round ratios. moto is a Python server and much
slower per request than DynamoDB, so the store part is the slow one here.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import emit, log, redis_server
from sluice_dev.local.servers import DUMMY_AWS_ENV, start_moto

DURATION = 1.5
ROUNDS = 8
LEASE_BATCH = 10
LEASE_MS = 30_000
RESULT = {"ok": True}

for _k, _v in DUMMY_AWS_ENV.items():
    os.environ.setdefault(_k, _v)


def settings(cfg: dict[str, str]) -> Any:
    from sluice.core.config import Settings

    return Settings(redis_url=cfg["redis"], aws_endpoint_url=cfg["moto"], jobs_table=cfg["table"],
                    results_bucket=cfg["bucket"], idempotency_table=cfg["table"] + "-idem")


def fill(cfg: dict[str, str], queue: str, jobs: int) -> None:
    from sluice.backends.redis.engine import RedisQueue
    from sluice.core.models import JobSpec

    q = RedisQueue.from_url(cfg["redis"])
    for start in range(0, jobs, 1000):
        q.enqueue_many([JobSpec(job_id=f"{queue}-{i}", queue=queue, payload={"n": i})
                        for i in range(start, min(jobs, start + 1000))])
    q.close()


# -- the three workloads; each child process runs whichever the parent asks for -------------------


class Timed:
    """Forwards to ``target``, adding the time spent in each call to the calling thread's total."""

    def __init__(self, target: Any, acc: threading.local) -> None:
        self._target, self._acc = target, acc

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if not callable(attr):
            return attr
        acc = self._acc

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return attr(*args, **kwargs)
            finally:
                acc.io = getattr(acc, "io", 0.0) + time.perf_counter() - t0
        return timed


class Child:
    """One benchmark process: a Redis queue, a store and a worker, built once, reused per round."""

    def __init__(self, cfg: dict[str, str]) -> None:
        from aws_lambda_powertools import Logger

        from sluice.backends.dynamodb.jobs import DynamoJobStore
        from sluice.backends.redis.engine import RedisQueue
        from sluice.worker.registry import Worker
        from sluice.worker.runtime import execute
        from sluice.worker.runtime.options import WorkerOptions
        from sluice.worker.runtime.telemetry import MemoryMetrics, Telemetry

        s = settings(cfg)
        self.queue = RedisQueue.from_settings(s)
        self.store = DynamoJobStore.from_settings(s)
        self.prefix, self.owner = uuid.uuid4().hex[:8], f"bench-{os.getpid()}"
        self.acc = threading.local()
        self.overheads: list[float] = []
        plain_run, acc, overheads = execute.JobRunner.run, self.acc, self.overheads

        def measured_run(runner: Any, tracked: Any, spec: Any) -> Any:
            acc.io = 0.0
            t0 = time.perf_counter()
            try:
                return plain_run(runner, tracked, spec)
            finally:
                overheads.append((time.perf_counter() - t0 - acc.io) * 1000)

        execute.JobRunner.run = measured_run  # type: ignore[method-assign]
        app = Worker()
        for name in ("full1", "full2", "warmup"):
            app.register(name, lambda job, ctx: RESULT)
        devnull = open(os.devnull, "w")  # noqa: SIM115 (lives as long as the process)
        self.worker = app.bind(queue=Timed(self.queue, acc), store=Timed(self.store, acc),
                               options=WorkerOptions(lease_ms=LEASE_MS, lease_batch=LEASE_BATCH),
                               telemetry=Telemetry(MemoryMetrics(), Logger(service="bench", stream=devnull)))
        self.worker.drain(["warmup"], 5)
        self.fenced_write(DURATION / 10)  # warm the store's connections

    def redis_only(self, queue: str, seconds: float) -> dict[str, Any]:
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            jobs = self.queue.lease(queue, LEASE_BATCH, LEASE_MS, self.owner)
            if not jobs:
                break
            for j in jobs:
                self.queue.ack(queue, j.job_id, j.lease_token)
            count += len(jobs)
        return {"count": count, "elapsed": time.perf_counter() - start}

    def fenced_write(self, seconds: float) -> dict[str, Any]:
        count, start, write_s = 0, time.perf_counter(), 0.0
        while time.perf_counter() - start < seconds:
            job_id = f"{self.prefix}-{uuid.uuid4().hex[:12]}"
            token = self.store.grant(job_id, "bench", self.owner)
            t0 = time.perf_counter()
            self.store.write_result(job_id, token, RESULT)
            write_s += time.perf_counter() - t0
            count += 1
        return {"count": count, "elapsed": time.perf_counter() - start, "write_s": write_s}

    def full_path(self, queue: str, seconds: float) -> dict[str, Any]:
        self.overheads.clear()
        stop = threading.Event()
        start = time.perf_counter()
        timer = threading.Timer(seconds, stop.set)
        timer.start()
        total = self.worker.run([queue], stop=stop, idle_s=0.01)
        timer.cancel()
        return {"count": total.outcomes["succeeded"], "elapsed": time.perf_counter() - start,
                "overheads": list(self.overheads)}


def child_main(cfg: dict[str, str], commands: Any, barrier: Any, out: Any) -> None:
    child = Child(cfg)
    out.put("ready")
    while (cmd := commands.get()) is not None:
        kind, queue = cmd
        barrier.wait()
        if kind == "redis":
            out.put(child.redis_only(queue, DURATION))
        elif kind == "store":
            out.put(child.fenced_write(DURATION))
        else:
            out.put(child.full_path(queue, DURATION))


def run_round(pool: list[tuple[Any, Any]], kind: str, queue: str) -> dict[str, Any]:
    for commands, _ in pool:
        commands.put((kind, queue))
    results = [out.get(timeout=120) for _, out in pool]
    count = sum(r["count"] for r in results)
    merged: dict[str, Any] = {"rate": count / max(r["elapsed"] for r in results), "count": count,
                              "overheads": [o for r in results for o in r.get("overheads", [])]}
    if kind == "store":
        merged["write_only_per_s"] = sum(r["count"] / r["write_s"] for r in results if r["write_s"])
    return merged


def bench(cfg: dict[str, str], processes: int) -> None:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(processes)
    pool = [(ctx.Queue(), ctx.Queue()) for _ in range(processes)]
    procs = [ctx.Process(target=child_main, args=(cfg, commands, barrier, out)) for commands, out in pool]
    for p in procs:
        p.start()
    try:
        for _, out in pool:
            assert out.get(timeout=120) == "ready"
        rounds: dict[str, list[dict[str, Any]]] = {"redis": [], "store": [], "full": []}
        # This machine is noisy and drifts (other work shares its 2 cores), so the full path
        # and the store's part, the slow one, run in adjacent windows, in alternating order,
        # many times; the Redis part, two orders of magnitude faster, first and last only.
        for r in range(ROUNDS):
            kinds = ["store", "full"] if r % 2 == 0 else ["full", "store"]
            if r in (0, ROUNDS - 1):
                kinds.append("redis")
            for kind in kinds:
                queue = f"{kind}{processes}" if kind != "store" else "store"
                if kind == "redis":
                    fill(cfg, queue, int(12_000 * DURATION * processes))
                elif kind == "full":
                    fill_full(cfg, f"full{processes}", r, int(400 * DURATION * processes))
                rounds[kind].append(run_round(pool, kind, queue))
                log(f"  P={processes} round {r} {kind}: {rounds[kind][-1]['rate']:.1f}/s")
    finally:
        for commands, _ in pool:
            commands.put(None)
        for p in procs:
            p.join(30)

    def median(kind: str, key: str = "rate") -> float:
        return float(statistics.median(x[key] for x in rounds[kind]))

    full, redis, store = median("full"), median("redis"), median("store")
    # Per round: the full path against the slower part measured next to it.
    ratio = statistics.median(f["rate"] / min(redis, st["rate"])
                              for f, st in zip(rounds["full"], rounds["store"], strict=True))
    overheads = [o for x in rounds["full"] for o in x["overheads"]]
    log(f"worker P={processes}: full {full:.0f}/s, redis only {redis:.0f}/s, fenced write {store:.0f}/s")
    emit("worker", processes=processes, jobs_per_s=round(full, 1), redis_only_jobs_per_s=round(redis, 1),
         fenced_write_per_s=round(store, 1), p50_job_overhead_ms=round(statistics.median(overheads), 3),
         full_vs_slowest_part=round(ratio, 3), target_met=ratio >= 0.8,
         write_only_per_s=round(median("store", "write_only_per_s"), 1),
         jobs_measured=sum(x["count"] for x in rounds["full"]), rounds=ROUNDS, seconds_per_round=DURATION)


def fill_full(cfg: dict[str, str], queue: str, round_no: int, jobs: int) -> None:
    """Fresh jobs for a full-path round (queue names differ per P, ids per round)."""
    from sluice.backends.redis.engine import RedisQueue
    from sluice.core.models import JobSpec

    q = RedisQueue.from_url(cfg["redis"])
    for start in range(0, jobs, 1000):
        q.enqueue_many([JobSpec(job_id=f"{queue}-r{round_no}-{i}", queue=queue, payload={"n": i})
                        for i in range(start, min(jobs, start + 1000))])
    q.close()


def main() -> None:
    from sluice.backends.dynamodb import tables

    moto = start_moto()
    try:
        with redis_server() as url:
            cfg = {"redis": url, "moto": moto.extra["url"], "table": "bench-jobs", "bucket": "bench-results"}
            tables.ensure_all(settings(cfg))
            fill(cfg, "warmup", 20)
            for p in (1, 2):
                bench(cfg, p)
    finally:
        moto.stop()


if __name__ == "__main__":
    main()
