"""The jobs table's family writes: children a job started, and the countdown of a continuation.

A family lives on four kinds of items (docs/flows.md):

- the parent's item gains ``children`` (and ``continuations``): string sets, added to with
  ``ADD`` under the parent's current fencing token, so only the worker holding the parent now
  can add to them, and a re-run adding the same ids changes nothing. The same write adds them to
  ``pending_children``, which loses them once their append is confirmed (``appended``): a parent
  that ends with some still there leaves children nothing will run, which the stream's countdown
  ends ``dead`` (``abandon``; ``streams.countdown``);
- each child's item is created ``accepted`` before its Kafka record exists, naming its
  ``parent_id`` and, in a family with a continuation, that ``continuation``: whoever sees the
  child end reads it there (or has it from the grant), with the child's ``family_slot`` (its rank
  among the family's child ids, ``core.families.family_slots``);
- the continuation's item is created ``accepted`` with ``remaining`` (children not ended yet);
  each child's countdown adds its slot to ``ended_slots`` and takes one off ``remaining`` in one
  conditional write (a slot counts once). It stays small (no list of ids), since every child's
  countdown writes it and DynamoDB bills a write by the item's size;
- the family's record (key ``~family~<continuation>``, never a job id) holds what is written
  once: ``waits_for`` (the children) and ``continuation_spec`` (the continuation's Kafka record,
  appended once ``remaining`` is 0).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sluice.backends.dynamodb.codec import N, S, item_int, item_str
from sluice.backends.dynamodb.errors import translated
from sluice.backends.dynamodb.items import ItemTable
from sluice.backends.dynamodb.lifecycle import BORN
from sluice.core.errors import BackendUnavailable, JobNotFound, LeaseLost, TooManyChildren
from sluice.core.families import Abandoned, ChildState, NewChild, Slot, SlotView
from sluice.core.ids import queue_in_id
from sluice.core.models import JobState, truncate_error
from sluice.core.pools import LazyPool


@dataclass(frozen=True, slots=True)
class Family:
    """A continuation's item as the countdown sees it."""

    continuation: str
    queue: str
    parent_id: str
    waits_for: tuple[str, ...]
    remaining: int
    released: bool
    spec_json: str | None  # the continuation's JobSpec as JSON; dropped once released


def _ss(values: Sequence[str]) -> dict[str, list[str]]:
    return {"SS": sorted(set(values))}


def _slot(item: dict[str, Any]) -> Slot | None:
    then = item_str(item, "continuation")
    return None if then is None else (then, item_int(item, "family_slot"))


def _unreleased(item: dict[str, Any] | None) -> bool:
    """Every child of the continuation (``item``) was counted, and it was not appended yet."""
    return item is not None and "remaining" in item and item_int(item, "remaining") <= 0 \
        and "released_at_ms" not in item


def family_key(continuation: str) -> str:
    """The key of a family's record: never a job id (``~`` is in none), like the relay's checkpoints."""
    return f"~family~{continuation}"


GRANTS_REMEMBERED = 10_000
_SLOT_NAMES = {"#then": "continuation", "#slot": "family_slot"}


class GrantedSlots:
    """What each grant's item said about the job's continuation, until the job ends here.

    The token authority (``grants.Grants``) records it on every grant; ``Families.continuation_of``
    takes it when the job ends, so the worker that granted a job need not read its item again.
    """

    def __init__(self, limit: int = GRANTS_REMEMBERED) -> None:
        self._limit = limit
        self._slots: dict[str, Slot | None] = {}  # job id -> its slot, from its grant

    def granted(self, job_id: str, item: dict[str, Any]) -> None:
        if len(self._slots) >= self._limit:  # jobs granted here that never ended here
            self._slots.pop(next(iter(self._slots)), None)
        self._slots[job_id] = _slot(item)

    def take(self, job_id: str) -> tuple[bool, Slot | None]:
        """(known, slot): known False for a job not granted here (or taken already)."""
        try:
            return True, self._slots.pop(job_id)
        except KeyError:
            return False, None


