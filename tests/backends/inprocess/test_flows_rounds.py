"""The worker's round countdown (issue 30, item 2): the children a drain's round ended are counted
together when the round ends, one conditional write per bucket (``count_down_many``), not one a child.

In-process moto, each write billed by moto's item sizes (``Meter``, as ``test_flows_buckets``); a real
``Worker`` drain for the round's end (``RoundEnded``); the stream's countdown for a process that died
before its round ended.
"""

from __future__ import annotations

from typing import Any

import sluice
from sluice.backends.dynamodb.codec import N, S
from sluice.backends.dynamodb.families import bucket_key, family_key
from sluice.core import ids
from sluice.core.bus import EventBus, RoundEnded
from sluice.core.families import COUNT_BUCKET
from sluice.worker.countdown import RoundCountdown
from sluice.worker.runtime.options import WorkerOptions
from sluice.worker.runtime.telemetry import MemoryMetrics, Telemetry
from sluice_dev.fakes import FakeQueue
from tests.backends.inprocess import test_flows_stream
from tests.backends.inprocess.test_flows import KEY, PARENT_MS, Rig, ended, relay
from tests.backends.inprocess.test_flows_buckets import Meter, children, recount
from tests.backends.inprocess.test_flows_stream import end

db, rig = test_flows_stream.db, test_flows_stream.rig  # its fixtures: a jobs table with its stream


def counts(rig: Rig) -> list[str]:
    """The keys of the countdown's writes (``count_down`` updates) from now on."""
    items, made = rig.store.families.items, []
    real = items.update

    def spy(operation: str, request: dict[str, Any]) -> Any:
        if operation == "count_down":
            made.append(request["Key"]["job_id"]["S"])
        return real(operation, request)

    items.update = spy  # type: ignore[method-assign]
    return made


def slots_of(rig: Rig, then: str, bucket: int) -> set[int]:
    item = rig.store.families.items.read(bucket_key(then, bucket)) or {}
    return {int(n) for n in item.get("ended_slots", {}).get("NS", [])}


def test_ten_slots_of_one_bucket_are_one_write_of_one_wcu(rig: Rig) -> None:
    families, kids = rig.store.families, children(1_000)
    then = ids.derive_keyless(rig.parent, "report", ids.CONTINUATION_PREFIX + "then")
    families.start_family(then, "report", rig.parent, kids, "{}", 1)
    meter = Meter(rig.store)
    round_ = list(range(6 * COUNT_BUCKET + 100, 6 * COUNT_BUCKET + 110))
    assert families.count_down_many(then, round_) == COUNT_BUCKET - 10
    assert meter.units == [(bucket_key(then, 6), 1)]
    assert slots_of(rig, then, 6) == set(round_)
    assert families.count_down_many(then, round_) is None  # counted already: nothing more
    assert slots_of(rig, then, 6) == set(round_) and families.children_left(then) == 990


def test_a_round_over_three_buckets_writes_each_once_and_the_last_count_releases(rig: Rig) -> None:
    rig.store.families.bucket = 2  # 5 children: buckets of 2, 2 and 1
    family = rig.api.enqueue_children(rig.request(5, then=True))
    then = family.continuation or ""
    meter = Meter(rig.store)
    assert rig.store.families.count_down_many(then, [0, 1, 2, 3, 4]) == 0
    buckets = [key for key, _ in meter.units if key.startswith("~count~")]
    assert sorted(buckets) == sorted(bucket_key(then, b) for b in range(3))
    assert [key for key, _ in meter.units].count(then) == 3  # each full bucket counted on the continuation


def test_a_round_with_a_slot_counted_already_counts_each_slot_once(rig: Rig) -> None:
    """A child that ended before (a re-run, or the stream got there first): the one write is refused,
    and each slot is counted alone; the one counted already counts nothing."""
    family = rig.api.enqueue_children(rig.request(4, then=True))
    then = family.continuation or ""
    families = rig.store.families
    assert families.count_down(then, 1) == 3
    assert families.count_down_many(then, [0, 1, 2]) == 1
    assert slots_of(rig, then, 0) == {0, 1, 2} and families.children_left(then) == 1
    assert families.count_down_many(then, [3]) == 0  # the last: released by whoever counted it


