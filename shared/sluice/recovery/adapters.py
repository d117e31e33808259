"""Recovery's adapters: the Redis epoch, checkpoints in the jobs table, Kafka offsets.

- ``RedisEpochs``: the epoch is our random key ``sluice:epoch`` plus the server's
  replication id (``INFO replication`` ``master_replid``). A restart without
  persistence or a FLUSHALL loses the key; a failover promotes a replica whose
  replication id is new. Either way the epoch changes and relays replay.
- ``DynamoCheckpoints`` (in ``recovery.checkpoints``): one item per (topic,
  partition) in the jobs table, under a key that no job id can take (job ids start with a
  letter or digit; this starts with ``~``), plus pages for a long pending list.
- ``KafkaOffsets``: the committed offset and ``seek`` on the relay's own consumer.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import redis

from sluice.errors import BackendUnavailable
from sluice.redis.keys import EPOCH_KEY, QueueKeys
from sluice.redis.scripts import REDIS_ERRORS, source, translate


class RedisEpochs:
    def __init__(self, client: redis.Redis[Any]) -> None:
        self.client = client
        self._rebase: Any = None

    @contextmanager
    def _translated(self) -> Iterator[None]:
        try:
            yield
        except REDIS_ERRORS as exc:
            raise translate(exc) from exc

    def peek(self) -> str | None:
        with self._translated():
            pipe = self.client.pipeline(transaction=False)
            pipe.get(EPOCH_KEY)
            pipe.info("replication")
            key, info = pipe.execute()
        if key is None:
            return None
        key = key.decode() if isinstance(key, bytes) else str(key)
        return f"{key}/{info.get('master_replid', '?')}"

    def current(self) -> str:
        with self._translated():
            self.client.set(EPOCH_KEY, uuid.uuid4().hex, nx=True)
        epoch = self.peek()
        if epoch is None:  # lost again between the two calls
            raise BackendUnavailable("the Redis epoch vanished while it was being created")
        return epoch

    def rebase(self, queue: str, topic: str, partition: int, owner: int, offset: int) -> bool:
        if self._rebase is None:
            self._rebase = self.client.register_script(source("rebase.lua"))
        with self._translated():
            return bool(self._rebase(keys=[QueueKeys(queue).relayed(topic, partition)], args=[owner, offset]))


class KafkaOffsets:
    """Over ``sluice.kafka.source.KafkaSource``'s consumer (its ``consumer`` attribute)."""

    def __init__(self, source: Any) -> None:
        self.source = source

    def _tp(self, partition: int) -> Any:
        from kafka import TopicPartition

        return TopicPartition(self.source.topic, partition)

    @contextmanager
    def _translated(self, what: str) -> Iterator[None]:
        from kafka.errors import KafkaError

        try:
            yield
        except (KafkaError, AssertionError) as exc:  # kafka-python asserts on unassigned partitions
            raise BackendUnavailable(f"kafka {what} failed: {exc!r}") from exc

    def committed(self, partition: int) -> int | None:
        with self._translated("committed"):
            value = self.source.consumer.committed(self._tp(partition))
        return None if value is None else int(value)

    def committed_many(self, partitions: Sequence[int]) -> dict[int, int | None]:
        """The committed offsets of ``partitions``: those the relay's rewind of this take-over
        just read (``KafkaSource.rewound``, used once), the rest in one OffsetFetch."""
        rewound: dict[int, int | None] = getattr(self.source, "rewound", {})
        out = {p: rewound.pop(p) for p in partitions if p in rewound}
        rest = [p for p in partitions if p not in out]
        if rest:
            with self._translated("committed"):
                out |= self.source.committed_offsets(rest)
        return out

    def seek(self, partition: int, offset: int) -> None:
        with self._translated("seek"):
            self.source.consumer.seek(self._tp(partition), offset)
