"""The relay's adapters and controls without a network: dispatchers, the Kafka source, knobs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from kafka import TopicPartition
from kafka.errors import KafkaConnectionError
from kafka.structs import OffsetAndMetadata
from pydantic import ValidationError

from sluice.backends.aws.dispatch import LambdaDispatcher
from sluice.backends.kafka.source import KafkaSource, consumer_config
from sluice.core import knobs as control
from sluice.core.config import Settings
from sluice.core.errors import BackendUnavailable, InvalidInput
from sluice.core.models import DispatchEvent, QueueConfig
from sluice.entry import relay as relay_entry
from sluice.relay import SourceRecord

EVENTS = Path(__file__).resolve().parents[1] / "events"


# -- LambdaDispatcher --------------------------------------------------------------------------------

def lambda_client() -> Any:
    return boto3.client("lambda", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")


def test_lambda_dispatcher_invokes_asynchronously_with_a_dispatch_event() -> None:
    client = lambda_client()
    expected = {"FunctionName": "sluice-worker", "InvocationType": "Event",
                "Payload": DispatchEvent(queues=["q"], batch=25).model_dump_json().encode()}
    with Stubber(client) as stub:
        for _ in range(3):
            stub.add_response("invoke", {"StatusCode": 202}, expected)
        assert LambdaDispatcher(client, "sluice-worker").dispatch("q", 3, 25) == 3
        stub.assert_no_pending_responses()
    event = DispatchEvent.model_validate_json(expected["Payload"])
    assert event.queues == ["q"] and event.batch == 25 and event.source == "relay"


def test_lambda_dispatcher_counts_what_lambda_accepted_and_raises_if_nothing() -> None:
    client = lambda_client()
    with Stubber(client) as stub:
        stub.add_response("invoke", {"StatusCode": 202})
        stub.add_client_error("invoke", "TooManyRequestsException", http_status_code=429)
        assert LambdaDispatcher(client, "w", parallel=1).dispatch("q", 2, 10) == 1
        stub.add_client_error("invoke", "ServiceException", http_status_code=500)
        with pytest.raises(BackendUnavailable):
            LambdaDispatcher(client, "w").dispatch("q", 1, 10)
    assert LambdaDispatcher(client, "w").dispatch("q", 0, 10) == 0
    with pytest.raises(InvalidInput):
        LambdaDispatcher(client, "")


# -- KafkaSource -------------------------------------------------------------------------------------

class Rec:
    def __init__(self, partition: int, offset: int, key: bytes | None, value: bytes | None) -> None:
        self.partition, self.offset, self.key, self.value = partition, offset, key, value


class FakeConsumer:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.committed_offsets: dict[TopicPartition, int] = {TopicPartition("t", 1): 40}
        self.fail = False

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        if self.fail:
            raise KafkaConnectionError("down")
        return {2, 0, 1} if topic == "t" else None

    def assign(self, tps: list[TopicPartition]) -> None:
        self.calls.append(("assign", tps))

    def committed(self, tp: TopicPartition) -> int | None:
        return self.committed_offsets.get(tp)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.calls.append(("seek", (tp, offset)))

    def seek_to_beginning(self, *tps: TopicPartition) -> None:
        self.calls.append(("seek_to_beginning", tps))

    def poll(self, timeout_ms: int, max_records: int) -> dict[TopicPartition, list[Rec]]:
        return {TopicPartition("t", 1): [Rec(1, 5, b"a", b"x"), Rec(1, 6, None, None)],
                TopicPartition("t", 0): [Rec(0, 9, b"b", b"y")]}

    def commit(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        self.calls.append(("commit", offsets))

    def position(self, tp: TopicPartition) -> int:
        return 77


class FakeFuture:
    def __init__(self, ok: bool) -> None:
        self.ok = ok

    def succeeded(self) -> bool:
        return self.ok


class FakeProducer:
    def __init__(self, results: list[bool]) -> None:
        self.sent: list[dict[str, Any]] = []
        self.results = results
        self.flushes = 0

    def send(self, topic: str, **kw: Any) -> FakeFuture:
        self.sent.append({"topic": topic, **kw})
        return FakeFuture(self.results.pop(0) if self.results else True)

    def flush(self, timeout: float) -> None:
        self.flushes += 1


class FakeCoordinator:
    """kafka-python's consumer coordinator: one OffsetFetch for a list of partitions."""

    def __init__(self, committed: dict[TopicPartition, int]) -> None:
        self.committed, self.fetches = committed, []  # type: list[list[TopicPartition]]

    def fetch_committed_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, Any]:
        self.fetches.append(list(partitions))
        return {tp: OffsetAndMetadata(self.committed[tp], "", -1)
                for tp in partitions if tp in self.committed}


