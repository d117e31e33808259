"""`sluice demo --jobs 200 --json`: exits 0 and its measured summary adds up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sluice_dev.examples import failing_attempts
from sluice_dev.local import workload

pytestmark = [pytest.mark.integration, pytest.mark.timeout(170)]


def test_demo_200_jobs_exits_0_with_a_consistent_summary(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    sluice = str(Path(sys.executable).parent / "sluice")
    result = subprocess.run([sluice, "--state-dir", str(tmp_path / "demo"),
                             "demo", "--jobs", "200", "--json", "--timeout", "150"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=165)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    s = json.loads(result.stdout.strip().splitlines()[-1])
    plan = workload.plan(200, 1, "http://sink")
    for key in ("accepted", "succeeded", "dead", "duplicates_suppressed", "retries", "leases_lost",
                "fenced_writes_rejected", "fenced_calls_rejected", "stale_writes_accepted", "latency_ms",
                "jobs_per_s"):
        assert key in s, key
    assert s["accepted"] == 200
    assert s["succeeded"] + s["dead"] == s["accepted"]
    assert s["dead"] == plan.count(lambda j: j.expect_dead) > 0
    assert s["duplicates_suppressed"] == plan.count(lambda j: j.duplicate) > 0
    # every failure the flaky handler predicts is a retry, except each dead job's last attempt
    predicted = sum(j.max_attempts - 1 if j.expect_dead else failing_attempts(j.payload) or 0
                    for j in plan.jobs if j.queue == "flaky")
    assert s["retries"] >= predicted > 0
    assert s["stale_writes_accepted"] == 0
    # the frozen worker's takeover and its refused write happen on every run (issue 13, bug 7)
    assert s["fenced_writes_rejected"] >= 1 and s["leases_lost"] >= 1
    # ... and its late call to the ledger's service, refused by the service's fence (issue 31, item 7)
    assert s["fenced_calls_rejected"] >= 1
    assert "calls refused by a service's fence" in result.stdout + result.stderr
    lat = s["latency_ms"]
    assert 0 < lat["p50"] <= lat["p95"] <= lat["p99"]
    assert s["jobs_per_s"] > 0
    # jobs that start jobs (issue 15): each parent's children ran, and its continuation summed them
    parents = plan.count(lambda j: j.queue == "fanout")
    assert s["families"] == {"parents": parents, "children": parents * workload.FANOUT_CHILDREN,
                             "continuations": parents, "sums_ok": parents}
    assert parents >= 1
    assert s["ok"] is True
    assert "invariants hold" in result.stdout + result.stderr
    assert not (tmp_path / "demo").exists()  # cleaned up after itself
