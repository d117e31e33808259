"""The pure rules of which endings the jobs table records outside a lease (``sluice.core.endings``,
issue 29 items 1 and 8), and the completion stream's reading of a redriven job's ending."""

from __future__ import annotations

from typing import Any

import pytest

from sluice.core.endings import Settled, cancels_at_once, redriven_waiting, settle_outcome
from sluice.core.models import JobState
from sluice.streams.completion import model

A, Q, L = JobState.ACCEPTED, JobState.QUEUED, JobState.LEASED
S, F, D, C = JobState.SUCCEEDED, JobState.FAILED, JobState.DEAD, JobState.CANCELLED


@pytest.mark.parametrize("status,redrive_gen,run_gen,waits", [
    (F, 1, 0, True), (D, 2, 1, True),  # redriven since it last ran: its redriven attempt waits
    (F, 1, 1, False), (D, 0, 0, False),  # ran under its latest redrive, or never redriven
    (Q, 1, 0, False), (L, 1, 0, False), (S, 1, 0, False), (C, 1, 0, False), (None, 1, 0, False),
])
def test_a_redriven_job_waits_while_failed_or_dead_with_an_unused_generation(
        status: JobState | None, redrive_gen: int, run_gen: int, waits: bool) -> None:
    assert redriven_waiting(status, redrive_gen, run_gen) is waits


@pytest.mark.parametrize("status,redrive_gen,run_gen,gen,outcome", [
    (None, 0, 0, 0, Settled.WRITTEN),  # no item: created
    (A, 0, 0, 0, Settled.WRITTEN), (Q, 0, 0, 0, Settled.WRITTEN), (L, 0, 0, 0, Settled.WRITTEN),
    (L, 1, 1, 1, Settled.WRITTEN),  # the redriven run's own ending
    (L, 1, 1, 0, Settled.MOVED_ON),  # an entry of the run before the redrive
    (Q, 1, 0, 0, Settled.MOVED_ON),  # a redrive minted since the relay read the entry
    (D, 1, 0, 1, Settled.WRITTEN),  # item 1 (ii): the redriven attempt lapsed before its grant
    (F, 1, 0, 1, Settled.WRITTEN),
    (D, 1, 0, 0, Settled.MOVED_ON),  # the entry of the ending the redrive re-opened
    (D, 2, 0, 1, Settled.MOVED_ON),  # redriven again since
    (D, 1, 1, 1, Settled.MOVED_ON),  # the redriven generation ran and ended: its own verdict stands
    (F, 0, 0, 0, Settled.MOVED_ON),  # a worker's own verdict
    (S, 0, 0, 0, Settled.FINAL), (C, 0, 0, 0, Settled.FINAL),  # item 8: Redis's dead job is residue
    (S, 3, 3, 0, Settled.FINAL),
])
def test_what_a_settle_entry_does_to_an_item(status: JobState | None, redrive_gen: int, run_gen: int,
                                             gen: int, outcome: Settled) -> None:
    assert settle_outcome(status, redrive_gen, run_gen, gen) is outcome


@pytest.mark.parametrize("status,redrive_gen,run_gen,at_once", [
    (A, 0, 0, True), (Q, 0, 0, True), (D, 1, 0, True), (F, 3, 2, True),  # as queued: item 1 (i)
    (L, 0, 0, False), (D, 1, 1, False), (F, 0, 0, False), (S, 1, 0, False), (C, 0, 0, False),
])
def test_a_cancel_ends_a_waiting_redriven_job_as_a_queued_one(status: JobState, redrive_gen: int,
                                                              run_gen: int, at_once: bool) -> None:
    assert cancels_at_once(status, redrive_gen, run_gen) is at_once


def image(status: str | None, run_gen: int | None = None) -> dict[str, Any] | None:
    if status is None:
        return None
    out: dict[str, Any] = {"job_id": {"S": "j"}, "status": {"S": status}}
    if run_gen is not None:
        out["run_gen"] = {"N": str(run_gen)}
    return out


@pytest.mark.parametrize("old,new,event", [
    (image("leased"), image("dead"), True), (None, image("cancelled"), True),
    (image("dead"), image("dead", 1), True),  # a redriven attempt's ending before its grant
    (image("failed", 0), image("cancelled", 2), True),
    (image("dead", 1), image("dead", 1), False),  # a redrive minting its generation; a repeat
    (image("succeeded"), image("succeeded"), False),  # a re-run's result
    (image("dead", 2), image("leased", 2), False), (image("dead"), None, False),
])
def test_a_redriven_jobs_ending_before_its_grant_is_a_final_transition(
        old: dict[str, Any] | None, new: dict[str, Any] | None, event: bool) -> None:
    assert model.is_final_transition(old, new) is event
