"""Lease cost with fair groups (issue 28, item 5) against the engine at a base commit, in one run.

Part of the engine benchmark (``bench_engine.py`` calls ``compare``). The base commit's code
(``BASE``, before groups) is exported with ``git archive`` into a temporary directory, and each
measurement runs in a child process whose ``sluice`` is either that tree's or this one's, against
the same redis-server. Runs alternate base / this tree (and which of the two goes first), so drift
on a shared machine falls on both, and each pair of neighbouring runs gives one ratio.

One measurement: push ``jobs`` no-op jobs (relay-sized batches; ``groups`` > 0 spreads them over
that many groups in turn, 0 puts them in none), then lease them all, ``batch`` at a time, with no
ack in between, then ack them all. The figure is Redis's own accounting of the scripts, INFO
commandstats: the microseconds of EVALSHA (each script call, the commands it calls included) per
leased job (``lease_us_per_job``) and per acked job. INFO cpu (the whole server: parsing, replies,
syscalls) is printed beside it (``cpu_ratio``): it moves more with other processes' load.

Prints one JSON object per case:
  {"bench": "lease_groups", "batch", "groups", "jobs", "runs", "lease_us_per_job",
   "base_lease_us_per_job" (medians), "ratio" (the median of the pairs' ratios), "ratio_min",
   "ratio_max", "ratios", "lease_ack_ratio", "cpu_ratio", ...}
Target (issue 28): ratio <= 1.5 for every case.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BASE = "c44b81f"  # the engine before groups (issue 28 measures against it)
RUNS = 5
PUSH_BATCH = 500
LEASE_MS = 30_000
# (batch, groups, jobs): groups 0 is the ungrouped path, which must lease at the base's cost.
CASES = [(1, 0, 4_000), (1, 10, 4_000), (50, 0, 20_000), (50, 2, 20_000), (50, 10, 20_000),
         (50, 1_000, 20_000)]


# --- the child: one measurement with whichever ``sluice`` is on its path ----------------------

def _engine() -> tuple[Any, Any]:
    try:
        from sluice.backends.redis.engine import RedisQueue
        from sluice.core.models import JobSpec
    except ImportError:  # the base commit's layout
        from sluice.models import JobSpec  # type: ignore[import-not-found,no-redef]
        from sluice.redis.engine import RedisQueue  # type: ignore[import-not-found,no-redef]
    return RedisQueue, JobSpec


def _cpu(client: Any) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _script_usec(client: Any) -> float:
    """Redis's own time in scripts so far (EVALSHA, the commands each script calls included), from
    INFO commandstats, in microseconds."""
    stats = client.info("commandstats")
    return sum(float(stats[name]["usec"]) for name in ("cmdstat_evalsha", "cmdstat_eval") if name in stats)


def measure(url: str, batch: int, groups: int, jobs: int) -> dict[str, float]:
    import redis

    queue_cls, spec_cls = _engine()
    client = redis.Redis.from_url(url)
    client.flushall()
    q = queue_cls.from_url(url)
    extra = (lambda i: {"group": f"t{i % groups}"}) if groups else (lambda i: {})
    q.push("warm", "bench", 0, 1, [(i, spec_cls(job_id=f"w{i}", queue="warm", payload=i, **extra(i)))
                                   for i in range(10)])
    warm = q.lease("warm", 10, LEASE_MS)
    q.ack_many("warm", [(j.job_id, j.lease_token) for j in warm])
    for start in range(0, jobs, PUSH_BATCH):
        q.push("b", "bench", 0, 1, [(i, spec_cls(job_id=f"j{i}", queue="b", payload={"n": i}, **extra(i)))
                                    for i in range(start, min(jobs, start + PUSH_BATCH))])
    leased: list[tuple[str, int]] = []
    cpu0, us0, t0 = _cpu(client), _script_usec(client), time.perf_counter()
    while got := q.lease("b", batch, LEASE_MS):
        leased += [(j.job_id, j.lease_token) for j in got]
    cpu1, us1, t1 = _cpu(client), _script_usec(client), time.perf_counter()
    for start in range(0, len(leased), batch):
        errors = q.ack_many("b", leased[start:start + batch])
        assert not any(errors), errors
    cpu2, us2 = _cpu(client), _script_usec(client)
    assert len(leased) == jobs, (len(leased), jobs)
    q.close()
    client.close()
    return {"lease_us": (us1 - us0) / jobs, "ack_us": (us2 - us1) / jobs,
            "lease_cpu_us": (cpu1 - cpu0) * 1e6 / jobs, "ack_cpu_us": (cpu2 - cpu1) * 1e6 / jobs,
            "lease_jobs_per_s": jobs / (t1 - t0)}


# --- the parent ---------------------------------------------------------------------------------

def _this_tree() -> Path:
    import sluice

    return Path(sluice.__file__).resolve().parents[1]


def _base_tree(into: Path) -> Path:
    """The base commit's ``shared`` directory, exported from this repository."""
    repo = Path(__file__).resolve().parent.parent
    archive = subprocess.run(["git", "-C", str(repo), "archive", BASE, "shared"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "shared"


def _child(shared: Path, url: str, batch: int, groups: int, jobs: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(shared)}
    out = subprocess.run([sys.executable, __file__, url, str(batch), str(groups), str(jobs)], env=env,
                         check=True, capture_output=True, text=True, timeout=600).stdout
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _pairs(mine: list[dict[str, float]], theirs: list[dict[str, float]], figure: Any) -> list[float]:
    """The ratio of each run of this tree to the base run beside it (same pass of the loop)."""
    return [figure(m) / figure(t) for m, t in zip(mine, theirs, strict=True)]


def compare(url: str, emit: Any, runs: int = RUNS, cases: list[tuple[int, int, int]] | None = None) -> None:
    """Each case of ``cases`` (``CASES``), this tree against ``BASE``, ``runs`` times alternating."""
    tmp = Path(tempfile.mkdtemp(prefix="sluice-base-"))
    try:
        base, this = _base_tree(tmp), _this_tree()
        for batch, groups, jobs in cases or CASES:
            mine: list[dict[str, float]] = []
            theirs: list[dict[str, float]] = []
            for run in range(runs):  # which goes first alternates too: no order effect on either
                for side in ((0, 1) if run % 2 == 0 else (1, 0)):
                    if side == 0:
                        theirs.append(_child(base, url, batch, 0, jobs))  # the base has no groups
                    else:
                        mine.append(_child(this, url, batch, groups, jobs))
            ratios = _pairs(mine, theirs, lambda r: r["lease_us"])
            with_acks = _pairs(mine, theirs, lambda r: r["lease_us"] + r["ack_us"])
            median = statistics.median
            emit("lease_groups", batch=batch, groups=groups, jobs=jobs, base=BASE, runs=runs,
                 measure="INFO commandstats: EVALSHA usec per leased job",
                 lease_us_per_job=round(median(r["lease_us"] for r in mine), 2),
                 base_lease_us_per_job=round(median(r["lease_us"] for r in theirs), 2),
                 ratio=round(median(ratios), 2), ratio_min=round(min(ratios), 2),
                 ratio_max=round(max(ratios), 2), ratios=[round(x, 2) for x in ratios],
                 lease_ack_ratio=round(median(with_acks), 2),
                 cpu_ratio=round(median(_pairs(mine, theirs, lambda r: r["lease_cpu_us"])), 2),
                 lease_jobs_per_s=round(median(r["lease_jobs_per_s"] for r in mine)),
                 base_lease_jobs_per_s=round(median(r["lease_jobs_per_s"] for r in theirs)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--compare"]:  # the comparison alone: python -m benchmarks.engine_groups --compare
        from benchmarks.common import emit as emit_
        from benchmarks.common import redis_server

        with redis_server() as url_:
            compare(url_, emit_)
    else:
        url_, batch_, groups_, jobs_ = sys.argv[1], *map(int, sys.argv[2:5])
        print(json.dumps(measure(url_, batch_, groups_, jobs_)))