def test_a_take_over_reads_the_committed_offsets_once_in_one_request() -> None:
    """Rewinding 8 partitions is one OffsetFetch, and recovery's plan of the same take-over uses
    what it read rather than asking again (16 round trips before, on the relay's cold start)."""
    from sluice.relay.recovery.adapters import KafkaOffsets

    consumer = FakeConsumer()
    consumer._coordinator = FakeCoordinator({TopicPartition("t", 1): 40, TopicPartition("t", 5): 7})  # type: ignore[attr-defined]
    source = KafkaSource(consumer, "t", "t.dlq", FakeProducer([]))
    source.assign(list(range(8)))
    expected = {p: {1: 40, 5: 7}.get(p) for p in range(8)}
    source.rewind_to_committed(list(range(8)))
    assert source.rewound == expected
    assert consumer._coordinator.fetches == [[TopicPartition("t", p) for p in range(8)]]  # type: ignore[attr-defined]
    assert ("seek", (TopicPartition("t", 1), 40)) in consumer.calls
    assert ("seek_to_beginning", (TopicPartition("t", 0),)) in consumer.calls
    offsets = KafkaOffsets(source)
    assert offsets.committed_many(list(range(8))) == expected
    assert len(consumer._coordinator.fetches) == 1  # type: ignore[attr-defined]
    # used once: a later read (a retried plan, another take-over) asks Kafka again, in one request
    assert offsets.committed_many([1, 5]) == {1: 40, 5: 7}
    assert consumer._coordinator.fetches[1:] == [[TopicPartition("t", 1), TopicPartition("t", 5)]]  # type: ignore[attr-defined]


def test_source_assigns_rewinds_polls_and_commits_by_hand() -> None:
    consumer = FakeConsumer()
    source = KafkaSource(consumer, "t", "t.dlq", FakeProducer([]))
    assert source.partitions() == [0, 1, 2]
    source.assign([0, 1])
    source.rewind_to_committed([0, 1])
    assert consumer.calls == [
        ("assign", [TopicPartition("t", 0), TopicPartition("t", 1)]),
        ("seek_to_beginning", (TopicPartition("t", 0),)),
        ("seek", (TopicPartition("t", 1), 40)),
    ]
    assert source.poll(10, 100) == [SourceRecord(0, 9, b"b", b"y"), SourceRecord(1, 5, b"a", b"x"),
                                    SourceRecord(1, 6, None, None)]
    source.commit({1: 7})
    assert consumer.calls[-1] == ("commit", {TopicPartition("t", 1): OffsetAndMetadata(7, "", -1)})

def test_pause_takes_a_partition_out_of_the_assignment_and_resume_seeks_it_back() -> None:
    consumer = FakeConsumer()
    source = KafkaSource(consumer, "t", "t.dlq", FakeProducer([]))
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
    source.assign([0, 1])
    source.pause([1])
    assert consumer.calls[-1] == ("assign", [tp0])
    source.assign([0, 1, 2])  # ownership changes while 1 is paused: it stays out
    assert consumer.calls[-1] == ("assign", [tp0, TopicPartition("t", 2)])
    source.resume([1])
    assert consumer.calls[-2:] == [("assign", [tp0, tp1, TopicPartition("t", 2)]), ("seek", (tp1, 77))]
    source.pause([0])
    source.assign([1])  # a paused partition that is no longer owned is forgotten
    source.resume([0])
    assert consumer.calls[-1] == ("assign", [tp1])


