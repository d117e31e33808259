"""The bucketed countdown (issue 30): a child's count is one conditional write on a bucket item of
its continuation (``~count~<continuation>~<b>``, at most ``COUNT_BUCKET`` slots, under 1 KB), and a
full bucket is counted on the continuation's item (docs/flows.md, "The bucketed countdown").

The jobs table is in-process moto, its items sized by moto's own rules (``moto_item_size``, what
``bench_fanout``'s meter bills), so the write capacity units are counted as DynamoDB bills them:
1 per KB of the larger of the item before and after, a refused conditional write included.
"""

from __future__ import annotations

import contextlib
import random
from typing import Any

from sluice.backends.dynamodb.codec import N, S
from sluice.backends.dynamodb.families import bucket_key, family_key
from sluice.backends.dynamodb.jobs import DynamoJobStore
from sluice.core import ids
from sluice.core.bus import EventBus
from sluice.core.errors import BackendUnavailable
from sluice.core.families import COUNT_BUCKET, Countdown, bucket_sizes
from sluice.streams.countdown import StreamCountdown
from sluice_dev.local.motoserver import moto_item_size
from tests.backends.inprocess import test_flows_stream
from tests.backends.inprocess.test_flows import Rig, ended
from tests.backends.inprocess.test_flows_stream import end, stream

db, rig = test_flows_stream.db, test_flows_stream.rig  # its fixtures: a jobs table with its stream

