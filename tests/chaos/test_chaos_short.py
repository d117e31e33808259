"""The short chaos run of ``make test``: 500 jobs through the real pipeline under a seeded nemesis.

About a minute: the command starts its own redis-server, moto server and Tansu (storing to
S3 on that moto server), three worker processes and a relay, enqueues 500 jobs while the
nemesis injects every kind of fault, waits for the queues to drain, and checks the history.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from sluice.chaos.cli import chaos
from sluice.chaos.nemesis import KINDS

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.timeout(300)
def test_500_jobs_under_every_fault_lose_nothing_and_break_no_invariant(tmp_path: Path) -> None:
    result = CliRunner().invoke(chaos, ["--jobs", "500", "--duration", "45", "--seed", "11", "--json",
                                        "--state-dir", str(tmp_path / "run")])
    report = json.loads(result.output.strip().splitlines()[-1])
    assert result.exit_code == 0, result.output[-3000:]
    assert report["accepted"] == 500 and report["drained"] is True
    for invariant in ("lost", "unexpected", "duplicate_results", "wrong_results", "stale_writes_accepted",
                      "stuck"):
        assert report[invariant] == 0, (invariant, report.get("samples"), report.get("diagnosis"))
    assert set(report["faults"]) == set(KINDS) and all(n >= 1 for n in report["faults"].values())
    # the faults did bite: some jobs ran more than once, and every job ran at least once
    assert report["duplicate_executions"] >= 1
    assert report["executions"] >= report["succeeded"] == 500
    assert (tmp_path / "run" / "history.jsonl").stat().st_size > 0
