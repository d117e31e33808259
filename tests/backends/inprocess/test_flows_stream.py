"""The continuations' countdown on the jobs table's stream: a child whose process died between its
final write and its in-process countdown is counted from its stream record (docs/flows.md, Failure).

The jobs table and its stream are in-process moto (no sockets): the records are the ones moto's
stream holds for the writes made here, in the shape Lambda hands the countdown function.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from sluice.backends.dynamodb import tables
from sluice.backends.dynamodb.jobs import DynamoJobStore
from sluice.core.bus import EventBus
from sluice.core.errors import BackendUnavailable
from sluice.core.families import Countdown
from sluice.streams.countdown import StreamCountdown, ended_child
from sluice_dev.local.streams import lambda_record, stream_consumers
from tests.backends.inprocess.test_flows import Rig, ended


@pytest.fixture(scope="module")
def db() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("dynamodb", region_name="us-east-1")


@pytest.fixture
def rig(db: Any) -> Iterator[Rig]:
    name = f"jobs-{uuid.uuid4().hex[:8]}"
    tables.create_jobs_table(db, name)  # with its stream, as in the template
    yield Rig(DynamoJobStore(db, name))
    db.delete_table(TableName=name)


def stream(rig: Rig) -> list[dict[str, Any]]:
    """Every record of the jobs table's stream so far (one shard in moto)."""
    name = rig.store.table
    arn = rig.store._db.describe_table(TableName=name)["Table"]["LatestStreamArn"]
    client = boto3.client("dynamodbstreams", region_name="us-east-1")
    out: list[dict[str, Any]] = []
    for shard in client.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
        it = client.get_shard_iterator(StreamArn=arn, ShardId=shard["ShardId"],
                                       ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
        out += [lambda_record(r, arn) for r in client.get_records(ShardIterator=it, Limit=1000)["Records"]]
    return out


def end(jobs: DynamoJobStore, child: str, state: str) -> None:
    """The child's final write, and nothing after it: its process dies before the countdown."""
    token = jobs.grant(child, child.split(".")[1], "w1")  # the id's own queue (a grant stays in it)
    if state == "succeeded":
        jobs.write_result(child, token, 1)
    else:
        jobs.record_failure(child, token, "boom", state)


def test_children_that_failed_or_died_before_their_countdown_are_counted_from_the_stream(rig: Rig) -> None:
    family = rig.api.enqueue_children(rig.request(3, then=True))
    then = family.continuation or ""
    a, b, c = family.job_ids
    bus = EventBus()
    Countdown(rig.store.families, rig.api.release_continuation).subscribe(bus)
    end(rig.store, a, "succeeded")
    bus.emit(ended(a))  # the fast path counted this one
    end(rig.store, b, "failed")  # ... these two processes died before theirs: no JobEnded
    end(rig.store, c, "dead")
    assert rig.api.status(then).remaining == 2 and then not in rig.appended()

    records = stream(rig)
    assert {ended_child(r) for r in records} - {None} == {(then, 0), (then, 1), (then, 2)}
    countdown = StreamCountdown(Countdown(rig.store.families, rig.api.release_continuation))
    assert countdown.recount(records) == []
    assert rig.api.status(then).remaining == 0
    assert rig.appended().count(then) == 1

    assert countdown.recount(records + records) == []  # delivered again (a retried batch): nothing
    bus.emit(ended(b, "failed"))  # and the fast path, late, counts nothing either
    assert rig.api.status(then).remaining == 0 and rig.appended().count(then) == 1


def test_a_duplicate_stream_record_counts_its_child_once(rig: Rig) -> None:
    family = rig.api.enqueue_children(rig.request(2, then=True))
    then = family.continuation or ""
    end(rig.store, family.job_ids[0], "failed")
    [record] = [r for r in stream(rig) if ended_child(r) is not None]
    countdown = StreamCountdown(Countdown(rig.store.families, rig.api.release_continuation))
    assert countdown.recount([record, record]) == [] and countdown.recount([record]) == []
    assert rig.api.status(then).remaining == 1 and then not in rig.appended()
    end(rig.store, family.job_ids[1], "cancelled")
    assert countdown.recount(stream(rig)) == []  # the whole stream, the first record again
    assert rig.appended().count(then) == 1


def test_a_release_that_fails_is_answered_for_retry_and_released_once_on_redelivery(rig: Rig) -> None:
    family = rig.api.enqueue_children(rig.request(1, then=True))
    then = family.continuation or ""
    end(rig.store, family.job_ids[0], "dead")
    records = stream(rig)
    [last] = [r for r in records if ended_child(r) is not None]
    down = True

    def release(continuation: str) -> None:
        if down:
            raise BackendUnavailable("the gateway function is unavailable")
        rig.api.release_continuation(continuation)

    countdown = StreamCountdown(Countdown(rig.store.families, release, sleep=lambda _s: None))
    assert countdown.recount(records) == [str(last["dynamodb"]["SequenceNumber"])]
    assert then not in rig.appended() and rig.store.families.unreleased(then)
    down = False
    assert countdown.recount(records) == []  # Lambda retries from that record
    assert rig.appended().count(then) == 1 and not rig.store.families.unreleased(then)


def test_records_that_are_not_a_childs_final_transition_count_nothing(rig: Rig) -> None:
    family = rig.api.enqueue_children(rig.request(1, then=True))
    child = family.job_ids[0]
    end(rig.store, child, "succeeded")
    rig.store.write_result(child, 1, 1)  # a re-run writing its result again: succeeded -> succeeded
    end(rig.store, rig.parent, "succeeded")  # the parent: final, but no continuation waits for it
    records = stream(rig)
    found = [ended_child(r) for r in records]
    assert found.count((family.continuation, 0)) == 1 and len([f for f in found if f]) == 1
    assert ended_child({"eventName": "REMOVE", "dynamodb": {}}) is None
    assert ended_child({"eventName": "MODIFY", "dynamodb": {"OldImage": records[-1]["dynamodb"].get(
        "NewImage")}}) is None  # no new image


def test_the_local_poller_hands_each_batch_to_both_consumers_and_retries_the_union() -> None:
    records = [{"dynamodb": {"SequenceNumber": str(n)}} for n in (1, 2, 3)]
    seen: list[str] = []

    def publish(batch: Any) -> list[str]:
        seen.append("publish")
        return ["3"]

    def recount(batch: Any) -> list[str]:
        seen.append("recount")
        return ["2", "3"]

    assert stream_consumers(records, publish, recount) == ["2", "3"]
    assert seen == ["publish", "recount"]


def test_the_stream_countdown_needs_the_internal_function() -> None:
    from sluice.core.config import Settings
    from sluice.core.errors import ConfigError
    from sluice.entry import root as wiring

    with pytest.raises(ConfigError, match="SLUICE_INTERNAL_FUNCTION_NAME"):
        wiring.stream_countdown.__wrapped__(Settings(internal_function_name=None, gateway_function_name=None))


def test_the_stream_makes_no_write_for_a_child_the_fast_path_counted(rig: Rig) -> None:
    """Issue 30: the stream's count reads the continuation's item first. It used to make the
    conditional write anyway, refused and billed by the item's size (a few KB with many slots)."""
    family = rig.api.enqueue_children(rig.request(3, then=True))
    then = family.continuation or ""
    bus = EventBus()
    Countdown(rig.store.families, rig.api.release_continuation).subscribe(bus)
    for child in family.job_ids[:2]:
        end(rig.store, child, "succeeded")
        bus.emit(ended(child))  # the fast path counted these two
    records = stream(rig)
    calls: list[str] = []
    rig.store._db.meta.events.register("before-call.dynamodb", lambda model, **_: calls.append(model.name))
    countdown = StreamCountdown(Countdown(rig.store.families, rig.api.release_continuation))
    assert countdown.recount(records) == []
    assert calls and not {"UpdateItem", "PutItem", "BatchWriteItem", "TransactWriteItems"} & set(calls), calls
    assert rig.api.status(then).remaining == 1

    last = family.job_ids[2]
    end(rig.store, last, "failed")  # its process died before its count: the stream's count writes
    calls.clear()
    assert countdown.recount(stream(rig)) == []
    assert calls.count("UpdateItem") >= 1 and rig.api.status(then).remaining == 0
    assert rig.appended().count(then) == 1


def test_the_stream_releases_a_counted_continuation_its_fast_path_left_unreleased(rig: Rig) -> None:
    """Read first, the stream still releases a continuation whose last count was made but whose
    release failed (the fast path's three tries), without writing the count again."""
    family = rig.api.enqueue_children(rig.request(1, then=True))
    then = family.continuation or ""
    child = family.job_ids[0]
    bus = EventBus()

    def down(_continuation: str) -> None:
        raise BackendUnavailable("the gateway function is unavailable")

    Countdown(rig.store.families, down, sleep=lambda _s: None).subscribe(bus)
    end(rig.store, child, "succeeded")
    bus.emit(ended(child))
    assert rig.store.families.unreleased(then) and then not in rig.appended()
    countdown = StreamCountdown(Countdown(rig.store.families, rig.api.release_continuation))
    assert countdown.recount(stream(rig)) == []
    assert rig.appended().count(then) == 1 and not rig.store.families.unreleased(then)
