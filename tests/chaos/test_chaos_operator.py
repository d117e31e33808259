"""The short chaos run with the operator (``test_chaos_short``'s third run: ``--operator``), in a file
of its own so that xdist runs it beside the others."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice_dev.chaos import history
from tests.chaos.test_chaos_short import run

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.timeout(300)
def test_an_operator_cancelling_redriving_purging_and_pausing_under_faults_breaks_no_invariant(
        tmp_path: Path) -> None:
    report = run(tmp_path, "--runtime", "lambda", "--jobs", "300", "--duration", "35", "--seed", "13",
                 "--operator")
    assert report["accepted"] == 300 and report["drained"] is True
    assert sum(report["faults"].values()) >= 5
    # every action of the seed's plan was carried out, through the operator's own paths
    kinds = {key.split(":")[0] for key in report["operator"]}
    assert {"cancel", "redrive", "redrive_all", "purge", "pause", "resume"} <= kinds
    assert report["operator"].get("pause:ok") == report["operator"].get("resume:ok") == 1
    # every accepted job ended: succeeded, failed by design (poison), or cancelled by the operator
    assert report["succeeded"] + report["dead"] + report["cancelled"] + report["purged_lost"] >= 300
    assert report["dead"] >= 1  # the poison jobs the operator has to redrive and purge
    events = history.read(tmp_path / "run" / "history.jsonl")
    pause = next(e for e in events if e["op"] == "operator" and e["kind"] == "pause")
    resume = next(e for e in events if e["op"] == "operator" and e["kind"] == "resume")
    pushed = [e for e in events if e["op"] == "push" and e.get("outcome") == "ok" and e.get("pushed")]
    assert any(e["t0"] > resume["t1"] for e in pushed)  # the queue came back after the resume
    assert resume["t0"] - pause["t1"] >= 5.0
