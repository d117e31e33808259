"""The operator's plan is a pure function of the seed; the operator records each action as it went."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from sluice.core.errors import AlreadyFinished, BackendUnavailable, JobNotFound
from sluice.core.models import DeadJob, QueueConfig
from sluice_dev.chaos import history
from sluice_dev.chaos.nemesis import plan as fault_plan
from sluice_dev.chaos.operator import KINDS, Action, Operator, Running, plan
from sluice_dev.fakes import FakeStore


def test_the_same_seed_gives_the_same_actions_and_another_seed_other_ones() -> None:
    a = plan(7, 60, interval_s=2.5)
    assert a == plan(7, 60, interval_s=2.5)
    assert a != plan(8, 60, interval_s=2.5)


def test_every_kind_appears_and_no_pause_overlaps_another_or_outlives_the_window() -> None:
    for seed in range(30):
        actions = plan(seed, 45, interval_s=2.5)  # the short run's plan
        assert {a.kind for a in actions} == set(KINDS), seed
        assert all(4.0 <= a.at_s <= 37.0 and 0.0 <= a.pick < 1.0 for a in actions)
        assert [a.at_s for a in actions] == sorted(a.at_s for a in actions)
        pauses = [a for a in actions if a.kind == "pause"]
        assert all(5.0 <= p.hold_s <= 10.0 and p.at_s + p.hold_s <= 37.0 for p in pauses)
        assert all(p.at_s + 60.0 <= q.at_s for p, q in itertools.pairwise(pauses))
        assert all(a.hold_s == 0.0 for a in actions if a.kind != "pause")


def test_a_long_run_pauses_about_once_a_minute_and_never_more_often() -> None:
    for seed in range(10):
        pauses = [a for a in plan(seed, 600, interval_s=2.5) if a.kind == "pause"]
        assert 4 <= len(pauses) <= 10, seed
        assert all(p.at_s + 60.0 <= q.at_s for p, q in itertools.pairwise(pauses))
        assert sum(p.hold_s for p in pauses) <= 0.15 * 600


def test_the_operator_has_a_random_stream_of_its_own_so_the_fault_plan_is_unchanged() -> None:
    # the runner draws both from one seed; neither draws from the other's stream
    faults = fault_plan(3, 45, interval_s=3.5, lease_s=2, workers=3, relays=1)
    plan(3, 45, interval_s=2.5)
    assert faults == fault_plan(3, 45, interval_s=3.5, lease_s=2, workers=3, relays=1)


class FakeApi:
    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.cancelled: list[str] = []
        # The operator reseals a redriven job's record as the gateway does; no log here, so as is.
        self.pipeline = type("Pipeline", (), {"reseal_now": staticmethod(lambda spec: spec)})()

    def cancel(self, job_id: str) -> Any:
        self.cancelled.append(job_id)
        answer = self.answers[job_id]
        if isinstance(answer, Exception):
            raise answer
        return type("Answer", (), {"status": answer})()


class FakeEngine:
    def __init__(self, dead: list[str], fail_resumes: int = 0) -> None:
        self.dead = list(dead)
        self.paused = False
        self.fail_resumes = fail_resumes
        self.calls: list[tuple[str, Any]] = []

    def dead_letters(self, queue: str, limit: int = 100) -> list[DeadJob]:
        return [DeadJob(job_id=j, queue=queue, attempts=1, last_error="poison", died_at_ms=1)
                for j in self.dead]

    def redrive(self, queue: str, job_id: str | None = None, generation: int = 0) -> int:
        self.calls.append(("redrive", job_id))
        if job_id is not None and job_id not in self.dead:
            raise JobNotFound(job_id=job_id)
        moved = [job_id] if job_id is not None else list(self.dead)
        self.dead = [j for j in self.dead if j not in moved]
        return len(moved)

    def purge_dead(self, queue: str) -> int:
        n, self.dead = len(self.dead), []
        return n

    def set_config(self, queue: str, **changes: Any) -> QueueConfig:
        if changes.get("paused") is False and self.fail_resumes:
            self.fail_resumes -= 1
            raise BackendUnavailable("redis restarting")
        self.paused = bool(changes["paused"])
        return QueueConfig(paused=self.paused)


def jobs_table() -> FakeStore:
    """The jobs table's side of a redrive (``sluice.gateway.redrive``) only: the next generation."""
    return FakeStore(only={"redrive"})


def operator_lines(path: Path) -> list[dict[str, Any]]:
    return [{k: v for k, v in e.items() if k not in ("pid", "t0", "t1")}
            for e in history.read(path) if e["op"] == "operator"]


@pytest.fixture()
def hist(tmp_path: Path) -> history.History:
    return history.History(tmp_path / "history.jsonl")


