"""Jobs that start jobs: children, continuations, and the countdown between them (docs/flows.md).

A handler calls ``ctx.enqueue(queue, payload, key=...)`` or ``ctx.enqueue_many([...], then=...)``.
The worker holds neither the job id key nor a producer on the jobs topic (team code runs there),
so it asks the gateway function, over a direct Lambda invoke, with the parent's id and its
fencing token (``FamilyRequest``). The gateway's use case (``api.Api.enqueue_children``) checks
that the parent is leased under that token, derives each child's id from the parent's id and the
child's key (``ids.derive``), runs every check a caller's enqueue runs, and appends the children.

A continuation waits in the jobs table (``store/families.py``) until each of its children has
ended. ``Countdown`` subscribes to ``events.JobEnded`` wherever jobs end (the worker, the relay's
settle, a cancel), counts each child once, and when the count reaches 0 asks the gateway to
release the continuation (``api.Api.release_continuation``), which appends its Kafka record.
That is the fast path; the jobs table's stream is the durable one: ``streams.countdown`` runs
the same step for each stream record that makes a child final (the countdown function, and
``sluice dev``'s stream poller), so a process that dies between a child's final write and its
countdown leaves the family counted all the same (docs/flows.md, Failure).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol

from pydantic import ConfigDict, Field

from sluice.core.base import Model
from sluice.core.bus import EventBus, JobEnded, ResultWritten
from sluice.core.errors import SluiceError
from sluice.core.ids import ulid_time_ms
from sluice.core.models import JOB_ID_PATTERN, QUEUE_NAME_PATTERN
from sluice.core.wire import INTERNAL, EnqueueRequest

log = logging.getLogger("sluice.core.families")

RELEASE_TRIES: Final = 3
MAX_CHILDREN: Final = 1_000  # children one job may start, continuations' children included
MAX_REQUEST_BYTES: Final = 6_000_000  # a synchronous Lambda invoke's payload limit (6 MB), less room
# Slots per bucket of a continuation's countdown (issue 30): a bucket's item holds at most this many
# counted slots (3 to 4 bytes each), so it stays under 1 KB and each child's count is 1 WCU, however
# many children the family has (docs/flows.md, "The bucketed countdown").
COUNT_BUCKET: Final = 128


class ChildRequest(EnqueueRequest):
    """One child: the queue, its key (unique among its parent's children) and an enqueue's fields."""

    queue: str = Field(pattern=QUEUE_NAME_PATTERN)
    key: str = Field(description="1..64 printable ASCII characters, unique among the parent's children.")


class ThenRequest(EnqueueRequest):
    """The continuation: runs once after every child of the same request has ended."""

    queue: str = Field(pattern=QUEUE_NAME_PATTERN)
    key: str = "then"


class FamilyRequest(Model):
    """The worker's request to the gateway function: start ``jobs`` (and ``then``) as children."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    sluice_internal: Literal["enqueue_children"] = "enqueue_children"
    parent_id: str = Field(pattern=JOB_ID_PATTERN)
    token: int = Field(ge=1)
    jobs: list[ChildRequest] = Field(default_factory=list)
    then: ThenRequest | None = None
    # The parent's handler span (``JobContext.traceparent``): the children join its trace. Checked by
    # the gateway (``sluice.core.traces.carried``), which ignores a malformed one: never refused. Left
    # out when None, so an untraced request is one an internal function of before traces takes.
    traceparent: str | None = Field(default=None, exclude_if=lambda v: v is None)


class ReleaseRequest(Model):
    """Append a continuation whose children have all ended (idempotent)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    sluice_internal: Literal["release"] = "release"
    continuation: str = Field(pattern=JOB_ID_PATTERN)


class FamilyAccepted(Model):
    job_ids: list[str]
    continuation: str | None = None


Slot = tuple[str, int]  # a child's continuation, and its place among that continuation's children


@dataclass(frozen=True, slots=True)
class NewChild:
    """A child's item as the gateway creates it (``store.families.Families.record_children``)."""

    job_id: str
    queue: str
    created_at_ms: int
    slot: int = 0  # its rank among its family's children (``family_slots``: the countdown's idempotency key)


def family_slots(child_ids: Sequence[str]) -> dict[str, int]:
    """Each child's slot: its rank in the sorted set of the family's child ids.

    A function of the set alone, never of the request's order: a re-run listing the same children
    in another order (after the first run's child writes half-failed, which keeps the slots those
    writes made) gives every child the slot it had, so no two children share one and the last
    ending takes ``remaining`` to 0 (issue 29). The set is fixed once the family's record exists,
    and the gateway writes that record before any child's item."""
    return {child: rank for rank, child in enumerate(sorted(set(child_ids)))}


def bucket_sizes(children: int, size: int = COUNT_BUCKET) -> list[int]:
    """The slots in each bucket of a family of ``children``: slot ``s`` counts on bucket ``s // size``."""
    return [min(size, children - start) for start in range(0, children, size)]


def creatable_slots(parent_id: str, families: Mapping[str, tuple[str, Sequence[str]]]) -> dict[str, Slot]:
    """The slots of a parent's children that may be created ``dead`` when they have no item (their
    item's write failed too), from ``families``: continuation -> (the parent its record names, the
    children it waits for).

    The pending list is on the parent's item, which its team's code may write, so only what a team
    cannot forge for another team's jobs counts: a family whose record names this parent, and a
    child whose id keeps the parent's time (``ids.derive``). A child with an item is ended only if
    its item names this parent (``Families.abandon``)."""
    born = ulid_time_ms(parent_id.split(".", 1)[0])
    out: dict[str, Slot] = {}
    for then, (owner, children) in sorted(families.items()):
        if owner != parent_id:
            continue
        for child, rank in family_slots(children).items():
            if born is not None and ulid_time_ms(child.split(".", 1)[0]) == born:
                out.setdefault(child, (then, rank))
    return out


def abandoned_reason(parent_id: str, parent_status: str) -> str:
    """The ``last_error`` of a child ended ``dead`` because its parent ended (``parent_status``)
    before the append of its Kafka record was confirmed: it was never appended, or not that anyone
    knows, and nothing would ever run it (docs/flows.md, Failure)."""
    return (f"never appended: its parent {parent_id} ended {parent_status} before the append of its "
            "children was confirmed, and nothing would run it; enqueue the work again (or re-run the "
            "parent under a new id) if it must be done")


@dataclass(frozen=True, slots=True)
class ChildState:
    """What the gateway reads of a child's item before starting it (again)."""

    status: str
    continuation: str | None
    slot: int


class FamilyGateway(Protocol):
    """The gateway's family entry as the worker and the relay reach it (``runtime.children``)."""

    def enqueue_children(self, request: FamilyRequest) -> FamilyAccepted: ...

    def release(self, continuation: str) -> None: ...


class FamilyReads(Protocol):
    """What the countdown needs of the jobs table (``store.families.Families``)."""

    def continuation_of(self, job_id: str) -> Slot | None: ...

    def count_down(self, continuation: str, slot: int) -> int | None: ...

    def count_down_many(self, continuation: str, slots: Sequence[int]) -> int | None:
        """``count_down`` for several slots at once (one write per bucket they fall in): the lowest
        count left (0: every child counted), or None if every slot was counted already."""
        ...

    def unreleased(self, continuation: str) -> bool:
        """True if every child was counted and the continuation was not appended yet."""
        ...

    def slot_view(self, continuation: str, slot: int) -> SlotView:
        """Whether ``slot`` is counted on ``continuation``'s item, and whether it waits for its
        release: one strongly consistent read, no write."""
        ...

    def members(self, continuation: str) -> tuple[str, list[str]]:
        """(the parent its family's record names, the children it waits for); ("", []): no record."""
        ...

    def abandon(self, child_id: str, parent_id: str, reason: str, slot: Slot | None) -> Abandoned:
        """End ``dead`` (with ``reason``) a child of ``parent_id`` still ``accepted``, or, given its
        ``slot`` (``creatable_slots``), one with no item yet, then created naming its parent and
        ``slot``; a child that moved on, or whose item names another parent, is left."""
        ...


@dataclass(frozen=True, slots=True)
class SlotView:
    """A continuation's item as the stream's countdown reads it before writing (``Countdown.recount``)."""

    counted: bool  # the slot is in ``ended_slots``: its count was made
    unreleased: bool  # every child was counted and the continuation was not appended yet


@dataclass(frozen=True, slots=True)
class Abandoned:
    """What ``FamilyReads.abandon`` did: ``ended`` the child now (False: it had moved on, or was
    ended so already), and the slot its item names (None: no continuation waits for it)."""

    ended: bool
    slot: Slot | None = None


class Countdown:
    """Counts a child's ending on its continuation, and releases the continuation at 0.

    Subscribed to ``JobEnded``; every emitter (worker, settle, cancel) gets it. The count is
    idempotent per child (``count_down``), so a job that ends twice (a redrive, two emitters)
    counts once, and a continuation is released when its last child is counted, and only then.
    The release is tried ``RELEASE_TRIES`` times; a continuation left at 0 unreleased is released
    again by the stream's ``recount`` retrying the record, by any later ending of one of its
    children (a redrive, a repeated event) and by a re-run of its parent (docs/flows.md, Failure).
    A process that dies between a child's final write and ``on_ended`` is covered by
    ``streams.countdown.StreamCountdown`` on that write's stream record: the fast path may be
    lost, the stream's never is. It never runs twice: ``release_continuation`` appends it only
    until ``mark_released``, and its id is fixed.
    """

    def __init__(self, store: FamilyReads, release: Callable[[str], object], *,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.store, self.release, self._sleep = store, release, sleep

    def subscribe(self, bus: EventBus) -> Callable[[], None]:
        ended = bus.subscribe(self.on_ended, JobEnded)
        rerun = bus.subscribe(self.on_rewritten, ResultWritten)

        def unsubscribe() -> None:
            ended()
            rerun()

        return unsubscribe

    def on_rewritten(self, event: ResultWritten) -> None:
        """A re-run found its result already written (``already_written``: no ``JobEnded``): its
        first run may have died between its write and its countdown, so count it (once, as ever)."""
        if event.outcome == "already_written":
            self.on_ended(JobEnded(job=event.job, queue="", state="succeeded", source="worker"))

    def on_ended(self, event: JobEnded) -> None:
        found = self.store.continuation_of(event.job)
        if found is not None:
            self.count(*found)

    def recount(self, continuation: str, slot: int) -> bool:
        """``count`` for the durable path (``streams.countdown``), which nearly always comes after
        the fast path counted the child: it reads the continuation's item first and writes only
        for a slot not counted yet. DynamoDB bills a refused conditional write by the item's size
        (a few KB once many slots are counted), a strongly consistent read 1 RRU per 4 KB at a fifth
        of the price; a slot counted between the read and the write is still counted once
        (``count_down``'s condition). False if a release failed."""
        view = self.store.slot_view(continuation, slot)
        if not view.counted:
            return self.count(continuation, slot)
        if view.unreleased:
            log.info("every child of %s has ended: releasing it", continuation)
            return self._release(continuation)
        return True

    def count(self, continuation: str, slot: int) -> bool:
        """Count the child in ``slot``, releasing the continuation at 0: False if that release
        failed (the stream's path retries the record then), True otherwise."""
        remaining = self.store.count_down(continuation, slot)
        if remaining == 0 or (remaining is None and self.store.unreleased(continuation)):
            log.info("every child of %s has ended: releasing it", continuation)
            return self._release(continuation)
        return True

    def _release(self, continuation: str) -> bool:
        for attempt in range(RELEASE_TRIES):
            try:
                self.release(continuation)
                return True
            except SluiceError as exc:
                if attempt == RELEASE_TRIES - 1:
                    log.error("could not release continuation %s: %s; the stream's countdown retries "
                              "it, and a later ending of one of its children, or a re-run of its "
                              "parent, releases it", continuation, exc)
                    return False
                self._sleep(0.2 * 2 ** attempt)
        return False


def family_event(event: Any) -> FamilyRequest | ReleaseRequest | None:
    """The gateway's direct-invoke event, or None for anything else (an API Gateway proxy event)."""
    if not isinstance(event, dict) or INTERNAL not in event or "httpMethod" in event:
        return None
    if event[INTERNAL] == "release":
        return ReleaseRequest.model_validate(event)
    return FamilyRequest.model_validate(event)


def keys_unique(jobs: Sequence[ChildRequest]) -> str | None:
    seen: set[str] = set()
    for job in jobs:
        if job.key in seen:
            return job.key
        seen.add(job.key)
    return None


class FamilyStore(FamilyReads, Protocol):
    """The jobs table's family writes (``store.families.Families``), as the gateway's use case uses them."""

    def adopt(self, parent_id: str, token: int, child_ids: Sequence[str], continuation: str | None,
              limit: int) -> None: ...

    def record_children(self, parent_id: str, children: Sequence[NewChild],
                        continuation: str | None) -> None: ...

    def start_family(self, continuation: str, queue: str, parent_id: str, child_ids: Sequence[str],
                     spec_json: str, created_at_ms: int) -> Any: ...

    def family(self, continuation: str) -> Any: ...

    def waits_for(self, continuation: str) -> list[str]: ...

    def children_left(self, continuation: str) -> int | None:
        """Children not counted yet, from the countdown's buckets; None: a family of before issue 30,
        whose continuation's ``remaining`` counts children, not buckets."""
        ...

    def mark_released(self, continuation: str) -> bool: ...

    def appended(self, parent_id: str, child_ids: Sequence[str]) -> None:
        """The children's append went through: the parent's ending need not reconcile them."""
        ...

    def children_state(self, job_ids: Sequence[str]) -> dict[str, ChildState]: ...

    def get_jobs(self, job_ids: Sequence[str]) -> dict[str, Any]: ...
