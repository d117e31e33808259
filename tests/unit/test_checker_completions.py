"""The chaos checker's completion-event rule: one distinct event per ending, none for a job that
never ended, duplicates (same id) allowed and counted."""

from __future__ import annotations

from typing import Any

from sluice_dev.chaos.checker import StoreItem, check
from tests.unit.test_checker import done, enqueue, run

COLLECTED = {"op": "completions", "received": 0}


def completion(job: str, state: str, gen: int = 0) -> dict[str, Any]:
    return {"op": "completion", "job": job, "state": state, "gen": gen, "event_id": f"{job}:{state}:{gen}"}


def test_one_event_per_final_job_with_duplicates_of_its_id_is_clean() -> None:
    events = [enqueue("a"), *run("a", 1, 2.0), COLLECTED,
              completion("a", "succeeded"), completion("a", "succeeded")]
    report = check(events, {"a": done(), "b": StoreItem("leased")}, {"b"})
    assert report.ok and report.completions == 1 and report.completions_duplicated == 1
    assert report.completion_violations == 0


def test_a_final_job_without_its_event_is_a_violation() -> None:
    events = [enqueue("a"), *run("a", 1, 2.0), COLLECTED]
    report = check(events, {"a": done()}, set())
    assert report.completion_violations == 1 and not report.ok
    assert report.samples["completion_violations"] == ["a"]


def test_an_event_for_a_job_that_never_ended_is_a_violation() -> None:
    events = [enqueue("b"), COLLECTED, completion("b", "succeeded")]
    report = check(events, {"b": StoreItem("leased")}, {"b"})
    assert report.completion_violations == 1


def test_two_states_for_one_ending_is_a_violation_and_a_redrive_makes_a_new_ending() -> None:
    events = [enqueue("a"), COLLECTED, completion("a", "dead"), completion("a", "cancelled")]
    assert check(events, {"a": StoreItem("dead")}, set()).completion_violations == 1
    # dead, redriven, dead again: two events, one per generation; the latest names the item
    again = StoreItem("dead", redrive_gen=1, run_gen=1)
    redriven = [enqueue("a"), COLLECTED, completion("a", "dead", 0), completion("a", "dead", 1)]
    assert check(redriven, {"a": again}, set()).completion_violations == 0
    # ... but the second ending's event missing is a violation, though an older one names "dead"
    missing = [enqueue("a"), COLLECTED, completion("a", "dead", 0)]
    assert check(missing, {"a": again}, set()).completion_violations == 1
    # redriven and not yet ended again: its earlier ending's event is fine
    waiting = [enqueue("a"), COLLECTED, completion("a", "dead", 0)]
    queued = StoreItem("queued", redrive_gen=1, run_gen=1)
    assert check(waiting, {"a": queued}, set()).completion_violations == 0


def test_a_run_that_did_not_collect_events_is_not_checked_for_them() -> None:
    report = check([enqueue("a"), *run("a", 1, 2.0)], {"a": done()}, set())
    assert report.completions == -1 and report.completion_violations == 0 and report.ok