def test_cancels_record_the_api_s_answer_for_the_job_they_picked(hist: history.History) -> None:
    api = FakeApi({"j0": "cancelled", "j1": "cancel_requested", "j2": AlreadyFinished(), "j3": JobNotFound(),
                   "j4": BackendUnavailable("kafka")})
    recent = ["j0", "j1", "j2", "j3", "j4"]
    op = Operator([], api, FakeEngine([]), jobs_table(), "chaos", hist, lambda: recent)
    for i in range(5):  # the newest the likeliest: (2 pick)**2 indexes the newest-first list
        op.act(Action(0.0, "cancel", pick=((4 - i + 0.5) / 5) ** 0.5 / 2))
    op.act(Action(0.0, "cancel", pick=0.0))  # the newest
    op.act(Action(0.0, "cancel", pick=0.5))  # a running one, but none runs: the newest recent one
    assert api.cancelled == ["j0", "j1", "j2", "j3", "j4", "j4", "j4"]
    outcomes = [(e["job"], e["outcome"]) for e in operator_lines(hist.path)]
    assert outcomes[:5] == [("j0", "cancelled"), ("j1", "cancel_requested"), ("j2", "finished"),
                            ("j3", "not_found"), ("j4", "error")]
    assert {e["target"] for e in operator_lines(hist.path)} == {"recent"}
    Operator([], api, FakeEngine([]), jobs_table(), "chaos", hist, lambda: []).act(Action(0.0, "cancel", 0.5))
    assert operator_lines(hist.path)[-1] == {"op": "operator", "kind": "cancel", "outcome": "none"}


def test_a_cancel_above_one_half_takes_a_job_a_worker_holds_and_has_not_finished(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    h = history.History(path)
    running = Running(path)
    for t, job in enumerate(("a", "b", "c", "d", "e", "f")):
        h.emit("grant", job=job, outcome="ok", token=1, t0=10.0 + t, t1=10.5 + t)
    h.emit("grant", job="x", outcome="cancelled", t0=11.0, t1=11.1)  # refused: never held
    h.emit("write", job="b", outcome="written", token=1, t0=20.0, t1=20.1)
    h.emit("ack", job="c", outcome="ok", t0=20.0, t1=20.1)
    h.emit("failure", job="d", outcome="ok", status="failed", t0=20.0, t1=20.1)
    h.emit("extend", job="f", outcome="lost", t0=20.0, t1=20.1)
    assert running() == ["a", "e"]  # a's worker died holding it: it stays
    h.emit("release", job="e", outcome="ok", t0=20.0, t1=20.1)
    # a slow grant whose line comes after another worker's write: over by then
    h.emit("grant", job="b", outcome="ok", token=2, t0=19.0, t1=21.0)
    assert running() == ["a"]
    api = FakeApi({"a": "cancel_requested", "r": "cancelled"})
    op = Operator([], api, FakeEngine([]), jobs_table(), "chaos", h, lambda: ["r"], running=running)
    op.act(Action(0.0, "cancel", pick=0.75))
    op.act(Action(0.0, "cancel", pick=0.25))
    lines = [e for e in operator_lines(path) if e["kind"] == "cancel"]
    assert [(e["job"], e["outcome"], e["target"]) for e in lines] == [("a", "cancel_requested", "running"),
                                                                      ("r", "cancelled", "recent")]


def test_redrives_and_purges_name_what_was_dead_when_they_acted(hist: history.History) -> None:
    engine = FakeEngine(["d0", "d1", "d2"])
    store = jobs_table()
    op = Operator([], FakeApi({}), engine, store, "chaos", hist, list)
    op.act(Action(0.0, "redrive", pick=0.5))  # the middle one of three
    op.act(Action(0.0, "redrive_all", pick=0.0))
    op.act(Action(0.0, "redrive", pick=0.0))  # nothing dead now
    engine.dead = ["d3"]
    op.act(Action(0.0, "purge", pick=0.0))
    assert operator_lines(hist.path) == [
        {"op": "operator", "kind": "redrive", "outcome": "ok", "job": "d1", "moved": 1},
        {"op": "operator", "kind": "redrive_all", "outcome": "ok", "listed": ["d0", "d2"], "moved": 2},
        {"op": "operator", "kind": "redrive", "outcome": "none"},
        {"op": "operator", "kind": "purge", "outcome": "ok", "listed": ["d3"], "deleted": 1}]
    assert engine.dead == [] and op.done == {"redrive": 2, "redrive_all": 1, "purge": 1}
    assert store.generations == {"d1": 1, "d0": 1, "d2": 1}  # each redrive minted a generation first


def test_a_pause_is_resumed_after_its_hold_and_a_failing_resume_is_tried_until_it_lands(
        hist: history.History) -> None:
    engine = FakeEngine([], fail_resumes=2)
    op = Operator([], FakeApi({}), engine, jobs_table(), "chaos", hist, list)
    op.act(Action(0.0, "pause", pick=0.0, hold_s=60.0))
    assert engine.paused
    op.close()  # the run's end comes first: the pending resume happens now, retried past two failures
    assert not engine.paused
    lines = operator_lines(hist.path)
    assert [(e["kind"], e["outcome"]) for e in lines] == [("pause", "ok"), ("resume", "error"),
                                                         ("resume", "error"), ("resume", "ok")]
    assert all(e["queue"] == "chaos" for e in lines)
    op.close()  # nothing paused: nothing to do
    assert len(operator_lines(hist.path)) == 4
