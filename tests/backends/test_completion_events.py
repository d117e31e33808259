"""Completion events end to end on moto: final writes -> the jobs table's stream -> the poller ->
the Publisher -> EventBridge -> an SQS target; and progress writes fenced on the real table."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sluice.backends.dynamodb.jobs import DynamoJobStore
from sluice.core.config import Settings
from sluice.core.errors import InvalidInput, LeaseLost, StaleToken
from sluice.core.models import JobState, SettleEntry
from sluice.entry import root as wiring
from sluice.streams.completion.publish import Publisher, batch_failures
from sluice_dev.local.streams import ensure_bus
from tests.backends.streams_support import received, stream_poller, stream_settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


def _id(n: int) -> str:
    return f"01JDXAMPLE00000000000000{n:02d}.q.abc"


@pytest.fixture
def s(moto_url: str, unique: str) -> Settings:
    return stream_settings(moto_url, unique)


def test_each_final_state_publishes_one_event_and_a_crash_before_the_checkpoint_repeats_its_id(
        s: Settings, unique: str) -> None:
    url = ensure_bus(s, f"follow-{unique}")
    store = DynamoJobStore.from_settings(s)
    ok, failed, settled, cancelled, running = (_id(n) for n in range(1, 6))
    store.mark_queued([(j, "q", 0) for j in (ok, failed, settled, cancelled, running)])
    store.write_result(ok, store.grant(ok, "q", "w"), {"pages": 4})
    store.record_failure(failed, store.grant(failed, "q", "w"), "bad input", "failed")
    store.grant(settled, "q", "w")
    store.settle_ended(SettleEntry(job_id=settled, queue="q", status=JobState.DEAD, ended_at_ms=1))
    store.request_cancel(cancelled)
    store.grant(running, "q", "w")  # never ends: no event
    # The "crash": nothing published these; the writes alone are in the stream.
    publisher = wiring.completion_publisher.__wrapped__(s)  # an uncached one, for these settings
    poller = stream_poller(s, publisher.publish)
    assert poller.poll_once() > 0
    events = received(s, url)
    by_job = {e["detail"]["job_id"]: e for e in events}
    assert len(events) == 4 and set(by_job) == {ok, failed, settled, cancelled}
    assert {e["detail-type"] for e in events} == {"Job Succeeded", "Job Failed", "Job Dead", "Job Cancelled"}
    assert all(e["source"] == f"sluice.queue.{e['detail']['queue']}" for e in events)
    assert by_job[ok]["detail"]["result"] == {"pages": 4}
    assert by_job[ok]["detail"]["event_id"] == f"{ok}:succeeded:0"
    assert by_job[failed]["detail"]["last_error"] == "bad input"
    # The publisher died after PutEvents and before its checkpoint: the next one reads the same
    # records again and publishes them again, with the same ids.
    again = stream_poller(s, publisher.publish)
    again.poll_once()
    repeats = received(s, url)
    assert sorted(e["detail"]["event_id"] for e in repeats) == sorted(e["detail"]["event_id"] for e in events)
    # The checkpoint moved: the first poller publishes nothing more.
    assert poller.poll_once() == 0 and received(s, url) == []


def test_a_refused_put_is_retried_from_the_failed_record(s: Settings, unique: str) -> None:
    url = ensure_bus(s, f"follow-{unique}")
    store = DynamoJobStore.from_settings(s)
    store.mark_queued([(_id(1), "q", 0)])
    store.write_result(_id(1), store.grant(_id(1), "q", "w"), 1)
    real = wiring.completion_publisher.__wrapped__(s)

    class Down:
        def put(self, entries: list[dict[str, Any]]) -> list[bool]:
            return [False] * len(entries)

    poller = stream_poller(s, Publisher(Down(), s.events_bus_name).publish)
    poller.poll_once()
    assert received(s, url) == []
    poller.handle = lambda event: batch_failures(real.publish(event["Records"]))
    poller.poll_once()
    (event,) = received(s, url)
    assert event["detail"]["event_id"] == f"{_id(1)}:succeeded:0"


def test_progress_is_fenced_on_the_token_and_shown_by_get_job(s: Settings) -> None:
    store = DynamoJobStore.from_settings(s)
    job = _id(7)
    store.mark_queued([(job, "q", 0)])
    t1 = store.grant(job, "q", "w1")
    store.write_progress(job, t1, 0.4, "resized 4 of 10")
    rec = store.get_job(job)
    assert (rec.progress, rec.progress_detail) == (0.4, "resized 4 of 10") and rec.progress_at_ms
    store.record_failure(job, t1, "boom", "queued")
    t2 = store.grant(job, "q", "w2")
    with pytest.raises(StaleToken):
        store.write_progress(job, t1, 0.9, "stale")  # the old holder cannot move it
    store.write_progress(job, t2, 0.1, "again")
    with pytest.raises(InvalidInput):
        store.write_progress(job, t2, 1.5, "")
    with pytest.raises(InvalidInput):
        store.write_progress(job, t2, 0.5, "x" * 5000)
    store.write_result(job, t2, "ok")
    with pytest.raises(LeaseLost):
        store.write_progress(job, t2, 0.2, "after the end")
    rec = store.get_job(job)
    assert (rec.progress, rec.progress_detail, rec.status) == (0.1, "again", JobState.SUCCEEDED)
    assert json.loads(rec.model_dump_json())["progress"] == 0.1


def test_a_redriven_job_ending_again_gets_a_new_id_and_a_rerun_of_a_success_none(s: Settings,
                                                                                  unique: str) -> None:
    url = ensure_bus(s, f"follow-{unique}")
    store = DynamoJobStore.from_settings(s)
    dead, rerun, unrecorded, honoured = _id(11), _id(12), _id(13), _id(14)
    store.mark_queued([(j, "q", 0) for j in (dead, rerun, honoured)])
    store.record_failure(dead, store.grant(dead, "q", "w"), "boom", "dead")
    gen = store.redrive(dead)
    store.record_failure(dead, store.grant(dead, "q", "w", gen), "boom again", "dead")
    store.write_result(rerun, store.grant(rerun, "q", "w"), 1)
    store.write_result(rerun, store.grant(rerun, "q", "w2"), 1)  # its worker died before the ack
    store.cancel_unrecorded(unrecorded, "q", "cancelled before the relay")
    store.grant(honoured, "q", "w")
    store.request_cancel(honoured)  # leased: flagged
    store.honour_cancel(honoured)  # its holder died: cancelled now
    publisher = wiring.completion_publisher.__wrapped__(s)
    poller = stream_poller(s, publisher.publish)
    while poller.poll_once():
        pass
    ids = sorted(e["detail"]["event_id"] for e in received(s, url))
    assert ids == sorted([f"{dead}:dead:0", f"{dead}:dead:{gen}", f"{rerun}:succeeded:0",
                          f"{unrecorded}:cancelled:0", f"{honoured}:cancelled:0"])
    assert gen == 1


def test_the_poller_reads_on_with_the_iterator_it_was_given_one_request_a_round(s: Settings) -> None:
    """As an event source mapping does: after the first round, each round is one GetRecords on the
    iterator the last one returned (it was DescribeStream, GetShardIterator and GetRecords every half
    second on every local stack); records written since arrive, none again, and a refused batch is
    read again from its first failed record."""
    store = DynamoJobStore.from_settings(s)
    batches: list[set[str]] = []  # the job ids of each batch handed
    refuse = False

    def consume(records: Any) -> list[str]:
        batches.append({r["dynamodb"]["Keys"]["job_id"]["S"] for r in records})
        return [str(r["dynamodb"]["SequenceNumber"]) for r in records] if refuse else []

    poller = stream_poller(s, consume)
    calls: list[str] = []
    poller.client.meta.events.register("before-call.dynamodbstreams.*",
                                       lambda model, **_: calls.append(model.name))
    store.mark_queued([(_id(1), "q", 0)])
    assert poller.poll_once() > 0 and batches == [{_id(1)}]
    assert calls == ["DescribeStream", "GetShardIterator", "GetRecords"]
    calls.clear()
    assert [poller.poll_once() for _ in range(3)] == [0, 0, 0]
    assert calls == ["GetRecords"] * 3  # no describe, no new iterator
    store.mark_queued([(_id(2), "q", 0)])
    assert poller.poll_once() > 0 and batches[1:] == [{_id(2)}]
    refuse = True
    store.mark_queued([(_id(3), "q", 0)])
    calls.clear()
    assert poller.poll_once() > 0 and batches[2:] == [{_id(3)}]
    refuse = False
    assert poller.poll_once() > 0 and batches[3:] == [{_id(3)}]  # read again ...
    assert calls == ["GetRecords", "GetShardIterator", "GetRecords"]  # ... from a new iterator
    assert poller.poll_once() == 0 and len(batches) == 4
