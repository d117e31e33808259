"""The whole pipeline under load, against its slowest part.

Prints one JSON object:
  {"bench": "pipeline", "jobs", "clients", "jobs_per_s", "latency_p50_ms", "latency_p99_ms",
   "worker_path_per_s", "ratio", "target_met", ...}

It starts a private ``sluice dev`` stack (the template's functions; WORKERS worker containers)
and sends JOBS ``echo`` jobs over HTTP from CLIENTS threads, PER_REQUEST jobs per request (the
local stack runs two gateway containers, AWS 50: one job per request, ``--batch 1``, measures
those two), without an
Idempotency-Key (the gateway then writes nothing to DynamoDB). ``jobs_per_s`` is JOBS over the
time from the first 202 to the last result written (from the stack's history); the latency is
each job's 202 to its result write. Then, in the same run and against the same moto server,
the worker path alone: WORKERS threads granting a fencing token and writing a result with it
(the two DynamoDB calls every job makes in a worker) for as long as the pipeline ran, at most
WORKER_PATH_S. On this machine moto, one Python process answering one request at a time, is
the slowest part of the pipeline; target (issue 18): jobs_per_s >= 0.7 x worker_path_per_s.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_latency import Tail, pct
from benchmarks.common import by_function, dev_stack, emit, log

JOBS = 5_000
CLIENTS = 8
WORKERS = 4
PER_REQUEST = 10
WORKER_PATH_S = 20.0
TIMEOUT_S = 900.0


def send(url: str, n: int, clients: int, batch: int = 1,
         queue: str = "echo") -> tuple[dict[str, float], list[str]]:
    """``n`` requests of ``batch`` jobs to ``queue`` (echo: payload {"i"...}; any other queue: an
    integer payload) from ``clients`` threads; each job's 202 time (wall clock) by job id."""
    from sluice.client import Client

    accepted: dict[str, float] = {}
    errors: list[str] = []
    lock = threading.Lock()
    counter = iter(range(n))

    def client() -> None:
        c = Client(url, timeout_s=30)
        for i in counter:  # shared: each index once across the threads
            try:
                if batch == 1:
                    jobs = [c.enqueue(queue, {"i": i} if queue == "echo" else i, keyed=False).job_id]
                else:
                    reply = c.enqueue_batch(queue, [{"payload": {"i": i, "k": k} if queue == "echo"
                                                     else i * batch + k} for k in range(batch)],
                                            keyed=False)
                    jobs = [j.job_id for j in reply.jobs]
            except Exception as exc:  # counted, not fatal: the figure says how many got through
                with lock:
                    errors.append(str(exc)[:200])
                continue
            now = time.time()
            with lock:
                accepted.update(dict.fromkeys(jobs, now))

    threads = [threading.Thread(target=client, name=f"bench-client-{k}") for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return accepted, errors


def worker_path(settings: Any, threads: int, seconds: float) -> float:
    """Grant + fenced result write per job, ``threads`` at once: the store's part of a job."""
    from sluice.backends.dynamodb.jobs import DynamoJobStore

    counts = [0] * threads
    stop = time.monotonic() + seconds

    def run(k: int) -> None:
        store = DynamoJobStore.from_settings(settings)
        owner = f"bench-{k}"
        while time.monotonic() < stop:
            job_id = f"wp-{uuid.uuid4().hex[:16]}"
            token = store.grant(job_id, "echo", owner)
            store.write_result(job_id, token, {"echo": {"i": 0}})
            counts[k] += 1

    started = time.monotonic()
    pool = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return sum(counts) / (time.monotonic() - started)


def run(jobs: int, clients: int, workers: int, batch: int = 1) -> dict[str, Any]:
    with dev_stack("pipeline", workers=workers, warm_workers=workers) as (dev, endpoints, counts):
        tail = Tail(str(endpoints["history_path"]))
        from sluice.client import Client

        warm = Client(str(endpoints["gateway_url"])).enqueue("echo", {"warm": True}, keyed=False).job_id
        deadline = time.monotonic() + 90
        while not tail.written(warm) and time.monotonic() < deadline:
            tail.read()
            time.sleep(0.05)
        counts.clear()
        log(f"pipeline: sending {jobs} jobs from {clients} clients")
        t0 = time.monotonic()
        accepted, errors = send(str(endpoints["gateway_url"]), jobs // batch, clients, batch)
        sent_s = time.monotonic() - t0
        log(f"pipeline: {len(accepted)} accepted in {sent_s:.1f}s ({len(errors)} errors); waiting")
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            tail.read()
            if all(tail.written(j) for j in accepted):
                break
            time.sleep(0.2)
        done = {j: tail.first[j]["write"] for j in accepted if tail.written(j)}
        first, last = min(accepted.values()), max(done.values(), default=0.0)
        elapsed = max(1e-9, last - first)
        latency_ms = [(done[j] - at) * 1000 for j, at in accepted.items() if j in done]
        invocations = dict(counts)
        log(f"pipeline: {len(done)} results in {elapsed:.1f}s; now the worker path alone")
        alone = worker_path(dev.settings, workers, min(WORKER_PATH_S, elapsed))
    rate = len(done) / elapsed
    return {"jobs": jobs, "clients": clients, "workers": workers, "per_request": batch,
            "accepted": len(accepted),
            "errors": len(errors), "completed": len(done), "seconds": round(elapsed, 1),
            "jobs_per_s": round(rate, 1), "enqueue_per_s": round(len(accepted) / sent_s, 1),
            "latency_p50_ms": round(pct(latency_ms, 0.5)), "latency_p99_ms": round(pct(latency_ms, 0.99)),
            "worker_path_per_s": round(alone, 1), "ratio": round(rate / alone, 3) if alone else None,
            "target_met": bool(alone) and rate >= 0.7 * alone,
            "invocations": by_function(invocations),
            "load_1m": round(os.getloadavg()[0], 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=JOBS)
    parser.add_argument("--clients", type=int, default=CLIENTS)
    parser.add_argument("--workers", type=int, default=WORKERS)
    parser.add_argument("--batch", type=int, default=PER_REQUEST, help="jobs per request (1-100)")
    args = parser.parse_args()
    emit("pipeline", **run(args.jobs, args.clients, args.workers, args.batch))


if __name__ == "__main__":
    main()
