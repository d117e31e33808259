"""The jobs table's family writes: children a job started, and the countdown of a continuation.

A family lives on five kinds of items (docs/flows.md):

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
- the continuation's item is created ``accepted`` with ``buckets_left``: the buckets of its
  countdown not full yet (``buckets`` of them). Not ``remaining``: code of before issue 30 counts a
  child on ``remaining``, so it counts nothing here, and never releases the continuation early.
  Each bucket (key ``~count~<continuation>~<b>``) holds up to ``core.families.COUNT_BUCKET``
  slots: a child's countdown adds its slot to the bucket's ``ended_slots`` and takes one off its
  ``remaining`` in one conditional write (a slot counts once), on an item under 1 KB (DynamoDB
  bills a write by the item's size: 1 WCU). The write that fills a bucket counts the bucket on the
  continuation's item, by the same kind of write. A family started before issue 30 (no
  ``buckets``) counts its children on the continuation's item's ``remaining``;
- the family's record (key ``~family~<continuation>``, never a job id) holds what is written
  once: ``waits_for`` (the children) and ``continuation_spec`` (the continuation's Kafka record,
  appended once the count is 0).
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
from sluice.core.families import COUNT_BUCKET, Abandoned, ChildState, NewChild, Slot, SlotView, bucket_sizes
from sluice.core.ids import queue_in_id
from sluice.core.models import JobState, truncate_error
from sluice.core.pools import LazyPool

MANY_MAX = 64  # slots counted in one write: its condition names each (DynamoDB's 4 KB expression limit)


@dataclass(frozen=True, slots=True)
class Family:
    """A continuation's item as the countdown sees it."""

    continuation: str
    queue: str
    parent_id: str
    waits_for: tuple[str, ...]
    remaining: int  # buckets not full yet (children not counted yet, in a family of before issue 30)
    released: bool
    spec_json: str | None  # the continuation's JobSpec as JSON; dropped once released


def _ss(values: Sequence[str]) -> dict[str, list[str]]:
    return {"SS": sorted(set(values))}


def _slot(item: dict[str, Any]) -> Slot | None:
    then = item_str(item, "continuation")
    return None if then is None else (then, item_int(item, "family_slot"))


def _left(item: dict[str, Any]) -> int | None:
    """A continuation's item's count: its buckets not full (issue 30), or, for a family of before,
    its children not counted; None: not a continuation's item."""
    for name in ("buckets_left", "remaining"):
        if name in item:
            return item_int(item, name)
    return None


def _unreleased(item: dict[str, Any] | None) -> bool:
    """Every child of the continuation (``item``) was counted, and it was not appended yet."""
    left = None if item is None else _left(item)
    return item is not None and left is not None and left <= 0 and "released_at_ms" not in item


def _ended(item: dict[str, Any] | None) -> set[int]:
    return {int(n) for n in (item or {}).get("ended_slots", {}).get("NS", [])}


def family_key(continuation: str) -> str:
    """The key of a family's record: never a job id (``~`` is in none), like the relay's checkpoints."""
    return f"~family~{continuation}"


