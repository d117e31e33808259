"""The jobs table's family writes: children a job started, and the countdown of a continuation.

A family lives on three kinds of items (docs/flows.md):

- the parent's item gains ``children`` (and ``continuations``): a string set, added to with
  ``ADD`` under the parent's current fencing token, so only the worker holding the parent now
  can add to it, and a re-run adding the same ids changes nothing;
- each child's item is created ``accepted`` before its Kafka record exists, naming its
  ``parent_id`` and, in a family with a continuation, that ``continuation``: whoever sees the
  child end reads it there;
- the continuation's item is created ``accepted`` with ``waits_for`` (the children),
  ``remaining`` (how many have not ended) and ``continuation_spec`` (its Kafka record, appended
  only once ``remaining`` is 0). ``count_down`` adds the child to ``ended_children`` and takes one
  off ``remaining`` in one conditional write, so a child that ends twice counts once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from sluice.errors import JobNotFound, LeaseLost, TooManyChildren
from sluice.flows import NewChild
from sluice.models import JobState
from sluice.pools import LazyPool
from sluice.store.codec import N, S, item_int, item_str
from sluice.store.errors import is_conditional_failure, translate, translated
from sluice.store.items import ItemTable


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


GRANTS_REMEMBERED = 10_000


class Families(ItemTable):
    _pool: LazyPool
    _continuations: dict[str, str | None]

    def adopt(self, parent_id: str, token: int, child_ids: Sequence[str], continuation: str | None,
              limit: int) -> None:
        """Add children (and a continuation) to the parent's item, as its current lease holder.

        Refused with ``LeaseLost`` unless the parent is leased under ``token`` (its fencing token),
        and with ``TooManyChildren`` when the parent would have more than ``limit`` children.
        """
        for _ in range(5):  # the set may grow between the read and the write (two slots of one parent)
            item = self._read(parent_id)
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
            update = "ADD #kids :kids" + (", #conts :conts" if continuation else "") + " SET #up = :now"
            sized = "attribute_not_exists(#kids)" if not have else "size(#kids) = :seen"
            request = self._request(
                parent_id, update=update, condition=f"#st = :leased AND #tok = :tok AND {sized}",
                values={":kids": _ss(child_ids), ":conts": _ss([continuation or "-"]),
                        ":now": N(self._now_ms()), ":leased": S(JobState.LEASED), ":tok": N(token),
                        ":seen": N(len(have))})
            _, ok = self._update("adopt", request)
            if ok:
                return
        raise LeaseLost(f"parent {parent_id} kept changing while its children were recorded",
                        job_id=parent_id)

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
                sets.append("#then = if_not_exists(#then, :then)")
            request = self._request(child.job_id, update="SET " + ", ".join(sets), values={
                ":par": S(parent_id), ":q": S(child.queue), ":accepted": S(JobState.ACCEPTED),
                ":cr": N(child.created_at_ms), ":zero": N(0), ":then": S(continuation or "-")})
            self._update("record_children", request)

        self._pool.map(one, list(children))

    def start_family(self, continuation: str, queue: str, parent_id: str, child_ids: Sequence[str],
                     spec_json: str, created_at_ms: int) -> Family:
        """Create the continuation's item, waiting for ``child_ids``; an existing one is returned as is."""
        now = self._now_ms()
        item: dict[str, Any] = {"job_id": S(continuation), "queue": S(queue), "status": S(JobState.ACCEPTED),
                "attempts": N(0), "token": N(0), "created_at_ms": N(created_at_ms), "updated_at_ms": N(now),
                "parent_id": S(parent_id), "waits_for": _ss(child_ids), "remaining": N(len(set(child_ids))),
                "continuation_spec": S(spec_json)}
        try:
            self._db.put_item(TableName=self.table, Item=item,
                              ConditionExpression="attribute_not_exists(job_id)")
        except ClientError as exc:
            if not is_conditional_failure(exc):
                raise translate(exc, "start_family") from exc
            return self.family(continuation)
        except BotoCoreError as exc:
            raise translate(exc, "start_family") from exc
        return self.family(continuation)

    def _granted(self, job_id: str, item: dict[str, Any]) -> None:
        """Remember what the grant's item says about the job's continuation: the worker that
        granted it asks ``continuation_of`` when the job ends, and need not read the item again."""
        if len(self._continuations) >= GRANTS_REMEMBERED:  # jobs granted here that never ended here
            self._continuations.pop(next(iter(self._continuations)), None)
        self._continuations[job_id] = item_str(item, "continuation")

    def continuation_of(self, job_id: str) -> str | None:
        """The continuation waiting for ``job_id`` (None for a job in no family with one).

        Known without a read for a job this store granted (``_granted``): a child's item names its
        continuation before its Kafka record exists, so before any grant. Otherwise one read."""
        try:
            return self._continuations.pop(job_id)
        except KeyError:
            pass
        with translated("get_item"):
            response = self._db.get_item(TableName=self.table, Key={"job_id": S(job_id)}, ConsistentRead=True,
                                         ProjectionExpression="#then",
                                         ExpressionAttributeNames={"#then": "continuation"})
        return item_str(response.get("Item") or {}, "continuation")

    def count_down(self, continuation: str, child_id: str) -> int | None:
        """Count ``child_id`` as ended: the children still running, or None if it was counted already
        (or is not one of this continuation's children)."""
        request = self._request(
            continuation, update="ADD #ended :child SET #left = #left - :one",
            condition="attribute_exists(#left) AND contains(#fam, :id) AND NOT contains(#ended, :id)",
            values={":child": _ss([child_id]), ":id": S(child_id), ":one": N(1)}, ReturnValues="UPDATED_NEW")
        attrs, ok = self._update("count_down", request)
        return item_int(attrs, "remaining") if ok and attrs is not None else None

    def family(self, continuation: str) -> Family:
        item = self._read(continuation)
        if item is None or "waits_for" not in item:
            raise JobNotFound(f"no continuation {continuation}", job_id=continuation)
        return Family(continuation=continuation, queue=item_str(item, "queue") or "",
                      parent_id=item_str(item, "parent_id") or "",
                      waits_for=tuple(sorted(item["waits_for"]["SS"])), remaining=item_int(item, "remaining"),
                      released="released_at_ms" in item, spec_json=item_str(item, "continuation_spec"))

    def mark_released(self, continuation: str) -> bool:
        """Record that the continuation's Kafka record was appended; False if it already was."""
        request = self._request(continuation, update="SET #rel = :now, #up = :now REMOVE #spec",
                                condition="attribute_exists(#fam) AND attribute_not_exists(#rel)",
                                values={":now": N(self._now_ms())})
        _, ok = self._update("mark_released", request)
        return ok

    def get_jobs(self, job_ids: Sequence[str]) -> dict[str, Any]:
        """The records of ``job_ids`` that exist, by id (results loaded). One read each, in parallel."""
        def one(job_id: str) -> tuple[str, Any]:
            item = self._read(job_id)
            return job_id, (self._record(item) if item is not None else None)

        return {j: r for j, r in self._pool.map(one, list(dict.fromkeys(job_ids))) if r is not None}
