"""Recovery's adapters: the Redis epoch, checkpoints in the jobs table, Kafka offsets.

- ``RedisEpochs``: the epoch is our random key ``sluice:epoch`` plus the server's
  replication id (``INFO replication`` ``master_replid``). A restart without
  persistence or a FLUSHALL loses the key; a failover promotes a replica whose
  replication id is new. Either way the epoch changes and relays replay. On a cluster,
  one such pair per primary (``recovery.shards``), and ``lost`` says which queues' shard changed.
- ``DynamoCheckpoints`` (in ``recovery.checkpoints``): one item per (topic,
  partition) in the jobs table, under a key that no job id can take (job ids start with a
  letter or digit; this starts with ``~``), plus pages for a long pending list.
- ``KafkaOffsets``: the committed offset and ``seek`` on the relay's own consumer.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import redis
from redis.crc import key_slot

from sluice.backends.redis.client import is_cluster
from sluice.backends.redis.keys import EPOCH_KEY, QueueKeys, shard_epoch_key
from sluice.backends.redis.scripts import REDIS_ERRORS, source, translate
from sluice.core.errors import BackendUnavailable, RedisTopologyError
from sluice.relay.recovery import shards


class RedisEpochs:
    """The epoch of one node, or of a cluster (one part per primary: ``recovery.shards``)."""

    def __init__(self, client: redis.Redis[Any]) -> None:
        self.client = client
        self._rebase: Any = None
        self._shards = _ShardEpochs(client) if is_cluster(client) else None

    @contextmanager
    def _translated(self) -> Iterator[None]:
        try:
            yield
        except REDIS_ERRORS as exc:
            raise translate(exc) from exc

    def peek(self) -> str | None:
        if self._shards is not None:
            return self._shards.peek()
        with self._translated():
            return _read_epoch(self.client, EPOCH_KEY)

    def current(self) -> str:
        if self._shards is not None:
            self._shards.create()
        else:
            with self._translated():
                self.client.set(EPOCH_KEY, uuid.uuid4().hex, nx=True)
        epoch = self.peek()
        if epoch is None:  # lost again between the two calls
            raise BackendUnavailable("the Redis epoch vanished while it was being created")
        return epoch

    def lost(self, old_epoch: str | None, epoch: str, queue: str) -> bool:
        """Whether ``queue``'s data may have been lost between ``old_epoch`` and ``epoch``: on one
        node, whenever they differ; on a cluster, only if the shard holding it changed."""
        if self._shards is None:
            return old_epoch != epoch
        return shards.shard_lost(old_epoch, epoch, key_slot(QueueKeys(queue).base.encode()))

    def rebase(self, queue: str, topic: str, partition: int, owner: int, offset: int) -> bool:
        if self._rebase is None:
            self._rebase = self.client.register_script(source("rebase.lua"))
        with self._translated():
            return bool(self._rebase(keys=[QueueKeys(queue).relayed(topic, partition)], args=[owner, offset]))


def _read_epoch(node: Any, key: str) -> str | None:
    """``<epoch key's value>/<replication id>`` of one node, in one round trip; None without the key."""
    pipe = node.pipeline(transaction=False)
    pipe.get(key)
    pipe.info("replication")
    value, info = pipe.execute()
    if value is None:
        return None
    value = value.decode() if isinstance(value, bytes) else str(value)
    return f"{value}/{info.get('master_replid', '?')}"


class _ShardEpochs:
    """Per primary of a cluster: its epoch key (in its own slots) and replication id, read on
    that node. One round trip per primary; the slot map is redis-py's, refreshed on a MOVED."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self._map: tuple[Any, dict[str, tuple[shards.Ranges, str]]] | None = None

    def _layout(self) -> dict[str, tuple[shards.Ranges, str]]:
        """primary name -> (its slot ranges, its epoch key), recomputed when redis-py's slot map changes."""
        cache = self.client.nodes_manager.slots_cache
        if self._map is None or self._map[0] is not cache:
            owners = [cache[slot][0].name if cache.get(slot) else "" for slot in range(shards.SLOTS)]
            if "" in owners:
                raise RedisTopologyError("the Redis cluster leaves hash slots unassigned")
            self._map = (cache, {name: (ranges, shard_epoch_key(shards.tag_in(ranges, key_slot)))
                                 for name, ranges in shards.ranges_of(owners).items()})
        return self._map[1]

    def _on_each(self, work: Any) -> list[Any]:
        out = []
        try:
            for name, (ranges, key) in self._layout().items():
                node = self.client.get_node(node_name=name)
                out.append((ranges, work(self.client.get_redis_connection(node), key)))
        except redis.exceptions.AskError as exc:  # MOVED too: the slots moved; read the map again
            self._refresh()
            raise BackendUnavailable(f"the Redis cluster's slot map changed ({exc}); try again") from exc
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            # A node down may be a failover: the next read must go to the new primary, and these
            # reads bypass the cluster client, which refreshes its map only on its own errors.
            self._refresh()
            raise translate(exc) from exc
        except REDIS_ERRORS as exc:
            raise translate(exc) from exc
        return out

    def _refresh(self) -> None:
        with suppress(*REDIS_ERRORS):  # the cluster may be unreachable for now: try on the next read
            self.client.nodes_manager.initialize()

    def peek(self) -> str | None:
        parts = self._on_each(_read_epoch)
        if any(ident is None for _, ident in parts):
            return None
        return shards.compose(parts)

    def create(self) -> None:
        self._on_each(lambda node, key: node.set(key, uuid.uuid4().hex, nx=True))


class KafkaOffsets:
    """Over ``sluice.backends.kafka.source.KafkaSource``'s consumer (its ``consumer`` attribute)."""

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
