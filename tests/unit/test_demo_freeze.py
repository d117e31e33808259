"""``sluice demo`` fails loudly when its freeze did not show fencing (issue 13, bug 7)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from sluice.local import history, workload
from sluice.local.demo import Board, Freezer


def freezer(tmp_path: Path, events: list[dict[str, Any]]) -> Freezer:
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    job = workload.PlannedJob(index=0, queue="ledger", payload={}, job_id="J")
    return Freezer(job, Board(path=str(path)), threading.Event(), None)  # type: ignore[arg-type]


def test_no_takeover_is_a_failure_with_the_reason(tmp_path: Path) -> None:
    f = freezer(tmp_path, [])
    f.note = "worker 7 frozen, but nobody took the job over in time"
    assert f.failure(history.HistoryReport()) == ("the freeze did not show fencing: worker 7 frozen, "
                                                  "but nobody took the job over in time")


def test_a_takeover_without_a_refused_write_of_the_frozen_worker_is_a_failure(tmp_path: Path) -> None:
    events = [{"op": "grant", "job": "J", "pid": 7, "outcome": "ok", "token": 1},
              {"op": "fenced", "job": "J", "pid": 8, "outcome": "rejected", "token": 2}]  # someone else's
    f = freezer(tmp_path, events)
    f.took_over, f.pid = True, 7
    why = f.failure(history.HistoryReport())
    assert why is not None and "no write of it was refused" in why


def test_the_frozen_workers_refused_write_is_the_story(tmp_path: Path) -> None:
    events = [{"op": "grant", "job": "J", "pid": 7, "outcome": "ok", "token": 1},
              {"op": "grant", "job": "J", "pid": 8, "outcome": "ok", "token": 2},
              {"op": "fenced", "job": "J", "pid": 7, "outcome": "rejected", "token": 1}]
    f = freezer(tmp_path, events)
    f.took_over, f.pid = True, 7
    assert f.failure(history.HistoryReport()) is None