WRITES = {"UpdateItem", "PutItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}


class Meter:
    """Every UpdateItem of ``store``'s client, in WCUs as DynamoDB bills them (by moto's sizes)."""

    def __init__(self, store: DynamoJobStore) -> None:
        self.units: list[tuple[str, int]] = []  # (the item's key, its WCUs), one per write
        self._table, self._sizes = store.table, [0]
        events = store._db.meta.events
        events.register("before-parameter-build.dynamodb.UpdateItem", self._before)
        events.register("after-call.dynamodb.UpdateItem", self._after)  # a refused write too: billed

    def _before(self, params: dict[str, Any], **_: Any) -> None:
        self._key = params["Key"]
        self._sizes = [moto_item_size(self._table, params["Key"]) or 0]

    def _after(self, **_: Any) -> None:
        size = max(self._sizes[0], moto_item_size(self._table, self._key) or 0)
        self.units.append((self._key["job_id"]["S"], max(1, -(-size // 1024))))


def recount(rig: Rig) -> list[str]:
    """The stream's countdown over every record of the jobs table's stream so far."""
    return StreamCountdown(Countdown(rig.store.families, rig.api.release_continuation)).recount(stream(rig))


def children(n: int) -> list[str]:
    parent = ids.mint(1_700_000_000_000, "fanout", b"k" * 32)
    return [ids.derive_keyless(parent, "work", f"k{i}") for i in range(n)]


def test_each_count_of_a_thousand_children_is_one_wcu_on_its_bucket(rig: Rig) -> None:
    """Before issue 30 every count wrote the continuation's item, which holds every counted slot:
    past about 300 slots it passed 1 KB, and a count of 1,000 children averaged 2.07 WCUs. Now a
    count writes its bucket, which holds at most 128 slots: the fullest bucket of the largest family
    (slots 768 to 895, three digits each: ``MAX_CHILDREN`` is 1,000) stays under 1 KB. (One bucket
    is counted here, not all eight: in-process moto takes ~30 ms a write; the release after every
    bucket is ``test_a_family_over_several_buckets_is_released_once_in_any_order``'s.)"""
    families, kids = rig.store.families, children(1_000)
    then = ids.derive_keyless(rig.parent, "report", ids.CONTINUATION_PREFIX + "then")
    families.start_family(then, "report", rig.parent, kids, "{}", 1)
    assert bucket_sizes(1_000) == [COUNT_BUCKET] * 7 + [104]
    meter = Meter(rig.store)
    slots = list(range(6 * COUNT_BUCKET, 7 * COUNT_BUCKET))
    random.Random(30).shuffle(slots)  # children end in any order
    answers = [families.count_down(then, slot) for slot in slots]
    assert answers.count(None) == 0 and answers[-1] == 7  # the bucket's last count: 7 buckets left
    assert [key for key, _ in meter.units] == [bucket_key(then, 6)] * COUNT_BUCKET + [then]
    assert {u for _, u in meter.units} == {1}  # every count 1 WCU, and the bucket's on the continuation
    assert (moto_item_size(rig.store.table, {"job_id": S(bucket_key(then, 6))}) or 0) < 1024
    assert families.children_left(then) == 1_000 - COUNT_BUCKET and not families.unreleased(then)
    assert families.count_down(then, slots[0]) is None  # a repeated count counts nothing
    assert meter.units[-2:] == [(bucket_key(then, 6), 1), (then, 1)]  # (refused both: the bucket is
    # full, so its count on the continuation is tried again, in case a crash lost it)


def test_a_family_over_several_buckets_is_released_once_in_any_order(rig: Rig) -> None:
    rig.store.families.bucket = 2  # 5 children: buckets of 2, 2 and 1
    family = rig.api.enqueue_children(rig.request(5, then=True))
    then = family.continuation or ""
    assert [rig.store.families.items.read(bucket_key(then, b))["remaining"]["N"] for b in range(3)] == \
        ["2", "2", "1"]
    bus = EventBus()
    Countdown(rig.store.families, rig.api.release_continuation).subscribe(bus)
    order = family.job_ids[::-1]
    for done, child in enumerate(order[:-1], 1):
        bus.emit(ended(child))
        bus.emit(ended(child, source="settle"))  # two emitters: counted once
        assert rig.api.status(then).remaining == 5 - done  # GET counts children, not buckets
    assert then not in rig.appended()
    bus.emit(ended(order[-1], "dead"))
    assert rig.appended().count(then) == 1 and rig.api.status(then).remaining == 0
    for child in family.job_ids:  # ended again (redrives): nothing more
        bus.emit(ended(child))
    assert rig.appended().count(then) == 1


def test_a_full_bucket_whose_count_on_the_continuation_was_lost_is_counted_by_the_stream(rig: Rig) -> None:
    """The write that fills a bucket and the bucket's count on the continuation's item are two
    writes: a process that dies between them leaves the bucket full and the continuation waiting.
    The stream's read-first count sees the full bucket missing from the continuation's item and
    counts it there; a later ending of a child of that bucket would too."""
    rig.store.families.bucket = 2
    family = rig.api.enqueue_children(rig.request(3, then=True))
    then = family.continuation or ""
    bus = EventBus()
    Countdown(rig.store.families, rig.api.release_continuation).subscribe(bus)
    items = rig.store.families.items
    real = items.update

    def dies_on_the_continuation(operation: str, request: dict[str, Any]) -> Any:
        if request["Key"]["job_id"]["S"] == then and operation == "count_down":
            raise BackendUnavailable("the process died here")
        return real(operation, request)

    for child in family.job_ids:
        end(rig.store, child, "succeeded")
    items.update = dies_on_the_continuation  # type: ignore[method-assign]
    for child in family.job_ids:
        with contextlib.suppress(BackendUnavailable):
            bus.emit(ended(child))
    del items.update
    assert rig.api.status(then).remaining == 0 and then not in rig.appended()  # every bucket full
    assert not rig.store.families.unreleased(then)  # ... and the continuation's item waits for them
    assert recount(rig) == []
    assert rig.appended().count(then) == 1 and rig.store.families.unreleased(then) is False


def test_the_stream_writes_nothing_for_children_counted_in_a_full_bucket_or_not(rig: Rig) -> None:
    rig.store.families.bucket = 2
    family = rig.api.enqueue_children(rig.request(3, then=True))
    then = family.continuation or ""
    bus = EventBus()
    Countdown(rig.store.families, rig.api.release_continuation).subscribe(bus)
    for child in family.job_ids:
        end(rig.store, child, "succeeded")
        bus.emit(ended(child))
    assert rig.appended().count(then) == 1
    calls: list[str] = []
    rig.store._db.meta.events.register("before-call.dynamodb", lambda model, **_: calls.append(model.name))
    assert recount(rig) == []
    assert calls and not WRITES & set(calls), calls
    assert rig.appended().count(then) == 1


def test_a_family_started_before_buckets_still_counts_on_the_continuations_item(rig: Rig) -> None:
    """A continuation created before issue 30 (no ``buckets``, ``remaining`` counting children)
    whose parent re-runs on this code: no bucket is created, and its children count as they did."""
    families = rig.store.families
    first = rig.api.enqueue_children(rig.request(2, then=True))
    then = first.continuation or ""
    # Make it the old code's family: no buckets, the record and item as that code wrote them.
    rig.store._db.batch_write_item(RequestItems={rig.store.table: [
        {"DeleteRequest": {"Key": {"job_id": S(bucket_key(then, 0))}}}]})
    for key, remaining in ((family_key(then), None), (then, 2)):
        update = "REMOVE buckets, buckets_left" + ("" if remaining is None else " SET remaining = :n")
        values = {} if remaining is None else {"ExpressionAttributeValues": {":n": N(remaining)}}
        rig.store._db.update_item(TableName=rig.store.table, Key={"job_id": S(key)}, UpdateExpression=update,
                                  **values)
    token = rig.store.grant(rig.parent, "fanout", "w9")
    rig.api.enqueue_children(rig.request(2, then=True, token=token))  # a re-run: no buckets now either
    assert families.items.read(bucket_key(then, 0)) is None and families.children_left(then) is None
    bus = EventBus()
    Countdown(families, rig.api.release_continuation).subscribe(bus)
    bus.emit(ended(first.job_ids[0]))
    assert rig.api.status(then).remaining == 1 and families.items.read(bucket_key(then, 0)) is None
    bus.emit(ended(first.job_ids[1]))
    bus.emit(ended(first.job_ids[1]))
    assert rig.appended().count(then) == 1 and rig.api.status(then).remaining == 0


def test_a_slot_outside_the_family_counts_nothing(rig: Rig) -> None:
    """A team may write its own child's item: a ``family_slot`` past its family's buckets finds no
    bucket, and the continuation's item (which has buckets) refuses it: nothing is counted."""
    family = rig.api.enqueue_children(rig.request(2, then=True))
    then = family.continuation or ""
    assert rig.store.families.count_down(then, COUNT_BUCKET * 40) is None
    assert rig.store.families.count_down(then, -1) is None
    assert rig.api.status(then).remaining == 2
    assert rig.store.families.items.read(then)["buckets_left"]["N"] == "1"  # one bucket, not full


def test_code_of_before_buckets_counts_nothing_on_a_bucketed_continuation(rig: Rig) -> None:
    """During an upgrade, a process still on the code of before issue 30 (a team's worker on an
    older layer) counts a child by that code's one write on the continuation's item. A bucketed
    continuation's item has no ``remaining`` (its count is ``buckets_left``), so that write is
    refused: it cannot take the count of buckets for a count of children and release it early."""
    family = rig.api.enqueue_children(rig.request(3, then=True))
    then = family.continuation or ""
    old_count = rig.store.families.items.request(  # the code of before issue 30's count_down, verbatim
        then, update="ADD #ended :slots SET #left = #left - :one, #up = :now",
        condition="attribute_exists(#left) AND NOT contains(#ended, :slot)",
        values={":slots": {"NS": ["1"]}, ":slot": N(1), ":one": N(1), ":now": N(1)},
        ReturnValues="UPDATED_NEW")
    _, ok = rig.store.families.items.update("count_down", old_count)
    assert not ok and "remaining" not in (rig.store.families.items.read(then) or {})
    assert not rig.store.families.unreleased(then) and rig.api.status(then).remaining == 3
    bus = EventBus()
    Countdown(rig.store.families, rig.api.release_continuation).subscribe(bus)
    for child in family.job_ids:  # this code's counts (or the stream's, on this code) release it
        bus.emit(ended(child))
    assert rig.appended().count(then) == 1 and rig.api.status(then).remaining == 0