def test_highwater_is_the_last_known_end_even_while_paused() -> None:
    consumer = FakeConsumer()
    consumer.highwater = lambda tp: {0: 120}.get(tp.partition)  # type: ignore[attr-defined]
    source = KafkaSource(consumer, "t", "t.dlq", FakeProducer([]))
    assert source.highwater(0) is None  # not assigned: nothing known yet
    source.assign([0, 1])
    assert source.highwater(0) == 120 and source.highwater(1) is None
    source.pause([0])
    consumer.highwater = lambda tp: None  # type: ignore[attr-defined]
    assert source.highwater(0) == 120


def test_source_translates_kafka_errors() -> None:
    consumer = FakeConsumer()
    consumer.fail = True
    with pytest.raises(BackendUnavailable):
        KafkaSource(consumer, "t", "t.dlq", FakeProducer([])).partitions()


def test_the_relay_consumer_asks_the_broker_to_wait_at_most_relay_fetch_max_wait_ms(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """kafka-python keeps one fetch in flight per broker, without the partitions whose records it
    still holds: the broker's wait on the idle others (Kafka's default, 500 ms) held every refill
    of a backlogged partition and ended every bench_relay run (docs/relay.md). The relay's
    consumer waits 100 ms unless configured, and bench_relay's raw consume uses the same."""
    made: list[dict[str, Any]] = []

    class Consumer:
        def __init__(self, **kw: Any) -> None:
            made.append(kw)

    monkeypatch.setattr("kafka.KafkaConsumer", Consumer)
    monkeypatch.delenv("SLUICE_RELAY_FETCH_MAX_WAIT_MS", raising=False)
    settings = Settings(kafka_bootstrap="b1:9092, b2:9092", kafka_consumer_group="g", relay_batch=300)
    KafkaSource.from_settings(settings)
    assert made == [consumer_config(settings)]
    assert made[0] | {"client_id": None} == {
        "bootstrap_servers": ["b1:9092", "b2:9092"], "client_id": None, "group_id": "g",
        "enable_auto_commit": False, "auto_offset_reset": "earliest", "max_poll_records": 300,
        "fetch_max_wait_ms": 100}

    monkeypatch.setenv("SLUICE_RELAY_FETCH_MAX_WAIT_MS", "250")
    assert consumer_config(Settings())["fetch_max_wait_ms"] == 250
    for bad in ("0", "10001", "soon"):
        monkeypatch.setenv("SLUICE_RELAY_FETCH_MAX_WAIT_MS", bad)
        with pytest.raises(ValidationError):
            Settings()


def test_dead_letters_carry_the_reason_and_failed_ones_are_resent() -> None:
    made: list[FakeProducer] = []

    def factory() -> FakeProducer:
        made.append(FakeProducer([False, True]))
        return made[-1]

    source = KafkaSource(FakeConsumer(), "t", "t.dlq", factory)
    source.flush_dead_letters()  # nothing sent: no producer is even created
    assert made == []
    source.dead_letter(SourceRecord(3, 17, b"k", b"\xff"), "undecodable: not UTF-8 JSON")
    source.dead_letter(SourceRecord(3, 18, None, None), "undecodable: empty value")
    producer = made[0]
    first = producer.sent[0]
    assert first["topic"] == "t.dlq" and first["key"] == b"k" and first["value"] == b"\xff"
    assert dict(first["headers"]) == {"sluice-reason": b"undecodable: not UTF-8 JSON",
                                      "sluice-source-topic": b"t", "sluice-source-partition": b"3",
                                      "sluice-source-offset": b"17"}
    assert producer.sent[1]["value"] == b""
    with pytest.raises(BackendUnavailable):
        source.flush_dead_letters()  # the first was not acknowledged: resent, not committed past
    assert len(producer.sent) == 3 and dict(producer.sent[2]["headers"])["sluice-source-offset"] == b"17"
    source.flush_dead_letters()
    assert producer.flushes == 2


# -- core.knobs --------------------------------------------------------------------------------------

class ConfigStub:
    def __init__(self) -> None:
        self.config = QueueConfig()

    def set_config(self, queue: str, **changes: Any) -> QueueConfig:
        self.config = self.config.model_copy(update=changes)
        return self.config

    def get_config(self, queue: str) -> QueueConfig:
        return self.config


def test_knobs_write_the_queue_config() -> None:
    engine = ConfigStub()
    assert control.set_rate(engine, "q", 200).burst == 200
    assert control.set_rate(engine, "q", 50.5, burst=5).rate_per_s == 50.5
    cfg = control.set_watermarks(engine, "q", 1000)
    assert (cfg.high_watermark, cfg.low_watermark) == (1000, 500)
    assert control.pause(engine, "q").paused
    assert not control.resume(engine, "q").paused
    assert control.set_max_in_flight(engine, "q", 8).max_in_flight == 8
    cfg = control.set_caps(engine, "q", max_delayed=500, max_dead=20)
    assert (cfg.max_delayed, cfg.max_dead) == (500, 20)
    assert control.set_caps(engine, "q", max_dead=0).max_delayed == 500  # only what was given


@pytest.mark.parametrize("call", [
    lambda e: control.set_rate(e, "q", -1),
    lambda e: control.set_rate(e, "q", float("nan")),
    lambda e: control.set_rate(e, "q", True),
    lambda e: control.set_rate(e, "q", "200"),
    lambda e: control.set_rate(e, "q", 10, burst=2.5),
    lambda e: control.set_rate(e, "q", 1e12),
    lambda e: control.set_watermarks(e, "q", 10, 20),
    lambda e: control.set_max_in_flight(e, "q", -3),
    lambda e: control.set_caps(e, "q", max_delayed=-1),
    lambda e: control.set_caps(e, "q", max_dead=1.5),
    lambda e: control.set_caps(e, "q"),
])
def test_bad_knob_values_are_refused_before_any_write(call: Any) -> None:
    engine = ConfigStub()
    with pytest.raises(InvalidInput):
        call(engine)
    assert engine.config == QueueConfig()


def test_the_scheduled_event_parses_and_anything_else_is_refused() -> None:
    event = json.loads((EVENTS / "scheduled_relay.json").read_text())
    parsed = relay_entry.parse_scheduled(event)
    assert parsed.detail_type == "Scheduled Event"
    assert parsed.resources[0].endswith("sluice-relay-every-minute")
    for bad in [{}, [], "x", None, {**event, "detail-type": "Object Created"}, {**event, "source": "me"}]:
        with pytest.raises(InvalidInput):
            relay_entry.parse_scheduled(bad)


def test_lambda_dispatcher_from_settings_builds_its_client_on_the_first_dispatch_only() -> None:
    # Cold start (issue 14): a relay pass that dispatches nothing never pays for a Lambda client.
    built: list[object] = []
    client = lambda_client()

    def build() -> object:
        built.append(client)
        return client

    dispatcher = LambdaDispatcher(None, "w", build_client=build)
    assert dispatcher.dispatch("q", 0, 10) == 0 and built == []
    with Stubber(client) as stub:
        stub.add_response("invoke", {"StatusCode": 202})
        stub.add_response("invoke", {"StatusCode": 202})
        assert dispatcher.dispatch("q", 1, 10) == 1
        assert dispatcher.dispatch("q", 1, 10) == 1
    assert built == [client]
    with pytest.raises(InvalidInput):
        LambdaDispatcher(None, "w")
