"""``sluice scenario crash-before-ack`` with real processes, at 3/10 speed."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from sluice_dev.chaos.cli import scenario

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
# 3/10 speed: the story's 1 s of B's work and 3 s between renewals are 0.3 s and 0.9 s, enough on a
# 2-core machine running the other tiers beside this one (at 1/10, a grant or a write that took
# 0.3 s under that load reordered the story).
TIME_SCALE = "0.3"


def test_the_result_is_written_again_with_a_newer_token_equal_and_attempts_is_two() -> None:
    result = CliRunner().invoke(scenario, ["crash-before-ack", "--time-scale", TIME_SCALE, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output.strip().splitlines()[-1])
    assert report["scenario"] == "crash-before-ack"
    assert report["a_killed"] is True  # the controller saw A die of SIGKILL
    steps = [(e["actor"], e["event"]) for e in report["timeline"]]
    crash = steps.index(("A", "crash"))
    assert steps[:crash] == [("A", "lease"), ("A", "run"), ("A", "write"), ("storage", "accept")]
    assert ("A", "ack") not in steps
    assert steps[crash + 1:crash + 3] == [("lock", "expire"), ("B", "lease")]
    assert steps[-3:] == [("B", "write"), ("storage", "accept"), ("B", "ack")]
    tokens = [e["token"] for e in report["timeline"] if e["event"] == "accept"]
    assert tokens == [1, 2] and report["tokens"] == [1, 2]
    stored = report["stored"]
    assert stored["status"] == "succeeded" and stored["attempts"] == 2 and stored["result_token"] == 2
    assert stored["result"] == {"sum": 12} and report["results_equal"] is True
    assert report["final_writer"] == "B" and report["stale_write_accepted"] is False
    assert report["runs"] == {"A": 1, "B": 1}
    expire = next(e for e in report["timeline"] if e["event"] == "expire")
    assert 9.0 <= expire["t"] <= 11.0
