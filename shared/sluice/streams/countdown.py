"""The durable path of a continuation's countdown: the jobs table's stream (docs/flows.md, Failure).

``core.families.Countdown`` counts a child when its ending is emitted in-process (the fast path).
A process that dies between a child's final write and that count loses the fast path, never the
stream's: the countdown function (and ``sluice dev``'s stream poller) hands each batch of stream
records to ``StreamCountdown.recount``, which runs the same count for every record that makes a
child final.

The same records say when a parent ended with children whose append was never confirmed (its
item's ``pending_children``: the append failed, and the parent then failed, used its attempts or
swallowed the error). Nothing would ever run them, and their continuation would wait for good:
``StreamCountdown`` ends each one still ``accepted`` (or with no item) ``dead``, with the reason,
and counts it, so the continuation runs, as it does whatever its children ended in (issue 29).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sluice.backends.dynamodb.codec import item_int, item_str
from sluice.core.bus import ChildAbandoned, EventBus
from sluice.core.errors import SluiceError
from sluice.core.families import Countdown, Slot, abandoned_reason, creatable_slots
from sluice.core.ids import queue_in_id
from sluice.core.ports import Metrics
from sluice.streams.completion.model import final_image

log = logging.getLogger(__name__)


def ended_child(record: Mapping[str, Any]) -> Slot | None:
    """The continuation and slot of the child a jobs-table stream record makes final, or None
    (not a final transition, or a job with no continuation). Pure: the record's new image names
    both, as the child's item has since the gateway created it."""
    new = final_image(record)
    if new is None:
        return None
    then = item_str(new, "continuation")
    return None if then is None else (then, item_int(new, "family_slot"))


@dataclass(frozen=True, slots=True)
class EndedParent:
    """A parent's final write that left children pending (``pending_children``)."""

    parent_id: str
    status: str
    pending: tuple[str, ...]
    continuations: tuple[str, ...]  # every continuation the parent started (their records say whose)


def ended_parent(record: Mapping[str, Any]) -> EndedParent | None:
    """The parent a stream record makes final with children still pending, or None. Pure."""
    new = final_image(record)
    pending = new.get("pending_children", {}).get("SS") if new is not None else None
    if new is None or not pending:
        return None
    conts = [c for c in new.get("continuations", {}).get("SS", []) if c != "-"]
    return EndedParent(item_str(new, "job_id") or "", item_str(new, "status") or "",
                       tuple(sorted(pending)), tuple(sorted(conts)))


class StreamCountdown:
    """``Countdown.count`` for each stream record that makes a child final, and the children a
    parent's final write left pending ended ``dead`` (``ChildAbandoned`` on ``bus``)."""

    def __init__(self, countdown: Countdown, bus: EventBus | None = None) -> None:
        self.countdown = countdown
        self.bus = bus if bus is not None else EventBus()

    def abandon(self, parent: EndedParent) -> bool:
        """End each pending child still ``accepted`` (or with no item) ``dead``, and count it: False
        if a count or release failed (the record is retried; what was done stays done)."""
        store = self.countdown.store
        # The slot a child with no item yet is created with (only a child its own family waits for).
        families = {then: store.members(then) for then in parent.continuations}
        slots = creatable_slots(parent.parent_id, families)
        reason = abandoned_reason(parent.parent_id, parent.status)
        ok = True
        for child in parent.pending:
            # NOT HANDLED: a child of no family whose item was never written has no slot here, and
            # is not created (nothing vouches for it; nothing waits for it): docs/flows.md, Failure.
            done = store.abandon(child, parent.parent_id, reason, slots.get(child))
            if not done.ended:  # it moved on (queued, running, ended), or a retry ended it already:
                continue  # its own final write's record counts it
            log.warning("child %s ended dead: %s", child, reason,
                        extra={"job_id": child, "parent_id": parent.parent_id})
            self.bus.emit(ChildAbandoned(job=child, queue=queue_in_id(child), parent=parent.parent_id,
                                         parent_status=parent.status,
                                         continuation=done.slot[0] if done.slot else None))
            if done.slot is not None:
                ok = self.countdown.count(*done.slot) and ok
        return ok

    def recount(self, records: Iterable[Mapping[str, Any]]) -> list[str]:
        """The same count as ``Countdown.on_ended``, read first (``Countdown.recount``): a child the
        fast path counted already costs one read and no write, and a repeated record counts
        nothing. Returns
        the sequence numbers to retry (``completion.publish.batch_failures``): a record whose count
        or release failed is delivered again, until the continuation is released.
        """
        failed: list[str] = []
        for record in records:
            found, parent = ended_child(record), ended_parent(record)
            if found is None and parent is None:
                continue
            try:
                ok = self.countdown.recount(*found) if found is not None else True
                ok = (self.abandon(parent) if parent is not None else True) and ok
            except SluiceError as exc:
                log.warning("countdown of %s failed: %s", found or parent, exc)
                ok = False
            if not ok:
                failed.append(str((record.get("dynamodb") or {}).get("SequenceNumber", "")))
        return failed


class AbandonedMetrics:
    """Observes ``ChildAbandoned``: the ``ChildrenAbandoned`` count (dimension ``queue``), a sign that
    appends failed and their parents ended without them (docs/flows.md, Failure)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def __call__(self, event: ChildAbandoned) -> None:
        self.metrics.count("ChildrenAbandoned", queue=event.queue)
