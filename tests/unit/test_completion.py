"""Completion events from the jobs table's stream: which records are events, their ids, their
detail, and the publisher's at-least-once answer (docs/events.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sluice.core.errors import BackendUnavailable
from sluice.streams.completion import model
from sluice.streams.completion.publish import EventBridgeSink, Publisher, batch_failures
from tests.loading import module_from_file

EVENT = json.loads((Path(__file__).parents[1] / "events" / "dynamodb_stream_jobs.json").read_text())


class Sink:
    def __init__(self, refuse: set[int] | None = None, down: bool = False) -> None:
        self.entries: list[dict[str, Any]] = []
        self.refuse, self.down = refuse or set(), down

    def put(self, entries: list[dict[str, Any]]) -> list[bool]:
        if self.down:
            raise BackendUnavailable("events down")
        out = []
        for e in entries:
            ok = len(self.entries) not in self.refuse
            self.entries.append(e) if ok else self.refuse.discard(len(self.entries))
            out.append(ok)
        return out

    def ids(self) -> list[str]:
        return [json.loads(e["Detail"])["event_id"] for e in self.entries]


class Results:
    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def put(self, key: str, body: bytes) -> str:
        self.objects[key] = body
        return f"s3://bucket/{key}"

    def get(self, ref: str) -> bytes:
        return self.objects[ref.removeprefix("s3://bucket/")]


def test_only_final_transitions_are_events_with_id_state_and_generation() -> None:
    events = [model.from_record(r) for r in EVENT["Records"]]
    got = [(e.detail_type, e.event_id) for e in events if e is not None]
    a, b, c = (r["dynamodb"]["Keys"]["job_id"]["S"] for r in (EVENT["Records"][i] for i in (0, 2, 3)))
    # a re-run's second result, a redrive, a TTL delete and a grant are not events
    assert got == [("Job Succeeded", f"{a}:succeeded:0"), ("Job Cancelled", f"{b}:cancelled:0"),
                   ("Job Dead", f"{c}:dead:1")]


def test_detail_carries_the_job_and_a_small_result_inline() -> None:
    e = model.from_record(EVENT["Records"][0])
    assert e is not None
    d = e.detail
    assert d["job_id"].startswith("01JDXAMPLE") and d["queue"] == "thumbs" and d["status"] == "succeeded"
    assert (d["attempts"], d["token"], d["redrive_gen"]) == (2, 2, 0)
    assert d["created_at_ms"] == 1764547100000 and d["finished_at_ms"] == 1764547200000
    assert d["result"] == {"pages": 4} and d["parent"] is None and "result_ref" not in d
    entry = model.entry(e, "bus")
    assert entry["Source"] == "sluice.queue.thumbs" and entry["DetailType"] == "Job Succeeded"
    assert entry["EventBusName"] == "bus"
    dead = model.from_record(EVENT["Records"][3])
    assert dead is not None and dead.detail["last_error"] == "boom" and "result" not in dead.detail


# Recorded from the real store's writes (tests/backends/inprocess/test_completion_images.py checks
# they are what it writes): a hand-built image named the parent ``parent`` (issue 29, item 5).
FAMILY = json.loads((Path(__file__).parents[1] / "events" / "dynamodb_stream_family.json").read_text())


def test_a_childs_event_names_the_parent_its_item_was_written_with() -> None:
    parent = FAMILY["parent_succeeded"]["dynamodb"]["Keys"]["job_id"]["S"]
    child = model.from_record(FAMILY["child_succeeded"])
    assert child is not None and child.detail["parent"] == parent
    assert child.detail["result"] == {"pages": 4}
    plain = model.from_record(FAMILY["parent_succeeded"])
    assert plain is not None and plain.detail["parent"] is None
    lost = model.from_record(FAMILY["child_abandoned"])
    assert lost is not None and lost.detail_type == "Job Dead" and lost.detail["parent"] == parent
    assert lost.detail["last_error"].startswith(f"never appended: its parent {parent} ended succeeded")


def test_a_large_result_becomes_an_s3_pointer() -> None:
    record = json.loads(json.dumps(EVENT["Records"][0]))
    record["dynamodb"]["NewImage"]["result"] = {"S": json.dumps({"blob": "x" * 100})}
    results, sink = Results(), Sink()
    assert Publisher(sink, "bus", results=results, inline_bytes=50).publish([record]) == []
    detail = json.loads(sink.entries[0]["Detail"])
    assert "result" not in detail and detail["result_bytes"] > 50
    key = detail["result_ref"].removeprefix("s3://bucket/")
    assert key.startswith("results/thumbs/01JDXAMPLE0000000000000001.thumbs.abc/2/")
    assert json.loads(results.objects[key]) == {"blob": "x" * 100}
    # already in S3 (a result too large for the item): the item's own pointer
    record["dynamodb"]["NewImage"].pop("result")
    own = f"s3://bucket/{key}"
    record["dynamodb"]["NewImage"]["result_ref"] = {"S": own}
    e = model.from_record(record)
    assert e is not None and e.detail["result_ref"] == own and "result" not in e.detail


def test_an_item_pointing_at_another_jobs_result_publishes_no_pointer() -> None:
    """Issue 27: the item is the team's to write; its event must not hand out another team's result."""
    record = json.loads(json.dumps(EVENT["Records"][0]))
    record["dynamodb"]["NewImage"].pop("result")
    other = "s3://bucket/results/pay/01JDXAMPLE0000000000000002.pay.abc/1/" + "a" * 64 + ".json"
    record["dynamodb"]["NewImage"]["result_ref"] = {"S": other}
    e = model.from_record(record)
    assert e is not None and e.detail["result_ref"] is None and "not its own" in e.detail["result_omitted"]


def test_the_events_queue_and_source_come_from_the_job_id_not_the_item() -> None:
    record = json.loads(json.dumps(EVENT["Records"][0]))
    record["dynamodb"]["NewImage"]["queue"] = {"S": "payments"}  # a team's forged attribute
    e = model.from_record(record)
    assert e is not None and e.detail["queue"] == "thumbs"
    assert model.entry(e, "bus")["Source"] == "sluice.queue.thumbs"


def test_publisher_reports_refused_entries_for_retry_and_a_retry_repeats_the_id() -> None:
    sink = Sink(refuse={1})
    failed = Publisher(sink, "bus").publish(EVENT["Records"])
    assert failed == ["102"]  # the second event (the cancel) was refused
    assert batch_failures(failed) == {"batchItemFailures": [{"itemIdentifier": "102"}]}
    # Lambda retries from the failed record: the dead event is published again, same id
    rest = [r for r in EVENT["Records"] if int(r["dynamodb"]["SequenceNumber"]) >= 102]
    assert Publisher(sink, "bus").publish(rest) == []
    ids = sink.ids()
    assert len(ids) == 4 and len(set(ids)) == 3


def test_publisher_down_fails_every_event_record_and_nothing_else() -> None:
    assert Publisher(Sink(down=True), "bus").publish(EVENT["Records"]) == ["100", "102", "103"]


class Client:
    def __init__(self, answers: list[Any]) -> None:
        self.answers, self.calls = answers, []

    def put_events(self, Entries: list[dict[str, Any]]) -> Any:
        self.calls.append(len(Entries))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_eventbridge_sink_chunks_by_ten_and_reads_per_entry_errors() -> None:
    ok = {"FailedEntryCount": 0, "Entries": [{"EventId": "x"}] * 10}
    some = {"FailedEntryCount": 1, "Entries": [{"EventId": "y"}, {"ErrorCode": "InternalFailure"}]}
    client = Client([ok, some])
    assert EventBridgeSink(client).put([{}] * 12) == [True] * 10 + [True, False]
    assert client.calls == [10, 2]
    from botocore.exceptions import EndpointConnectionError

    with pytest.raises(BackendUnavailable):
        EventBridgeSink(Client([EndpointConnectionError(endpoint_url="x")])).put([{}])


def test_events_lambda_answers_batch_item_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    app = module_from_file(Path(__file__).parents[2] / "functions" / "events" / "app.py", "events_app")
    sink = Sink(refuse={0})
    from sluice.entry import root as wiring

    monkeypatch.setattr(wiring, "completion_publisher", lambda: Publisher(sink, "bus"))
    assert app.handler(EVENT, None) == {"batchItemFailures": [{"itemIdentifier": "100"}]}
