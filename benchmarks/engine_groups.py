"""Lease cost with fair groups (issue 28, item 5) against the engine at a base commit, in one run.

Part of the engine benchmark (``bench_engine.py`` calls ``compare``). The base commit's code
(``BASE``, before groups) is exported with ``git archive`` into a temporary directory. Two child
processes, one whose ``sluice`` is that tree's and one this tree's, each push ``jobs`` no-op jobs
into a queue of their own on the same redis-server (``groups`` > 0 spreads this tree's over that many
groups in turn; the base has none), then lease them all ``batch`` at a time with no ack in between,
then ack them all. The parent calls them in turn, one batch each (which goes first alternates), and
reads Redis's own accounting around each call: INFO commandstats, the microseconds of EVALSHA (the
script, the commands it calls included). So both sides are measured at the same moments of a shared
machine's load, batch by batch, and the ratio of their script time per job is the figure:
``ratio`` = this tree's mean / the base's mean, over ``RUNS`` runs (median, min, max, each run's;
``median_ratios`` compares the medians of the per-call figures instead, which outliers move less).

Prints one JSON object per case:
  {"bench": "lease_groups", "batch", "groups", "jobs", "runs", "lease_us_per_job",
   "base_lease_us_per_job", "ratio", "ratio_min", "ratio_max", "ratios", "median_ratios",
   "lease_ack_ratios"}
Target (issue 28): ratio <= 1.5 for every case.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # a child (``_Side``) runs this file as a script
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.base_tree import BASE, Child, engine, export_tree, script_usec, this_tree

RUNS = 3
PUSH_BATCH = 500
LEASE_MS = 600_000  # longer than a run: no lease lapses and is leased twice
# (batch, groups, jobs): groups 0 is the ungrouped path, which must lease at the base's cost.
CASES = [(1, 0, 4_000), (1, 10, 4_000), (50, 0, 20_000), (50, 2, 20_000), (50, 10, 20_000),
         (50, 1_000, 20_000)]


# --- the child: one measurement with whichever ``sluice`` is on its path ----------------------

def serve(url: str, queue: str, batch: int, groups: int, jobs: int) -> None:
    """The interleaved child: push ``jobs`` into ``queue``, print "ready", then per line read, "lease"
    one batch or "ack" one batch of those leased (printing how many), until "quit"."""
    queue_cls, spec_cls = engine()
    q = queue_cls.from_url(url)
    extra = (lambda i: {"group": f"t{i % groups}"}) if groups else (lambda i: {})
    warm = f"{queue}-warm"
    q.push(warm, "bench", 0, 1, [(i, spec_cls(job_id=f"w{i}", queue=warm, payload=i, **extra(i)))
                                 for i in range(10)])
    q.ack_many(warm, [(j.job_id, j.lease_token) for j in q.lease(warm, 10, LEASE_MS)])
    for start in range(0, jobs, PUSH_BATCH):
        q.push(queue, "bench", 0, 1, [(i, spec_cls(job_id=f"j{i}", queue=queue, payload={"n": i}, **extra(i)))
                                      for i in range(start, min(jobs, start + PUSH_BATCH))])
    leased: list[tuple[str, int]] = []
    acked = 0
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() == "lease":
            got = q.lease(queue, batch, LEASE_MS)
            leased += [(j.job_id, j.lease_token) for j in got]
            print(len(got), flush=True)
        elif line.strip() == "ack":
            errors = q.ack_many(queue, leased[acked:acked + batch]) if acked < len(leased) else []
            assert not any(errors), errors
            acked += len(errors)
            print(len(errors), flush=True)
        else:
            break
    assert len(leased) == jobs == acked, (len(leased), jobs, acked)
    q.close()


# --- the parent ---------------------------------------------------------------------------------

class _Side(Child):
    """One interleaved child and Redis's script time for each of its calls (usec, jobs)."""

    def __init__(self, shared: Path, url: str, queue: str, batch: int, groups: int, jobs: int) -> None:
        super().__init__(__file__, shared, url, queue, str(batch), str(groups), str(jobs))
        self.calls: dict[str, list[tuple[float, int]]] = {"lease": [], "ack": []}

    def call(self, client: Any, verb: str) -> int:
        before = script_usec(client)
        n = int(self.ask(verb))
        if n:
            self.calls[verb].append((script_usec(client) - before, n))
        return n

    def per_job(self, verb: str) -> tuple[float, float]:
        """(mean, median) script usec per job over this side's calls."""
        calls = self.calls[verb]
        return (sum(u for u, _ in calls) / sum(n for _, n in calls),
                statistics.median(u / n for u, n in calls))


def interleaved(url: str, base: Path, this: Path, batch: int, groups: int, jobs: int) -> dict[str, float]:
    """The base and this tree, each in its own child on its own queue of one redis-server, called in
    turn one batch at a time (which goes first alternates), Redis's script time read around each
    call: both see the same moments of a shared machine's load."""
    import redis

    client = redis.Redis.from_url(url)
    client.flushall()
    sides = [_Side(base, url, "base", batch, 0, jobs), _Side(this, url, "this", batch, groups, jobs)]
    try:
        for side in sides:
            side.ready()
        for verb in ("lease", "ack"):
            done, turn = [False, False], 0
            while not all(done):
                for k in ((0, 1) if turn % 2 == 0 else (1, 0)):
                    if not done[k]:
                        done[k] = sides[k].call(client, verb) == 0
                turn += 1
    finally:
        for side in sides:
            side.close()
        client.close()
    (base_mean, base_median), (mean, median) = sides[0].per_job("lease"), sides[1].per_job("lease")
    base_ack, ack = sides[0].per_job("ack")[0], sides[1].per_job("ack")[0]
    return {"lease_us": mean, "base_lease_us": base_mean, "ratio": mean / base_mean,
            "median_ratio": median / base_median, "lease_ack_ratio": (mean + ack) / (base_mean + base_ack)}


def compare(url: str, emit: Any, runs: int = RUNS, cases: list[tuple[int, int, int]] | None = None) -> None:
    """Each case ``runs`` times, base and this tree interleaved batch by batch (``interleaved``)."""
    tmp = Path(tempfile.mkdtemp(prefix="sluice-base-"))
    try:
        base, this = export_tree(tmp), this_tree()
        for batch, groups, jobs in cases or CASES:
            got = [interleaved(url, base, this, batch, groups, jobs) for _ in range(runs)]
            ratios = [r["ratio"] for r in got]
            emit("lease_groups", batch=batch, groups=groups, jobs=jobs, base=BASE, runs=runs,
                 measure="INFO commandstats: EVALSHA usec per leased job, read around each call",
                 lease_us_per_job=round(statistics.median(r["lease_us"] for r in got), 2),
                 base_lease_us_per_job=round(statistics.median(r["base_lease_us"] for r in got), 2),
                 ratio=round(statistics.median(ratios), 2), ratio_min=round(min(ratios), 2),
                 ratio_max=round(max(ratios), 2), ratios=[round(x, 2) for x in ratios],
                 median_ratios=[round(r["median_ratio"], 2) for r in got],
                 lease_ack_ratios=[round(r["lease_ack_ratio"], 2) for r in got])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:  # a child (``_Side``)
        serve(sys.argv[2], sys.argv[3], *map(int, sys.argv[4:7]))
    else:  # the comparison alone: python -m benchmarks.engine_groups
        from benchmarks.common import emit as emit_
        from benchmarks.common import redis_server

        with redis_server() as url_:
            compare(url_, emit_)
