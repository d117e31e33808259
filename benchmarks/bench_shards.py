"""Cluster mode's cost: the job lifecycle on 3 queues across 3 shards, against the same 3
queues on one node, in the same run.

Prints one JSON object:
  {"bench": "shards", "jobs", "queues": 3, "shards": 3,
   "node_us_per_job", "cluster_us_per_job", "ratio", "target_ratio": 1.1, ...}

The lifecycle is bench_engine's: push in relay-sized batches (with offsets), lease 50 at a
time, ack them in one call, per queue. Redis CPU per job is the servers' own accounting (INFO
cpu: used_cpu_user + used_cpu_sys) over the window, summed over every node (the cluster's three
masters; the one node), divided by jobs. Each queue's name is picked so its ``{queue}`` slot is
on its own master. One-node and cluster runs alternate, and each side's figure is the best of
its runs (other processes on a shared machine only ever add to what Redis is charged), with
the medians alongside.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis
from redis.crc import key_slot

from benchmarks.common import drain, emit, log
from sluice.backends.redis.engine import RedisQueue
from sluice.core.models import JobSpec
from sluice_dev.local.cluster import Cluster, start_cluster
from sluice_dev.local.servers import start_redis

LEASE_MS = 30_000
PUSH_BATCH = 500
JOBS, RUNS, SHARDS = 30_000, 5, 3
TARGET = 1.10


def queues_for(cluster: Cluster) -> list[str]:
    """One queue name per master, by its ``{queue}`` slot."""
    out = []
    for first, last in cluster.ranges:
        out.append(next(f"life{i}" for i in range(100_000) if first <= key_slot(f"life{i}".encode()) <= last))
    return out


def cpu_s(ports: list[int]) -> float:
    total = 0.0
    for port in ports:
        with redis.Redis(port=port) as c:
            info = c.info("cpu")
            total += float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    return total


def flush(ports: list[int]) -> None:
    for port in ports:
        with redis.Redis(port=port) as c:
            c.flushall()


def lifecycle_once(url: str, ports: list[int], queues: list[str], jobs: int) -> float:
    """Redis CPU (µs per job, all nodes) of pushing ``jobs`` over ``queues`` and leasing and
    acking them."""
    flush(ports)
    q = RedisQueue.from_url(url)
    for queue in queues:  # warm up: every script loaded, every connection open
        q.push(queue, "warm", 0, 1, [(0, JobSpec(job_id="w", queue=queue, payload={}))])
        for job in q.lease(queue, 1, LEASE_MS, "bench"):
            q.ack(queue, job.job_id, job.lease_token)
    per_queue = jobs // len(queues)
    cpu0 = cpu_s(ports)
    for queue in queues:
        for start in range(0, per_queue, PUSH_BATCH):
            records = [(i, JobSpec(job_id=f"{queue}-{i}", queue=queue, payload={"n": i}))
                       for i in range(start, min(per_queue, start + PUSH_BATCH))]
            q.push(queue, "bench", 0, 1, records)
    done = sum(drain(q, queue, LEASE_MS) for queue in queues)
    cpu1 = cpu_s(ports)
    q.close()
    assert done == per_queue * len(queues), (done, jobs)
    return (cpu1 - cpu0) * 1e6 / done


def measure(jobs: int = JOBS, runs: int = RUNS) -> dict[str, object]:
    node = start_redis()
    cluster = start_cluster(SHARDS)
    try:
        queues = queues_for(cluster)
        node_ports, cluster_ports = [node.port], [s.port for s in cluster.nodes]
        node_runs, cluster_runs = [], []
        for _ in range(runs):
            node_runs.append(lifecycle_once(node.extra["url"], node_ports, queues, jobs))
            cluster_runs.append(lifecycle_once(cluster.url, cluster_ports, queues, jobs))
    finally:
        cluster.stop()
        node.stop()
    best_node, best_cluster = min(node_runs), min(cluster_runs)
    return {"jobs": jobs - jobs % len(queues), "queues": len(queues), "shards": SHARDS,
            "push_batch": PUSH_BATCH, "lease_ack_batch": 50,
            "node_us_per_job": round(best_node, 2), "cluster_us_per_job": round(best_cluster, 2),
            "ratio": round(best_cluster / best_node, 3), "target_ratio": TARGET,
            "median_ratio": round(statistics.median(cluster_runs) / statistics.median(node_runs), 3),
            "node_runs_us": [round(r, 2) for r in node_runs],
            "cluster_runs_us": [round(r, 2) for r in cluster_runs]}


def main() -> None:
    started = time.monotonic()
    emit("shards", **measure())
    log(f"bench_shards took {time.monotonic() - started:.1f}s")


if __name__ == "__main__":
    main()