def test_a_family_of_before_buckets_is_counted_slot_by_slot(rig: Rig) -> None:
    families = rig.store.families
    family = rig.api.enqueue_children(rig.request(3, then=True))
    then = family.continuation or ""
    rig.store._db.batch_write_item(RequestItems={rig.store.table: [
        {"DeleteRequest": {"Key": {"job_id": S(bucket_key(then, 0))}}}]})
    for key, remaining in ((family_key(then), None), (then, 3)):
        update = "REMOVE buckets, buckets_left" + ("" if remaining is None else " SET remaining = :n")
        values = {} if remaining is None else {"ExpressionAttributeValues": {":n": N(remaining)}}
        rig.store._db.update_item(TableName=rig.store.table, Key={"job_id": S(key)}, UpdateExpression=update,
                                  **values)
    assert families.count_down_many(then, [0, 2]) == 1
    assert families.count_down_many(then, [0, 1]) == 0
    assert families.items.read(bucket_key(then, 0)) is None


def test_counts_wait_for_the_round_and_release_the_continuation_once(rig: Rig) -> None:
    family = rig.api.enqueue_children(rig.request(3, then=True))
    then = family.continuation or ""
    bus = EventBus()
    RoundCountdown(rig.store.families, rig.api.release_continuation).subscribe(bus)
    made = counts(rig)
    for child in family.job_ids:
        bus.emit(ended(child))
        bus.emit(ended(child, source="settle"))  # two emitters: counted once
    assert made == [] and rig.api.status(then).remaining == 3  # nothing before the round ends
    bus.emit(RoundEnded(queue="work", jobs=3))
    assert made == [bucket_key(then, 0), then]  # the round's one write; its full bucket on the continuation
    assert rig.appended().count(then) == 1 and rig.api.status(then).remaining == 0
    for child in family.job_ids:  # ended again (redrives), another round: nothing more
        bus.emit(ended(child))
    bus.emit(RoundEnded(queue="work", jobs=3))
    assert rig.appended().count(then) == 1


def test_a_process_that_dies_before_its_round_ends_leaves_the_counts_to_the_stream(rig: Rig) -> None:
    family = rig.api.enqueue_children(rig.request(3, then=True))
    then = family.continuation or ""
    bus = EventBus()
    RoundCountdown(rig.store.families, rig.api.release_continuation).subscribe(bus)
    for child in family.job_ids:
        end(rig.store, child, "succeeded")
        bus.emit(ended(child))  # pending: the process dies here, before RoundEnded
    assert rig.api.status(then).remaining == 3 and then not in rig.appended()
    assert recount(rig) == []
    assert rig.appended().count(then) == 1 and rig.api.status(then).remaining == 0


def test_a_drain_counts_its_rounds_children_with_one_write(rig: Rig) -> None:
    """A real drain: the parent's 8 children run in one round of 10; their counts are one write on
    their bucket, made when the round ends, and the continuation runs after them."""
    app = sluice.Worker()

    @app.handler("fanout")
    def fanout(job: sluice.Job, ctx: sluice.JobContext) -> Any:
        return {"n": len(ctx.enqueue_many([("work", i, f"n{i}") for i in range(8)],
                                          then=("report", {})).job_ids)}

    @app.handler("work")
    def work(job: sluice.Job, ctx: sluice.JobContext) -> Any:
        return job.payload

    @app.handler("report")
    def report(job: sluice.Job, ctx: sluice.JobContext) -> Any:
        return sum(k.result or 0 for k in ctx.children())

    queue = FakeQueue()
    parent = rig.parent = ids.mint(PARENT_MS, "fanout", KEY)
    queue.add("fanout", parent, None)
    worker = app.bind(queue=queue, store=rig.store, families=rig.store.families, family_gateway=rig.keeper,
                      options=WorkerOptions(), telemetry=Telemetry(metrics=MemoryMetrics()), worker_id="w")
    seen: set[str] = set()
    worker.drain(["fanout"], 10)
    relay(rig, queue, seen)
    [then] = rig.api.status(parent).continuations
    made = counts(rig)
    worker.drain(["work"], 10)
    assert made == [bucket_key(then, 0), then]  # one count for the round's 8 children (8 before)
    relay(rig, queue, seen)
    worker.drain(["report"], 10)
    assert rig.store.get_job(then).result == sum(range(8))
