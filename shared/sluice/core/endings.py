"""Which endings the jobs table records outside a lease, decided from an item's state. Pure.

A redrive leaves the item ``failed``/``dead`` until the redriven job's grant (so that a redrive
whose Redis half fails changes nothing visible), with ``redrive_gen`` above ``run_gen``: the
redriven attempt **waits**. An ending of that attempt before any grant is the redriven
generation's own, and is recorded as a queued job's would be: a cancel ends it ``cancelled``
at once, and a settle entry of that generation (its lease lapsed on the last attempt) ends it
``dead``. Both set ``run_gen`` to the generation they end, so the generation is used up (one
redrive, one ending), the relay counts the job done with (``JobStore.relay_view``) and the
completion stream sees a new ending (``streams.completion.model``). Issue 29, item 1.

The DynamoDB adapter writes these rules as condition expressions (``backends/dynamodb/
lifecycle.py``) and classifies a refused write with them; the fake store runs them as they are.
"""

from __future__ import annotations

from enum import StrEnum

from sluice.core.models import JobState

OPEN_STATES = frozenset({JobState.ACCEPTED, JobState.QUEUED, JobState.LEASED})
# Final states a job's own ending (a result, a cancel) makes for good: no redrive re-opens them, so
# a job Redis still holds dead-lettered with one of these is residue, not a dead job (item 8).
FOR_GOOD = frozenset({JobState.SUCCEEDED, JobState.CANCELLED})


class Settled(StrEnum):
    """What ``JobStore.settle_ended`` did with one ending Redis made."""

    WRITTEN = "written"  # the item now says dead / cancelled
    MOVED_ON = "moved_on"  # the item has a verdict of its own (failed, dead) or a newer generation
    FINAL = "final"  # the item is succeeded or cancelled: Redis's dead job, if any, is residue


def redriven_waiting(status: JobState | None, redrive_gen: int, run_gen: int) -> bool:
    """A ``failed``/``dead`` item redriven since it last ran: its redriven attempt is not granted yet."""
    return status in (JobState.FAILED, JobState.DEAD) and redrive_gen > run_gen


def settle_outcome(status: JobState | None, redrive_gen: int, run_gen: int, gen: int) -> Settled:
    """What a settle entry of redrive generation ``gen`` does to an item (``status`` None: no item).

    Fenced on the generation: nothing lands once a newer one was minted or granted. Lands on an
    open item, or on a redriven one whose waiting attempt is the entry's (``redrive_gen == gen``).
    """
    if status is None:
        return Settled.WRITTEN
    if status in FOR_GOOD:
        return Settled.FINAL
    if run_gen > gen or redrive_gen > gen:
        return Settled.MOVED_ON
    if status in OPEN_STATES or (redriven_waiting(status, redrive_gen, run_gen) and redrive_gen == gen):
        return Settled.WRITTEN
    return Settled.MOVED_ON


def cancels_at_once(status: JobState, redrive_gen: int, run_gen: int) -> bool:
    """Whether a cancel request ends the job ``cancelled`` now (nobody holds a grant for it):
    accepted, queued, or a redriven job waiting for its grant. A leased one is asked to stop."""
    return status in (JobState.ACCEPTED, JobState.QUEUED) or redriven_waiting(status, redrive_gen, run_gen)
