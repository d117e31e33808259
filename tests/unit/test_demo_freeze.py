"""``sluice demo`` fails loudly when its freeze did not show fencing (issue 13, bug 7)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from sluice_dev.local import history, workload
from sluice_dev.local.demo import Board, Freezer


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


def test_the_frozen_workers_refused_call_and_refused_write_are_the_story(tmp_path: Path) -> None:
    events = [{"op": "grant", "job": "J", "pid": 7, "outcome": "ok", "token": 1},
              {"op": "grant", "job": "J", "pid": 8, "outcome": "ok", "token": 2},
              {"op": "http", "job": "J", "pid": 8, "outcome": "ok", "token": 2, "status": 200},
              {"op": "http", "job": "J", "pid": 7, "outcome": "rejected", "token": 1, "current": 2},
              {"op": "fenced", "job": "J", "pid": 7, "outcome": "rejected", "token": 1}]
    f = freezer(tmp_path, events)
    f.took_over, f.pid = True, 7
    assert f.failure(history.HistoryReport()) is None


def test_a_refused_write_without_a_refused_call_to_the_service_is_a_failure(tmp_path: Path) -> None:
    """Issue 31, item 7: the frozen worker's late HTTP call is refused by the service's fence, as its
    write is; a run where the service let it through (or it never called) did not show it."""
    events = [{"op": "grant", "job": "J", "pid": 7, "outcome": "ok", "token": 1},
              {"op": "grant", "job": "J", "pid": 8, "outcome": "ok", "token": 2},
              {"op": "http", "job": "J", "pid": 7, "outcome": "ok", "token": 1, "status": 200},
              {"op": "fenced", "job": "J", "pid": 7, "outcome": "rejected", "token": 1}]
    f = freezer(tmp_path, events)
    f.took_over, f.pid = True, 7
    why = f.failure(history.HistoryReport())
    assert why is not None and "did not refuse its late call (['ok'])" in why


def test_the_history_counts_calls_a_services_fence_refused_once_per_lost_attempt() -> None:
    a = history.Analyser()
    a.feed([{"op": "grant", "job": "J", "pid": 7, "outcome": "ok", "token": 1, "t0": 1.0, "t1": 1.1},
            {"op": "http", "job": "J", "pid": 7, "outcome": "rejected", "token": 1, "current": 2},
            {"op": "fenced", "job": "J", "pid": 7, "outcome": "rejected", "token": 1}])
    r = a.finish()
    assert (r.fenced_calls_rejected, r.fenced_writes_rejected, r.leases_lost) == (1, 1, 1)


def test_the_plain_progress_line_counts_the_plans_jobs_and_the_families_apart() -> None:
    """Without a terminal, `make demo` printed "enqueued 2000  succeeded 2021": the succeeded count
    took in the fanout children and continuations, which were never among the 2000 enqueued."""
    from types import SimpleNamespace

    from sluice_dev.local.demo import progress_line
    from sluice_dev.local.history import HistoryReport, JobFacts

    report = HistoryReport()
    ok = [{"token": 1}]
    report.jobs = {"a": JobFacts(writes=ok), "b": JobFacts(dead=True), "child": JobFacts(writes=ok),
                   "then": JobFacts(writes=ok)}
    plan = [SimpleNamespace(job_id=None), SimpleNamespace(job_id=None)]
    assert progress_line(1.0, 0, HistoryReport(), plan) == "    1.0s  enqueued 0  succeeded 0  dead 0"
    plan[0].job_id, plan[1].job_id = "a", "b"  # ids come as the jobs are sent: read them each time
    line = progress_line(12.34, 2, report, plan)
    assert line == "   12.3s  enqueued 2  succeeded 1  dead 1  family jobs ended 2"


def test_without_a_terminal_the_summary_starts_on_its_own_line() -> None:
    """rich's Live leaves its last frame without a newline when the output is not a terminal:
    `make demo | tee` printed "workers busy: 3sluice demo: summary"."""
    import io

    from rich.console import Console
    from rich.text import Text

    from sluice_dev.local.demo import live_board

    buf = io.StringIO()
    out = Console(file=buf, force_terminal=False, width=80)
    with live_board(out, Text("progress 1"), interactive=False) as live:
        live.update(Text("workers busy: 3"))
    out.print("sluice demo: summary")
    assert buf.getvalue().splitlines()[-2:] == ["workers busy: 3", "sluice demo: summary"], buf.getvalue()
