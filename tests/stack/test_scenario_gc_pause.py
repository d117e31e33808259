"""``sluice scenario gc-pause``: real worker processes, real Redis and DynamoDB (moto), at 3/10 speed.

Each run starts its own redis-server and moto server (the command does), so these
tests need no fixtures; each takes a few seconds.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from sluice_dev.chaos.cli import scenario

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
# 3/10 speed: the story's 1 s of B's work and 3 s between renewals are 0.3 s and 0.9 s, enough on a
# 2-core machine running the other tiers beside this one (at 1/10, a grant or a write that took
# 0.3 s under that load reordered the story).
TIME_SCALE = "0.3"


def run(*args: str) -> tuple[dict[str, Any], str]:
    result = CliRunner().invoke(scenario, ["gc-pause", "--time-scale", TIME_SCALE, "--json", *args])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    return json.loads(lines[-1]), result.output


def events(report: dict[str, Any]) -> list[tuple[str, str]]:
    return [(e["actor"], e["event"]) for e in report["timeline"]]


def at(report: dict[str, Any], actor: str, event: str) -> dict[str, Any]:
    found = [e for e in report["timeline"] if (e["actor"], e["event"]) == (actor, event)]
    assert found, f"no {actor} {event} in {events(report)}"
    return found[0]


def test_with_fencing_a_late_write_is_rejected_and_b_result_stands() -> None:
    report, text = run()
    assert report["scenario"] == "gc-pause" and report["fencing"] is True
    assert report["final_writer"] == "B" and report["stale_write_accepted"] is False
    assert report["runs"] == {"A": 1, "B": 1}
    a_token, b_token = at(report, "A", "lease")["token"], at(report, "B", "lease")["token"]
    assert b_token == a_token + 1
    rejected = at(report, "storage", "reject")
    assert (rejected["writer"], rejected["token"], rejected["current"]) == ("A", a_token, b_token)
    assert report["stored"]["result"]["by"] == "B" and report["stored"]["result_token"] == b_token
    # the story's order and (story) times, measured from what the processes did
    assert 1.5 <= at(report, "A", "stall")["t"] <= 3.0
    expire = at(report, "lock", "expire")
    assert 9.0 <= expire["t"] <= 11.0 and expire["holder"] == "A"
    assert expire["t"] <= at(report, "B", "lease")["t"] < at(report, "storage", "accept")["t"]
    assert at(report, "storage", "accept")["t"] < at(report, "A", "resume")["t"]
    assert 13.5 <= at(report, "A", "resume")["t"] <= 16.0
    assert "still believes it holds the lease" in text and "rejects A's write" in text


def test_without_fencing_a_overwrites_b_and_the_command_says_it_is_the_bug() -> None:
    report, text = run("--no-fencing")
    assert report["fencing"] is False
    assert report["final_writer"] == "A" and report["stale_write_accepted"] is True
    assert report["runs"] == {"A": 1, "B": 1}
    accepts = [e for e in report["timeline"] if e["event"] == "accept"]
    assert [(e["writer"], e["stale"]) for e in accepts] == [("B", False), ("A", True)]
    assert report["stored"]["result"]["by"] == "A"
    assert report["stored"]["result_token"] < report["stored"]["token"]
    assert "THE BUG" in text and "BUG: two workers acted as the owner" in text


def test_a_freeze_shorter_than_the_lease_minus_a_renewal_keeps_the_lease_and_b_never_runs() -> None:
    report, _ = run("--freeze-for", "5")
    assert report["final_writer"] == "A" and report["stale_write_accepted"] is False
    assert report["runs"] == {"A": 1, "B": 0}
    assert ("lock", "expire") not in events(report)
    assert ("B", "lease") not in events(report)
    assert at(report, "A", "renew")["t"] > at(report, "A", "resume")["t"]  # renewed in time on waking


def test_bad_options_are_one_clear_line_and_a_non_zero_exit() -> None:
    result = CliRunner().invoke(scenario, ["gc-pause", "--renew-every", "20"])
    assert result.exit_code == 2
    assert "shorter than --lease" in result.output


def test_html_draws_the_run_from_the_timeline_the_workers_recorded_in_redis(tmp_path: Any) -> None:
    """Issue 32 item 3: ``--html FILE``: the job's timeline as the two workers recorded it in the
    scenario's Redis (timeline.lua), drawn: A's lease lost, B's takeover, and without fencing A's
    stale write accepted over B's."""
    out = tmp_path / "gc.html"
    report, _ = run("--no-fencing", "--html", str(out))
    steps = report["steps"]
    grants = [s for s in steps if s["kind"] == "grant"]
    assert [s["worker"].split(":")[0] for s in grants] == ["A", "B"]
    assert [s["token"] for s in grants] == [report["stored"]["result_token"], report["stored"]["token"]]
    writes = [(s["token"], s["outcome"]) for s in steps if s["kind"] == "write"]
    assert writes == [(grants[1]["token"], "written"), (grants[0]["token"], "written")]
    html = out.read_text()
    assert html.count('data-kind="takeover"') == 2  # in the drawing and in the table
    assert html.count('data-kind="stale-accepted"') == 4  # A's lane, storage's lane, 2 rows of the table
    assert 'data-kind="expired"' in html and "BUG: two workers acted as the owner" in html
    assert "<script" not in html