class Families:
    """The ``core.families.FamilyStore`` adapter: the family writes and reads, on ``items``.

    ``pool`` runs the per-child writes and reads; ``granted``: the slots the grants of the same
    store recorded (``GrantedSlots``)."""

    def __init__(self, items: ItemTable, pool: LazyPool, granted: GrantedSlots | None = None) -> None:
        self.items, self._pool = items, pool
        self._granted = granted if granted is not None else GrantedSlots()

    def adopt(self, parent_id: str, token: int, child_ids: Sequence[str], continuation: str | None,
              limit: int) -> None:
        """Add children (and a continuation) to the parent's item, as its current lease holder.

        Refused with ``LeaseLost`` unless the parent is leased under ``token`` (its fencing token),
        and with ``TooManyChildren`` when the parent would have more than ``limit`` children.
        """
        for _ in range(5):  # the set may grow between the read and the write (two slots of one parent)
            item = self.items.read(parent_id)
            if item is None:
                raise LeaseLost(f"parent {parent_id} has no record: it is not leased", job_id=parent_id)
            if item_str(item, "status") != JobState.LEASED or item_int(item, "token") != token:
                raise LeaseLost(f"parent {parent_id} is not leased under token {token}: only the worker "
                                "holding it now may start its children", job_id=parent_id)
            have = set(item.get("children", {}).get("SS", []))
            total = len(have | set(child_ids))
            if total > limit:
                raise TooManyChildren(f"job {parent_id} would have {total} children; the limit is {limit} "
                                      "per job", job_id=parent_id, limit=limit)
            update = "ADD #kids :kids, #pend :kids" + (", #conts :conts" if continuation else "") \
                + " SET #up = :now"
            sized = "attribute_not_exists(#kids)" if not have else "size(#kids) = :seen"
            request = self.items.request(
                parent_id, update=update, condition=f"#st = :leased AND #tok = :tok AND {sized}",
                values={":kids": _ss(child_ids), ":conts": _ss([continuation or "-"]),
                        ":now": N(self.items.now_ms()), ":leased": S(JobState.LEASED), ":tok": N(token),
                        ":seen": N(len(have))})
            _, ok = self.items.update("adopt", request)
            if ok:
                return
        raise LeaseLost(f"parent {parent_id} kept changing while its children were recorded",
                        job_id=parent_id)

    def appended(self, parent_id: str, child_ids: Sequence[str]) -> None:
        """The children's append went through: off ``pending_children``. Unfenced (a parent that
        lost its lease meanwhile has them appended all the same), and never creates an item."""
        request = self.items.request(parent_id, update="DELETE #pend :kids SET #up = :now",
                                     condition="attribute_exists(#id)",
                                     values={":kids": _ss(child_ids), ":now": N(self.items.now_ms())})
        self.items.update("appended", request)

    def abandon(self, child_id: str, parent_id: str, reason: str, slot: Slot | None) -> Abandoned:
        """End ``dead`` a child its parent left ``accepted`` (or, given its ``slot``, with no item: the
        child writes failed), with ``reason``: one conditional write, creating a missing item with its
        parent, queue and ``slot``. A child that moved on (queued, leased, ended), or whose item names
        another parent, is left as it is."""
        now = self.items.now_ms()
        sets = [f"#st = :dead, #err = :err, #up = :now, #fin = :now, #exp = :exp, {BORN}",
                "#par = if_not_exists(#par, :par)"]
        mine = "(#st = :accepted AND #par = :par)"  # a team writes parent_id on its own queues' items only
        if slot is not None:
            sets += ["#then = if_not_exists(#then, :then)", "#slot = if_not_exists(#slot, :slot)"]
        then, rank = slot if slot is not None else ("-", 0)
        request = self.items.request(
            child_id, update="SET " + ", ".join(sets),
            condition=f"attribute_not_exists(#id) OR {mine}" if slot is not None else mine,
            values={":dead": S(JobState.DEAD), ":err": S(truncate_error(reason)), ":par": S(parent_id),
                    ":queue": S(queue_in_id(child_id)), ":created": N(now), ":zero": N(0),
                    ":then": S(then), ":slot": N(rank), ":accepted": S(JobState.ACCEPTED),
                    **self.items.finish_values(now)},
            ReturnValues="ALL_NEW")
        attrs, ok = self.items.update("abandon", request)
        return Abandoned(ended=ok, slot=_slot(attrs or {}))

    def record_children(self, parent_id: str, children: Sequence[NewChild], continuation: str | None) -> None:
        """Create each child's item (``accepted``, naming its parent and continuation), or keep it.

        Unconditional ``if_not_exists`` updates: a re-run parent leaves a child that has moved on
        (queued, running, ended) exactly as it is.
        """
        def one(child: NewChild) -> None:
            sets = ["#par = if_not_exists(#par, :par)", "#q = if_not_exists(#q, :q)",
                    "#st = if_not_exists(#st, :accepted)", "#cr = if_not_exists(#cr, :cr)",
                    "#up = if_not_exists(#up, :cr)", "#att = if_not_exists(#att, :zero)",
                    "#tok = if_not_exists(#tok, :zero)"]
            if continuation:
                sets += ["#then = if_not_exists(#then, :then)", "#slot = if_not_exists(#slot, :slot)"]
            request = self.items.request(child.job_id, update="SET " + ", ".join(sets), values={
                ":par": S(parent_id), ":q": S(child.queue), ":accepted": S(JobState.ACCEPTED),
                ":cr": N(child.created_at_ms), ":zero": N(0), ":then": S(continuation or "-"),
                ":slot": N(child.slot)})
            self.items.update("record_children", request)

        self._pool.map(one, list(children))

    def start_family(self, continuation: str, queue: str, parent_id: str, child_ids: Sequence[str],
                     spec_json: str, created_at_ms: int) -> Family:
        """Create the family's record and the continuation's item (waiting for ``child_ids``).

        Each is created only if absent, the record first: a re-run (or a repeat after a crash
        between the two) finds them as they are, and never resets the count.
        """
        now = self.items.now_ms()
        record: dict[str, Any] = {"job_id": S(family_key(continuation)), "parent_id": S(parent_id),
                                  "waits_for": _ss(child_ids), "continuation_spec": S(spec_json),
                                  "created_at_ms": N(now)}
        item: dict[str, Any] = {"job_id": S(continuation), "queue": S(queue), "status": S(JobState.ACCEPTED),
                                "attempts": N(0), "token": N(0), "created_at_ms": N(created_at_ms),
                                "updated_at_ms": N(now), "parent_id": S(parent_id),
                                "remaining": N(len(set(child_ids)))}
        for put in (record, item):
            self.items.put_new("start_family", put)  # already there: a retry of this same start
        return self.family(continuation)

    def continuation_of(self, job_id: str) -> Slot | None:
        """The continuation waiting for ``job_id`` and the job's slot in it (None: no continuation).

        Known without a read for a job this store granted (``GrantedSlots``): a child's item names its
        continuation before its Kafka record exists, so before any grant. Otherwise one read."""
        known, slot = self._granted.take(job_id)
        if known:
            return slot
        with translated("get_item"):
            response = self.items.client.get_item(TableName=self.items.table, Key={"job_id": S(job_id)},
                                                  ConsistentRead=True, ProjectionExpression="#then, #slot",
                                                  ExpressionAttributeNames=_SLOT_NAMES)
        return _slot(response.get("Item") or {})

    def count_down(self, continuation: str, slot: int) -> int | None:
        """Count the child in ``slot`` as ended: the children still running, or None if it was
        counted already.

        One conditional write on the continuation's item: the slot joins ``ended_slots`` (a number
        set, a few KB for 1,000 children) and ``remaining`` drops by one, or nothing happens. The
        list of children is not on this item, so it stays small however many count down on it
        (DynamoDB bills a write by the item's size).

        NOT BUILT (issue 30): the item passes 1 KB at about 300 counted slots, so with 1,000
        children a count averages 2.07 WCUs; counting on 128-slot bucket items, and a full
        bucket on this one, would keep it at 1 (docs/flows.md, Costs).
        """
        request = self.items.request(
            continuation, update="ADD #ended :slots SET #left = #left - :one, #up = :now",
            condition="attribute_exists(#left) AND NOT contains(#ended, :slot)",
            values={":slots": {"NS": [str(slot)]}, ":slot": N(slot), ":one": N(1),
                    ":now": N(self.items.now_ms())},
            ReturnValues="UPDATED_NEW")
        attrs, ok = self.items.update("count_down", request)
        return item_int(attrs, "remaining") if ok and attrs is not None else None

    def unreleased(self, continuation: str) -> bool:
        return _unreleased(self.items.read(continuation))

    def slot_view(self, continuation: str, slot: int) -> SlotView:
        item = self.items.read(continuation)
        ended = (item or {}).get("ended_slots", {}).get("NS", [])
        return SlotView(counted=any(int(n) == slot for n in ended), unreleased=_unreleased(item))

    def children_state(self, job_ids: Sequence[str]) -> dict[str, ChildState]:
        """Status, continuation and slot of the children that have an item (BatchGetItem)."""
        ids = list(dict.fromkeys(job_ids))
        out: dict[str, ChildState] = {}
        for start in range(0, len(ids), 100):
            keys: list[dict[str, Any]] = [{"job_id": S(j)} for j in ids[start:start + 100]]
            for _ in range(8):
                with translated("batch_get_item"):
                    response: Any = self.items.client.batch_get_item(RequestItems={self.items.table: {
                        "Keys": keys, "ConsistentRead": True,
                        "ProjectionExpression": "#id, #st, #then, #slot",
                        "ExpressionAttributeNames": {"#id": "job_id", "#st": "status", **_SLOT_NAMES}}})
                for item in response.get("Responses", {}).get(self.items.table, []):
                    out[str(item["job_id"]["S"])] = ChildState(item_str(item, "status") or "",
                                                               item_str(item, "continuation"),
                                                               item_int(item, "family_slot"))
                keys = list(response.get("UnprocessedKeys", {}).get(self.items.table, {}).get("Keys", []))
                if not keys:
                    break
            else:
                raise BackendUnavailable(f"batch_get_item left {len(keys)} keys unprocessed")
        return out

    def family(self, continuation: str) -> Family:
        record, item = self.items.read(family_key(continuation)), self.items.read(continuation)
        if record is None or item is None:
            raise JobNotFound(f"no continuation {continuation}", job_id=continuation)
        return Family(continuation=continuation, queue=item_str(item, "queue") or "",
                      parent_id=item_str(record, "parent_id") or "",
                      waits_for=tuple(sorted(record["waits_for"]["SS"])),
                      remaining=item_int(item, "remaining"),
                      released="released_at_ms" in item, spec_json=item_str(record, "continuation_spec"))

    def members(self, continuation: str) -> tuple[str, list[str]]:
        """(the parent the family's record names, the children it waits for); ("", []): no record."""
        record = self.items.read(family_key(continuation))
        if record is None:
            return "", []
        return item_str(record, "parent_id") or "", sorted(record.get("waits_for", {}).get("SS", []))

    def waits_for(self, continuation: str) -> list[str]:
        """The children a continuation runs after ([] if ``continuation`` is none)."""
        record = self.items.read(family_key(continuation))
        return sorted(record["waits_for"]["SS"]) if record is not None and "waits_for" in record else []

    def mark_released(self, continuation: str) -> bool:
        """Record that the continuation's Kafka record was appended; False if it already was.
        The family's record then expires with the job's retention."""
        now = self.items.now_ms()
        request = self.items.request(continuation, update="SET #rel = :now, #up = :now",
                                     condition="attribute_exists(#left) AND attribute_not_exists(#rel)",
                                     values={":now": N(now)})
        _, ok = self.items.update("mark_released", request)
        if ok:
            self.items.update("mark_released", self.items.request(
                family_key(continuation), update="SET #exp = :exp", values=self.items.finish_values(now)))
        return ok

    def get_jobs(self, job_ids: Sequence[str]) -> dict[str, Any]:
        """The records of ``job_ids`` that exist, by id (results loaded). One read each, in parallel."""
        def one(job_id: str) -> tuple[str, Any]:
            item = self.items.read(job_id)
            return job_id, (self.items.record(item) if item is not None else None)

        return {j: r for j, r in self._pool.map(one, list(dict.fromkeys(job_ids))) if r is not None}
