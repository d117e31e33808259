"""Recovery's adapters: the Redis epoch, checkpoints in the jobs table, Kafka offsets.

- ``RedisEpochs``: the epoch is our random key ``sluice:epoch`` plus the server's
  replication id (``INFO replication`` ``master_replid``). A restart without
  persistence or a FLUSHALL loses the key; a failover promotes a replica whose
  replication id is new. Either way the epoch changes and relays replay.
- ``DynamoCheckpoints``: one item per (topic, partition) in the jobs table, under a key
  that no job id can take (job ids start with a letter or digit; this starts with ``~``).
- ``KafkaOffsets``: the committed offset and ``seek`` on the relay's own consumer.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import redis
from botocore.exceptions import BotoCoreError, ClientError

from sluice.errors import BackendUnavailable
from sluice.recovery.tracker import Checkpoint
from sluice.redis.keys import EPOCH_KEY, QueueKeys
from sluice.redis.scripts import source, translate
from sluice.store.errors import is_conditional_failure
from sluice.store.errors import translate as translate_aws

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

CHECKPOINT_KIND = "relay-checkpoint"


class RedisEpochs:
    def __init__(self, client: redis.Redis[Any]) -> None:
        self.client = client
        self._rebase: Any = None

    @contextmanager
    def _translated(self) -> Iterator[None]:
        try:
            yield
        except redis.exceptions.RedisError as exc:
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


def checkpoint_key(topic: str, partition: int) -> str:
    return f"~relay~{topic}~{int(partition)}"


class DynamoCheckpoints:
    def __init__(self, client: DynamoDBClient, table: str) -> None:
        self._db = client
        self.table = table

    def load(self, topic: str, partition: int) -> Checkpoint | None:
        try:
            item = self._db.get_item(TableName=self.table, ConsistentRead=True,
                                     Key={"job_id": {"S": checkpoint_key(topic, partition)}}).get("Item")
        except (BotoCoreError, ClientError) as exc:
            raise translate_aws(exc, "checkpoint load") from exc
        if not item:
            return None
        pending = json.loads(item["pending"]["S"])
        return Checkpoint(topic, partition, item["epoch"]["S"], int(item["generation"]["N"]),
                          int(item["low_water"]["N"]), int(item["high"]["N"]),
                          tuple((int(o), str(j)) for o, j in pending))

    def save(self, ckpt: Checkpoint, expect_epoch: str | None) -> bool:
        item = {"job_id": {"S": checkpoint_key(ckpt.topic, ckpt.partition)}, "kind": {"S": CHECKPOINT_KIND},
                "epoch": {"S": ckpt.epoch}, "generation": {"N": str(ckpt.generation)},
                "low_water": {"N": str(ckpt.low_water)}, "high": {"N": str(ckpt.high)},
                "pending": {"S": json.dumps([list(e) for e in ckpt.pending], separators=(",", ":"))},
                "updated_at_ms": {"N": str(time.time_ns() // 1_000_000)}}
        if expect_epoch is None:
            condition: dict[str, Any] = {"ConditionExpression": "attribute_not_exists(job_id)"}
        else:
            condition = {"ConditionExpression": "epoch = :e",
                         "ExpressionAttributeValues": {":e": {"S": expect_epoch}}}
        try:
            self._db.put_item(TableName=self.table, Item=item, **condition)
        except ClientError as exc:
            if is_conditional_failure(exc):
                return False
            raise translate_aws(exc, "checkpoint save") from exc
        except BotoCoreError as exc:
            raise translate_aws(exc, "checkpoint save") from exc
        return True


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

    def seek(self, partition: int, offset: int) -> None:
        with self._translated("seek"):
            self.source.consumer.seek(self._tp(partition), offset)