def bucket_key(continuation: str, bucket: int) -> str:
    """The key of one bucket of a continuation's countdown: never a job id, like ``family_key``."""
    return f"~count~{continuation}~{bucket}"


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

    def __init__(self, items: ItemTable, pool: LazyPool, granted: GrantedSlots | None = None, *,
                 bucket: int = COUNT_BUCKET) -> None:
        self.items, self._pool = items, pool
        self._granted = granted if granted is not None else GrantedSlots()
        # Slots per bucket: every process counting a family must use the gateway's (the constant;
        # the job model makes it 2, so its families of 3 children fill two buckets).
        self.bucket = bucket

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
        """Create the family's record, its countdown's buckets and the continuation's item (waiting
        for ``child_ids``), in that order: the item exists only once every bucket does.

        Each is created only if absent: a re-run (or a repeat after a crash in between) finds them
        as they are, and never resets the count. A record of before issue 30 (no ``buckets``) gets
        no buckets: its children count on the continuation's item, as they did.
        """
        now = self.items.now_ms()
        sizes = bucket_sizes(len(set(child_ids)), self.bucket)
        record: dict[str, Any] = {"job_id": S(family_key(continuation)), "parent_id": S(parent_id),
                                  "waits_for": _ss(child_ids), "continuation_spec": S(spec_json),
                                  "created_at_ms": N(now), "buckets": N(len(sizes))}
        bucketed = self.items.put_new("start_family", record) \
            or "buckets" in (self.items.read(family_key(continuation)) or {})
        if bucketed:
            self._pool.map(lambda b: self.items.put_new("start_family", {
                "job_id": S(bucket_key(continuation, b)), "remaining": N(sizes[b]), "created_at_ms": N(now)}),
                list(range(len(sizes))))
        item: dict[str, Any] = {"job_id": S(continuation), "queue": S(queue), "status": S(JobState.ACCEPTED),
                                "attempts": N(0), "token": N(0), "created_at_ms": N(created_at_ms),
                                "updated_at_ms": N(now), "parent_id": S(parent_id),
                                **({"buckets": N(len(sizes)), "buckets_left": N(len(sizes))} if bucketed
                                   else {"remaining": N(len(set(child_ids)))})}
        self.items.put_new("start_family", item)  # already there: a retry of this same start
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
        """Count the child in ``slot`` as ended: 0 once every child of the continuation is counted
        (more while some are not), or None if it was counted already.

        One conditional write on the slot's bucket (``bucket_key``: under 1 KB, so 1 WCU): the slot
        joins its ``ended_slots`` and its ``remaining`` drops by one, or nothing happens. The write
        that fills the bucket counts the bucket on the continuation's item by the same kind of
        write (one per ``COUNT_BUCKET`` children); a bucket found full when its slot was counted
        already is counted there again (refused, unless a crash lost that count: this repairs it).
        No bucket: a family of before issue 30, counted on the continuation's item itself.
        """
        index = slot // self.bucket
        attrs, ok = self.items.update("count_down", self._count(bucket_key(continuation, index), slot))
        if attrs is None and not ok:  # no bucket: the continuation's item counts its children
            return self._count_on(continuation, slot, "#left")
        if attrs is not None and item_int(attrs, "remaining", 1) > 0:
            return item_int(attrs, "remaining") if ok else None
        return self._count_on(continuation, index, "#bl")  # the bucket is full

    def count_down_many(self, continuation: str, slots: Sequence[int]) -> int | None:
        """``count_down`` for several slots: one conditional write per bucket they fall in (1 WCU,
        issue 30: the worker counts a round's children together). A bucket where a slot was counted
        already, or a family of before issue 30, has each slot counted alone (``count_down``). The
        lowest count any write returned (0 releases), or None if every slot was counted already."""
        by_bucket: dict[int, set[int]] = {}
        for slot in slots:
            by_bucket.setdefault(slot // self.bucket, set()).add(slot)
        groups = [(index, ordered[i:i + MANY_MAX]) for index, group in by_bucket.items()
                  for ordered in [sorted(group)] for i in range(0, len(ordered), MANY_MAX)]
        counts = [self._count_bucket(continuation, index, group) for index, group in groups]
        known = [c for c in counts if c is not None]
        return min(known) if known else None

    def _count_bucket(self, continuation: str, index: int, unique: list[int]) -> int | None:
        if len(unique) == 1:
            return self.count_down(continuation, unique[0])
        key = bucket_key(continuation, index)
        condition = " AND ".join(["attribute_exists(#left)",
                                  *(f"NOT contains(#ended, :s{i})" for i in range(len(unique)))])
        attrs, ok = self.items.update("count_down", self.items.request(
            key, update="ADD #ended :slots SET #left = #left - :n, #up = :now", condition=condition,
            values={":slots": {"NS": [str(s) for s in unique]}, ":n": N(len(unique)),
                    ":now": N(self.items.now_ms()), **{f":s{i}": N(s) for i, s in enumerate(unique)}},
            ReturnValues="UPDATED_NEW"))
        if not ok:
            counts = [self.count_down(continuation, s) for s in unique]
            known = [c for c in counts if c is not None]
            return min(known) if known else None
        if attrs is not None and item_int(attrs, "remaining", 1) > 0:
            return item_int(attrs, "remaining")
        return self._count_on(continuation, index, "#bl")  # this write filled the bucket

    def _count(self, key: str, slot: int, left: str = "#left") -> dict[str, Any]:
        """The countdown's one conditional write on ``key``: ``slot`` counted once, off ``left``
        (``#left``: a bucket's, or a continuation's of before issue 30; ``#bl``: a continuation's
        buckets), which must exist: a bucketed continuation has no ``remaining``, a legacy one no
        ``buckets_left``, so neither kind of count lands on the other kind of item."""
        return self.items.request(
            key, update=f"ADD #ended :slots SET {left} = {left} - :one, #up = :now",
            condition=f"attribute_exists({left}) AND NOT contains(#ended, :slot)",
            values={":slots": {"NS": [str(slot)]}, ":slot": N(slot), ":one": N(1),
                    ":now": N(self.items.now_ms())},
            ReturnValues="UPDATED_NEW")

    def _count_on(self, continuation: str, slot: int, left: str) -> int | None:
        attrs, ok = self.items.update("count_down", self._count(continuation, slot, left))
        return _left(attrs) if ok and attrs is not None else None

    def unreleased(self, continuation: str) -> bool:
        return _unreleased(self.items.read(continuation))

    def slot_view(self, continuation: str, slot: int) -> SlotView:
        """Read first (the stream's countdown): the slot's bucket, and only when it is full the
        continuation's item (is the bucket counted there, is the continuation released). A full
        bucket that the continuation's item misses reads as not counted: ``count_down`` repairs it."""
        index = slot // self.bucket
        bucket = self.items.read(bucket_key(continuation, index))
        if bucket is None:  # a family of before issue 30
            item = self.items.read(continuation)
            return SlotView(counted=slot in _ended(item), unreleased=_unreleased(item))
        if slot not in _ended(bucket):
            return SlotView(counted=False, unreleased=False)
        if item_int(bucket, "remaining", 1) > 0:
            return SlotView(counted=True, unreleased=False)
        item = self.items.read(continuation)
        if item is None:
            return SlotView(counted=True, unreleased=False)
        return SlotView(counted=index in _ended(item), unreleased=_unreleased(item))

    def children_left(self, continuation: str) -> int | None:
        """Children of ``continuation`` not counted yet, summed over its buckets (one BatchGetItem);
        None for a family of before issue 30, whose continuation's ``remaining`` says it."""
        record = self.items.read(family_key(continuation))
        if record is None or "buckets" not in record:
            return None
        keys = [bucket_key(continuation, b) for b in range(item_int(record, "buckets"))]
        return sum(item_int(item, "remaining") for item in self._batch_get(keys, "#id, #left"))

    def children_state(self, job_ids: Sequence[str]) -> dict[str, ChildState]:
        """Status, continuation and slot of the children that have an item (BatchGetItem)."""
        return {str(item["job_id"]["S"]): ChildState(item_str(item, "status") or "",
                                                     item_str(item, "continuation"),
                                                     item_int(item, "family_slot"))
                for item in self._batch_get(list(dict.fromkeys(job_ids)), "#id, #st, #then, #slot")}

    def _batch_get(self, ids: Sequence[str], projection: str) -> list[dict[str, Any]]:
        """The items of ``ids`` that exist (strongly consistent BatchGetItem, 100 keys a request)."""
        names = {k: v for k, v in {"#id": "job_id", "#st": "status", "#left": "remaining",
                                   **_SLOT_NAMES}.items() if k in projection}
        out: list[dict[str, Any]] = []
        for start in range(0, len(ids), 100):
            keys: list[dict[str, Any]] = [{"job_id": S(j)} for j in ids[start:start + 100]]
            for _ in range(8):
                with translated("batch_get_item"):
                    response: Any = self.items.client.batch_get_item(RequestItems={self.items.table: {
                        "Keys": keys, "ConsistentRead": True, "ProjectionExpression": projection,
                        "ExpressionAttributeNames": names}})
                out += response.get("Responses", {}).get(self.items.table, [])
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
                      remaining=_left(item) or 0,
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
                                     condition="(attribute_exists(#left) OR attribute_exists(#bl)) "
                                               "AND attribute_not_exists(#rel)",
                                     values={":now": N(now)}, ReturnValues="ALL_NEW")
        attrs, ok = self.items.update("mark_released", request)
        if ok:  # the record and the buckets expire with the job's retention (one write per bucket)
            keys = [family_key(continuation)] + [bucket_key(continuation, b)
                                                 for b in range(item_int(attrs or {}, "buckets"))]
            self._pool.map(lambda key: self.items.update("mark_released", self.items.request(
                key, update="SET #exp = :exp", values=self.items.finish_values(now))), keys)
        return ok

    def get_jobs(self, job_ids: Sequence[str]) -> dict[str, Any]:
        """The records of ``job_ids`` that exist, by id (results loaded). One read each, in parallel."""
        def one(job_id: str) -> tuple[str, Any]:
            item = self.items.read(job_id)
            return job_id, (self.items.record(item) if item is not None else None)

        return {j: r for j, r in self._pool.map(one, list(dict.fromkeys(job_ids))) if r is not None}
