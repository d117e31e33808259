"""The relay's Kafka adapter: the job topic by manual assignment, and the dead-letter producer.

Partitions are assigned by hand (``assign``), never by consumer-group membership:
ownership comes from the relay's leases in our own engine, and a group join costs
seconds on every Lambda start (about 23 s on Tansu with default settings). Offsets are
still committed under the consumer group id, which works without joining the group,
so ``kafka-consumer-groups`` and lag alarms see how far the relay has got.

kafka-python errors become ``BackendUnavailable`` here; nothing above sees them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from itertools import repeat
from operator import attrgetter
from typing import Any

from sluice.backends.kafka.auth import client_config
from sluice.core.config import Settings
from sluice.core.errors import BackendUnavailable
from sluice.core.ports import SourceRecord

log = logging.getLogger(__name__)

DLQ_FLUSH_TIMEOUT_S = 10.0
POSITION_TIMEOUT_MS = 5_000  # a take-over's position read (parking); None after it: no bound

# A SourceRecord per Kafka record, built without a Python frame per record: the fields read in C
# (attrgetter), the tuple made by tuple.__new__ (a NamedTuple's own __new__ is a Python function).
_record_fields = attrgetter("partition", "offset", "key", "value")
_new = tuple.__new__


@contextmanager
def _translated(what: str) -> Iterator[None]:
    from kafka.errors import KafkaError

    try:
        yield
    except KafkaError as exc:
        raise BackendUnavailable(f"kafka {what} failed: {exc!r}") from exc


def consumer_config(settings: Settings, client: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The relay's KafkaConsumer arguments (``client``: ``client_config(settings)``, if built).
    bench_relay's raw consume uses them too, so that it measures the same fetches."""
    return {**(client_config(settings) if client is None else client),
            "group_id": settings.kafka_consumer_group, "enable_auto_commit": False,
            "auto_offset_reset": "earliest", "max_poll_records": settings.relay_batch,
            "fetch_max_wait_ms": settings.relay_fetch_max_wait_ms}


def _partition_of(tp: Any) -> int:
    return int(tp.partition)


