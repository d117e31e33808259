"""``KafkaJobLog``: the durable append behind the gateway's 202 (``ports.JobLog``).

Topic layout (docs/api.md): one topic (``Settings.kafka_topic``) for every queue,
``Settings.kafka_partitions`` partitions, record key = job id (UTF-8), record value =
``JobSpec.model_dump_json()`` (UTF-8), which carries ``schema_version`` so a relay can
dead-letter a record it does not understand. Keying by job id spreads load evenly and
keeps every record of one job on one partition.

The producer is idempotent (``enable_idempotence=True``, ``acks=all``): its own retries
cannot duplicate a record, and a record counts as written only once every in-sync
replica has it. ``append`` blocks until each record is acknowledged; any broker error or
timeout becomes ``BackendUnavailable`` and the producer is rebuilt on the next call
(an idempotent producer that gave up mid-sequence must not be reused).

One producer per process (a Lambda container keeps it across invocations); it is
created on first use so that a cold start never blocks on a broker it does not need.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sluice.backends.kafka.auth import client_config
from sluice.core.errors import BackendUnavailable, InvalidInput
from sluice.core.models import JobSpec

if TYPE_CHECKING:
    from sluice.core.config import Settings

log = logging.getLogger(__name__)


class KafkaJobLog:
    def __init__(self, client_options: dict[str, Any], topic: str, *, delivery_timeout_ms: int = 10_000,
                 request_timeout_ms: int = 5_000, max_block_ms: int = 5_000) -> None:
        self.topic = topic
        self.delivery_timeout_ms = delivery_timeout_ms
        self._options = {
            **client_options,
            "acks": "all",
            "enable_idempotence": True,
            "linger_ms": 0,  # each request waits for its own ack; batching would only add latency
            "delivery_timeout_ms": delivery_timeout_ms,
            "request_timeout_ms": request_timeout_ms,
            "max_block_ms": max_block_ms,
            "bootstrap_timeout_ms": max_block_ms,
        }
        self._producer: Any = None
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings) -> KafkaJobLog:
        return cls(client_config(settings), settings.kafka_topic)

    def _get(self) -> Any:
        with self._lock:
            if self._producer is None:
                from kafka import KafkaProducer
                from kafka.errors import KafkaError

                try:
                    self._producer = KafkaProducer(**self._options)
                except KafkaError as exc:
                    raise BackendUnavailable(f"kafka: cannot connect: {exc!r}") from exc
            return self._producer

    def _discard(self, producer: Any) -> None:
        with self._lock:
            if self._producer is producer:
                self._producer = None
        try:
            producer.close(timeout=0)
        except Exception as exc:  # closing a broken producer must not mask the real error
            log.debug("closing failed producer: %r", exc)

    def append(self, specs: Sequence[JobSpec]) -> None:
        """Returns only after every record is acknowledged by all in-sync replicas."""
        if not specs:
            return
        from kafka.errors import KafkaError, KafkaTimeoutError, MessageSizeTooLargeError

        producer = self._get()
        try:
            futures = [producer.send(self.topic, key=spec.job_id.encode("utf-8"),
                                     value=spec.model_dump_json().encode("utf-8")) for spec in specs]
            for future in futures:
                if future.get(timeout=self.delivery_timeout_ms / 1000 + 1).offset < 0:
                    # An acknowledgement without an offset is not proof the record is in the log:
                    # Tansu answers an idempotent retry this way after a crash, and the record is
                    # gone (found by the chaos suite; docs/break-it.md). Report the outcome unknown.
                    raise KafkaTimeoutError("a record was acknowledged without an offset")
        except MessageSizeTooLargeError as exc:
            raise InvalidInput(f"job record too large for the broker: {exc}") from exc
        except KafkaError as exc:
            self._discard(producer)
            raise BackendUnavailable(f"kafka did not acknowledge: {exc!r}") from exc

    def close(self) -> None:
        with self._lock:
            producer, self._producer = self._producer, None
        if producer is not None:
            producer.close(timeout=5)


def ensure_topics(settings: Settings) -> None:
    """Create the jobs topic and its dead-letter topic if missing (local stack and tests)."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import KafkaError, TopicAlreadyExistsError

    try:
        admin = KafkaAdminClient(**client_config(settings))
    except KafkaError as exc:
        raise BackendUnavailable(f"kafka admin: cannot connect: {exc!r}") from exc
    try:
        existing = set(admin.list_topics())
        wanted = [NewTopic(settings.kafka_topic, settings.kafka_partitions, 1),
                  NewTopic(settings.kafka_dead_letter_topic, 1, 1)]
        missing = [t for t in wanted if t.name not in existing]
        if missing:
            with contextlib.suppress(TopicAlreadyExistsError):  # another process raced us to it
                admin.create_topics(missing)
    except KafkaError as exc:
        raise BackendUnavailable(f"kafka admin: {exc!r}") from exc
    finally:
        admin.close()
