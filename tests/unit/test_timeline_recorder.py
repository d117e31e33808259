"""The worker's timeline recorder (issue 32 item 2): what it sends, and when (two appends for a job
that runs once; a refused write and a lost lease at once), and that a failing log changes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from sluice.core import bus as ev
from sluice.core import timeline
from sluice.core.errors import BackendUnavailable
from sluice.worker.runtime.timeline import TimelineRecorder


class Log:
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[str, str, list[dict[str, Any]]]] = []
        self.fail = fail

    def append(self, queue: str, job_id: str, entries: list[str]) -> None:
        if self.fail:
            raise BackendUnavailable("down")
        self.calls.append((queue, job_id, [timeline.decode(e) or {} for e in entries]))

    def read(self, queue: str, job_id: str) -> list[dict[str, Any]]:
        return []


def _bus(log: Log) -> ev.EventBus:
    bus = ev.EventBus()
    TimelineRecorder(lambda: log).subscribe(bus)
    return bus


def _run(bus: ev.EventBus, *, refused: bool) -> None:
    bus.emit(ev.Leased(job="j", queue="q", lease=7, attempt=1, deadline_ms=5000, at=1.0))
    bus.emit(ev.Granted(job="j", queue="q", owner="A:1", token=33, outcome="ok", t0=1.0, at=1.1))
    bus.emit(ev.Renewed(job="j", queue="q", lease=7, outcome="ok", deadline_ms=8000, t0=1.9, at=2.0))
    if refused:
        bus.emit(ev.ResultRefused(job="j", token=33, outcome="rejected", current=34, t0=2.9, at=3.0))
        bus.emit(ev.Finished(job="j", queue="q", lease=7, attempt=1, outcome="lease_lost", at=3.1))
    else:
        bus.emit(ev.ResultWritten(job="j", token=33, outcome="written", t0=2.9, at=3.0))
        bus.emit(ev.Acked(job="j", queue="q", lease=7, outcome="ok", t0=3.0, at=3.05))
        bus.emit(ev.Finished(job="j", queue="q", lease=7, attempt=1, outcome="succeeded", at=3.1))


def test_a_job_that_runs_once_takes_two_appends_after_its_grant_and_at_its_finish() -> None:
    log = Log()
    _run(_bus(log), refused=False)
    assert [[s["kind"] for s in steps] for _, _, steps in log.calls] == [
        ["lease", "grant"], ["renew", "write", "ack", "finish"]]
    lease, grant = log.calls[0][2]
    assert lease == {"at_ms": 1000, "kind": "lease", "lease": 7, "attempt": 1, "deadline_ms": 5000}
    assert grant == {"at_ms": 1100, "kind": "grant", "lease": 7, "worker": "A:1", "token": 33}
    assert {c[:2] for c in log.calls} == {("q", "j")}


def test_a_refused_write_is_sent_at_once_with_the_token_it_met() -> None:
    log = Log()
    _run(_bus(log), refused=True)
    assert [[s["kind"] for s in steps] for _, _, steps in log.calls] == [
        ["lease", "grant"], ["renew", "write"], ["finish"]]
    assert log.calls[1][2][1] == {"at_ms": 3000, "kind": "write", "lease": 7, "token": 33,
                                  "outcome": "rejected", "current": 34}
    assert all(s["lease"] == 7 for _, _, steps in log.calls for s in steps)  # every step names its lane


def test_a_lost_lease_is_sent_at_once() -> None:
    log = Log()
    bus = _bus(log)
    bus.emit(ev.Leased(job="j", queue="q", lease=7, attempt=1, at=1.0))
    bus.emit(ev.Renewed(job="j", queue="q", lease=7, outcome="lost", t0=1.9, at=2.0))
    assert [s["kind"] for s in log.calls[-1][2]] == ["lease", "lost"]


def test_a_failing_log_changes_nothing_for_the_job() -> None:
    _run(_bus(Log(fail=True)), refused=False)  # no exception reaches the worker


def test_an_unknown_step_kind_is_refused() -> None:
    with pytest.raises(ValueError):
        timeline.encode("nap", 1)
    assert len(timeline.encode("grant", 1, worker="w" * 1000)) <= timeline.MAX_ENTRY