class KafkaSource:
    """Implements ``sluice.relay.RecordSource`` over a kafka-python consumer and producer."""

    def __init__(self, consumer: Any, topic: str, dead_letter_topic: str,
                 producer: Any | Callable[[], Any]) -> None:
        """``producer`` may be a factory: most invocations never dead-letter anything."""
        self.consumer = consumer
        self._topic = topic
        self.dead_letter_topic = dead_letter_topic
        self._producer: Any | None = None if callable(producer) else producer
        self._make_producer: Callable[[], Any] | None = producer if callable(producer) else None
        self._unacked: list[tuple[SourceRecord, str, Any]] = []
        self._wanted: list[int] = []  # what the relay owns
        self._paused: dict[int, int | None] = {}  # owned but not fetched: position to resume at
        self._highwaters: dict[int, int] = {}  # last known, so a paused partition still has one
        self.rewound: dict[int, int | None] = {}  # the committed offsets the last rewind read

    @classmethod
    def from_settings(cls, settings: Settings) -> KafkaSource:
        from kafka import KafkaConsumer, KafkaProducer

        cfg = client_config(settings)
        with _translated("connect"):
            consumer = KafkaConsumer(**consumer_config(settings, cfg))

        def producer() -> Any:
            with _translated("connect"):
                return KafkaProducer(acks="all", linger_ms=5, max_block_ms=10_000, **cfg)

        return cls(consumer, settings.kafka_topic, settings.kafka_dead_letter_topic, producer)

    @property
    def topic(self) -> str:
        return self._topic

    def _tp(self, partition: int) -> Any:
        from kafka import TopicPartition

        return TopicPartition(self._topic, partition)

    def partitions(self) -> list[int]:
        with _translated("metadata"):
            found = self.consumer.partitions_for_topic(self._topic)
        return sorted(found or ())

    def assign(self, partitions: Sequence[int]) -> None:
        self._wanted = list(partitions)
        self._paused = {p: pos for p, pos in self._paused.items() if p in self._wanted}
        self._apply_assignment()

    def _apply_assignment(self) -> None:
        with _translated("assign"):
            self.consumer.assign([self._tp(p) for p in self._wanted if p not in self._paused])

    def rewind_to_committed(self, partitions: Sequence[int]) -> None:
        """Seek each partition to its committed offset (the log start if none), keeping the
        offsets it read as ``rewound`` for recovery's plan of the same take-over."""
        # Explicit: a consumer reused across Lambda invocations may hold a stale position.
        committed = self.committed_offsets(partitions)
        with _translated("seek"):
            for p, offset in committed.items():
                if offset is None:
                    self.consumer.seek_to_beginning(self._tp(p))
                else:
                    self.consumer.seek(self._tp(p), offset)
        self.rewound = committed

    def committed_offsets(self, partitions: Sequence[int]) -> dict[int, int | None]:
        """The group's committed offset per partition (None: none yet), in ONE OffsetFetch: the
        consumer's public ``committed`` asks once per partition, a round trip each (cold start)."""
        tps = {p: self._tp(p) for p in partitions}
        fetch = getattr(getattr(self.consumer, "_coordinator", None), "fetch_committed_offsets", None)
        with _translated("committed"):
            if fetch is None:  # not kafka-python's KafkaConsumer
                return {p: self.consumer.committed(tp) for p, tp in tps.items()}
            found = fetch(list(tps.values()))  # what committed() reads too: {tp: OffsetAndMetadata}
        return {p: int(found[tp].offset) if tp in found else None for p, tp in tps.items()}

    def poll(self, timeout_ms: int, max_records: int) -> list[SourceRecord]:
        with _translated("poll"):
            batches = self.consumer.poll(timeout_ms=timeout_ms, max_records=max_records)
        out: list[SourceRecord] = []
        for tp in sorted(batches, key=_partition_of) if len(batches) > 1 else batches:
            out.extend(map(_new, repeat(SourceRecord), map(_record_fields, batches[tp])))
        return out

    def highwater(self, partition: int) -> int | None:
        """The partition's end offset as of the last fetch (None before one); for the lag metric."""
        tp = self._tp(partition)
        if partition in self._wanted and partition not in self._paused:
            with _translated("highwater"):
                found = self.consumer.highwater(tp)
            if found is not None:
                self._highwaters[partition] = int(found)
        return self._highwaters.get(partition)

    def position(self, partition: int) -> int | None:
        """The offset the partition's next poll starts at (None: not known, or not owned)."""
        if partition in self._paused:
            return self._paused[partition]
        if partition not in self._wanted:
            return None
        with _translated("position"):
            found = self.consumer.position(self._tp(partition), timeout_ms=POSITION_TIMEOUT_MS)
        return None if found is None else int(found)

    # Pausing takes the partition out of the assignment and resuming seeks it back in.
    # kafka-python's own pause()/resume() can strand a partition for good: records it
    # parks for a paused partition are restored only when no other partition's (even
    # exhausted) buffer is in line, so after resume() that partition is never fetched again.

    def pause(self, partitions: Sequence[int]) -> None:
        with _translated("pause"):
            for p in partitions:
                if p in self._wanted and p not in self._paused:
                    self._paused[p] = self.consumer.position(self._tp(p))
        self._apply_assignment()

    def resume(self, partitions: Sequence[int]) -> None:
        positions = {p: self._paused.pop(p) for p in partitions if p in self._paused}
        self._apply_assignment()
        with _translated("resume"):
            for p, position in positions.items():
                if position is not None:
                    self.consumer.seek(self._tp(p), position)

    def commit(self, offsets: Mapping[int, int]) -> None:
        from kafka.structs import OffsetAndMetadata

        with _translated("commit"):
            self.consumer.commit({self._tp(p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()})

    # -- dead letters ---------------------------------------------------------------------------------

    def _dlq_producer(self) -> Any:
        if self._producer is None:
            assert self._make_producer is not None
            self._producer = self._make_producer()
        return self._producer

    def dead_letter(self, record: SourceRecord, reason: str) -> None:
        """Send the record as it was, with why and where from in its headers (acked at flush)."""
        headers = [
            ("sluice-reason", reason.encode("utf-8", "replace")),
            ("sluice-source-topic", self._topic.encode()),
            ("sluice-source-partition", str(record.partition).encode()),
            ("sluice-source-offset", str(record.offset).encode()),
        ]
        with _translated("dead-letter send"):
            future = self._dlq_producer().send(self.dead_letter_topic, key=record.key,
                                               value=record.value if record.value is not None else b"",
                                               headers=headers)
        self._unacked.append((record, reason, future))

    def flush_dead_letters(self) -> None:
        """Wait for every dead letter; resend failures and raise, so nothing is committed past them."""
        if not self._unacked:
            return
        with _translated("dead-letter flush"):
            self._dlq_producer().flush(timeout=DLQ_FLUSH_TIMEOUT_S)
        failed = [(record, reason) for record, reason, future in self._unacked if not future.succeeded()]
        self._unacked = []
        for record, reason in failed:
            self.dead_letter(record, reason)
        if failed:
            raise BackendUnavailable(f"{len(failed)} dead letters were not acknowledged; resent")

    def close(self) -> None:
        with _translated("close"):
            self.consumer.close(autocommit=False)
            if self._producer is not None:
                self._producer.close(timeout=DLQ_FLUSH_TIMEOUT_S)
