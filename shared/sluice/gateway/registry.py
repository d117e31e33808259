"""A 202 is binding (issue 28, item 3): the gateway reserves a queue before it accepts its first job.

The registry of queues has a limit (``SLUICE_MAX_QUEUES``) that two gateway containers must not
both see room in. So before the first job of a queue this container does not know yet is
accepted, the queue is reserved where the limit is decided, atomically: ``register.lua`` on the
registry's Redis cache (QueueNotAllowed, 403 ``QUEUE_NOT_ALLOWED``, when there is no room; nothing
is written to Kafka), then written through to the durable registry (DynamoDB's queues table). If
that write fails, the request fails (503, retryable) and the Redis reservation it made is harmless:
the retry finds it and writes through again. The relay then takes every minted, sealed record as
admitted: no limit refuses a job a gateway accepted, even after Redis lost the registry.

Each container remembers the queues it reserved, so a queue costs it one reservation (two round
trips), not one per request; a refusal is not remembered (a full registry may get room).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Protocol

from sluice.core.errors import BackendUnavailable, StoreError
from sluice.core.lazy import Lazy, resolve
from sluice.core.ports import ParkedState, QueueDirectory

MAX_KNOWN = 10_000  # queues a container remembers; past it, it starts over (random names cost nothing)


class RegistryCache(Protocol):
    """The registry's Redis cache (``sluice.backends.redis.connection.RedisConnection``)."""

    def register(self, queue: str) -> bool:
        """Reserve ``queue`` within the limit (QueueNotAllowed); True if new."""
        ...


class Reservations:
    """The queues this container reserved (``reserve`` is idempotent, and so is each step)."""

    def __init__(self, cache: RegistryCache | Lazy[RegistryCache],
                 durable: QueueDirectory | Lazy[QueueDirectory] | None = None) -> None:
        self._cache, self._durable = cache, durable
        self._known: set[str] = set()
        self._lock = threading.Lock()

    @property
    def durable(self) -> QueueDirectory | None:
        return None if self._durable is None else resolve(self._durable)

    def parked(self) -> dict[str, ParkedState] | None:
        """Every queue of the durable registry with its parking state (one scan); None without one."""
        durable = self.durable
        return None if durable is None else durable.parked()

    def parked_of(self, queue: str) -> ParkedState:
        durable = self.durable
        return ParkedState() if durable is None else durable.parked_of(queue)

    def sensitive_of(self, queue: str) -> tuple[str, ...]:
        """The durable copy of the queue's sensitive fields (``set_sensitive``); () without a registry."""
        durable = self.durable
        return () if durable is None else durable.sensitive_of(queue)

    def set_sensitive(self, queue: str, fields: Sequence[str]) -> None:
        durable = self.durable
        if durable is not None:
            durable.set_sensitive(queue, fields)

    def reserve(self, queue: str) -> None:
        """Raise unless ``queue`` is (now) in the registry, durably: QueueNotAllowed (403) for a
        new queue the registry has no room for (or off the allow-list); BackendUnavailable (503) when Redis
        or the durable registry cannot be written."""
        if queue in self._known:
            return
        durable = self.durable
        try:
            resolve(self._cache).register(queue)  # after a Redis loss: loads the cache from ``durable``
            if durable is not None:
                durable.put(queue)
        except StoreError as exc:  # DynamoDB refused: nothing was appended, so the caller may retry
            raise BackendUnavailable(f"queue {queue!r} was not reserved: the durable registry failed: {exc}",
                                     queue=queue) from exc
        with self._lock:
            if len(self._known) >= MAX_KNOWN:
                self._known.clear()
            self._known.add(queue)
