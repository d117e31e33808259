"""The tenant nemesis (issue 28) on the real local pipeline: no queue holds back another.

One tenant pauses its queue for the whole run and floods it with ten times the relay's
hold limit (scaled down: a hold limit of 50 records per partition, a flood of 500), adds
jobs delayed 7 days and goes over its byte budget, while the others run the ordinary
workload. The others' jobs must all finish while the tenant still holds (before the fix they
waited behind its held records until it resumed), and then every one of the tenant's jobs
runs too: nothing lost, nothing run against its pause.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from sluice_dev.chaos.cli import chaos

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.timeout(420)
def test_a_tenant_holding_its_queue_every_way_stalls_no_other_queue_and_loses_nothing(tmp_path: Path) -> None:
    result = CliRunner().invoke(chaos, [
        "--runtime", "lambda", "--jobs", "40", "--duration", "10", "--seed", "21", "--no-faults",
        "--tenant-flood", "500", "--tenant-far", "10", "--tenant-hold", "pause", "--relay-max-pending", "50",
        "--drain-timeout", "240", "--json", "--state-dir", str(tmp_path / "run")])
    report = json.loads(result.output.strip().splitlines()[-1])
    assert result.exit_code == 0, result.output[-3000:]
    tenant = report["tenant"]
    assert tenant["others_drained_while_held"] is True, result.output[-3000:]
    assert tenant["accepted"] == 510 and tenant["far"] == 10
    for invariant in ("lost", "unexpected", "duplicate_results", "wrong_results", "stuck", "pause_violations",
                      "cancel_violations"):
        assert report[invariant] == 0, (invariant, report.get("samples"))
    assert report["accepted"] == 40 + 510 and report["drained"] is True
    assert report["succeeded"] >= 40 + 500  # the far ones were cancelled: owed nothing more
    assert report["latency"]["n"] == 40
