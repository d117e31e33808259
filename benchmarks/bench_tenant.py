"""The tenant nemesis's cost to everyone else (issue 28): the others' latency with one tenant
holding its queue every way it can, against the same workload without it, in the same run.

Prints one JSON object per case (``CASES``, BENCH_TENANT_CASES):
  {"bench": "tenant", "case", "jobs", "flood", "window_s", "relay_max_pending",
   "quiet": {"p50", "p99", "n"}, "nemesis": {"p50", "p99", "n"}, "others_drained_while_held",
   "tenant_accepted", "ratio_p99", "target_ratio_p99": 2.0, "load": {"quiet", "nemesis"},
   "cpu": {"quiet", "nemesis", "split"}}

Both runs are ``sluice chaos`` on the Lambda runtime with no faults and the same seed: ``jobs``
ordinary jobs over ``duration`` seconds. In the nemesis run the tenant (``chaos.tenant``) pauses
its queue, floods it with ``flood`` jobs (50,000: ten times the relay's old hold limit of 5,000
records per partition), adds 100 jobs delayed 7 days, goes over its byte budget where there are
budgets, and from half the window on is rate-limited instead of paused. Latency is each ordinary
job's time from its accepted enqueue to its first accepted result (``chaos.tenant.latency``).

The tenant's own jobs are not drained in the nemesis run (at the local stack's pace, 50,000 jobs
take many minutes), so that run's checker counts them as not finished; this benchmark reports
only the others, and ``tests/chaos/test_tenant.py`` proves on a smaller flood that every one of
the tenant's jobs runs after it lets go. Environment: BENCH_TENANT_JOBS, _CASES, _DURATION, _FLOOD.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import emit, log
from sluice_dev.chaos import cpu, runner, tenant

TARGET = 2.0


# (flood, window s, relay_max_pending): "full" floods ten times the relay's old hold limit of 5,000
# records per partition; its 150 s window lets the local stack's gateway (Kafka appends on a
# moto-backed Tansu, about 350 jobs a second) accept the whole flood. "scaled" is the same act
# with the hold limit scaled down to 500 (as tests/stack/test_parking_stack.py does), so that its
# 5,000-job flood parks within what moto writes in a 30 s window.
CASES = {"full": (50_000, 150.0, None), "scaled": (5_000, 30.0, 500)}


def main() -> None:
    jobs = int(os.environ.get("BENCH_TENANT_JOBS", "300"))
    for case in os.environ.get("BENCH_TENANT_CASES", "full,scaled").split(","):
        flood, duration, max_pending = CASES[case]
        flood = int(os.environ.get("BENCH_TENANT_FLOOD", flood))
        duration = float(os.environ.get("BENCH_TENANT_DURATION", duration))
        figures, load = {}, {}
        with tempfile.TemporaryDirectory(prefix="bench-tenant-") as tmp:
            for name, plan in (("quiet", None), ("nemesis", tenant.TenantPlan(flood=flood))):
                o = runner.Options(jobs=jobs, duration_s=duration, seed=5, faults=False, families=False,
                                   tenant=plan, drain_tenant=False, state_dir=Path(tmp) / name,
                                   relay_max_pending=max_pending, measure_cpu=True)
                before = os.getloadavg()[0]
                figures[name] = runner.run(o, say=log)
                load[name] = [round(before, 2), round(os.getloadavg()[0], 2)]
        quiet, loud = figures["quiet"], figures["nemesis"]
        accepted = int(loud.tenant.get("accepted") or 0)
        p99_quiet = float(quiet.latency.get("p99") or 0)
        emit("tenant", case=case, jobs=jobs, flood=flood, window_s=duration,
             relay_max_pending=max_pending or 5000, quiet=quiet.latency, nemesis=loud.latency,
             others_drained_while_held=loud.tenant.get("others_drained_while_held"),
             tenant_accepted=accepted,
             ratio_p99=round(float(loud.latency.get("p99") or 0) / p99_quiet, 2) if p99_quiet else None,
             target_ratio_p99=TARGET, load=load,
             cpu={"quiet": quiet.cpu, "nemesis": loud.cpu, "split": cpu.split(quiet.cpu, loud.cpu, accepted)})


if __name__ == "__main__":
    main()
