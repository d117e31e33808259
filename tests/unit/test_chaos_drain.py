"""The chaos drain's idea of movement (``sluice_dev.chaos.runner._Progress``).

A 10,000-job run lost Redis 40 s before its faults stopped: the relay replayed its partitions and
read its parked lanes back for 80 s before its next push, while no job finished, and the drain,
which counted only new results as movement, gave up after 60 s with thousands of jobs still on
their way (the checker then called them lost)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sluice_dev.chaos import history
from sluice_dev.chaos.runner import _Progress

pytestmark = pytest.mark.timeout(10)

IDLE = {"op": "relay_run", "pushed": 0, "parked": 0, "unparked": 0, "final_dropped": 0, "replays": 0,
        "parked_released": 0, "loops": 40}


def progress(tmp_path: Path) -> tuple[_Progress, Path]:
    path = tmp_path / "history.jsonl"
    path.write_text("")
    return _Progress(history.Tail(path)), path


def add(path: Path, *events: dict[str, Any]) -> None:
    with path.open("a") as f:
        f.writelines(json.dumps(e) + "\n" for e in events)


def test_a_relay_reading_its_lanes_back_after_a_redis_loss_is_movement_though_no_job_finished(
        tmp_path: Path) -> None:
    p, path = progress(tmp_path)
    add(path, {"op": "enqueue", "outcome": "ok", "job": "j1", "queue": "chaos"})
    assert not p.catch_up()
    add(path, {**IDLE, "unparked": 2315, "parked": 323})
    assert p.catch_up()  # before: False, and the drain stopped after 60 s of this
    add(path, {**IDLE, "replays": 4, "final_dropped": 500})
    assert p.catch_up()


def test_idle_relay_and_safety_net_runs_are_not_movement_and_a_first_result_is(tmp_path: Path) -> None:
    p, path = progress(tmp_path)
    add(path, {"op": "enqueue", "outcome": "ok", "job": "j1", "queue": "chaos"}, IDLE,
        {"op": "invocation", "function": "sluice-worker"})
    assert not p.catch_up()
    add(path, {"op": "write", "job": "j1", "outcome": "written"})
    assert p.catch_up() and p.written == {"j1"}
    add(path, {"op": "write", "job": "j1", "outcome": "written"}, IDLE)
    assert not p.catch_up()  # the same job's second result: nothing new
