"""``RedisQueue``: the whole Redis lease engine as one object, for the callers that play every
role (the CLI, the chaos and local tooling, benchmarks, the engine's tests).

It holds no logic: each call goes to the facade of its role, all over one ``RedisConnection``:
``queue.RedisJobQueue`` (the worker's and the gateway's ``JobQueue``), ``relay_engine.
RedisRelayEngine`` (the relay's ``RelayEngine``), ``config.RedisQueueConfig`` and ``admin.
RedisAdmin``. A process that plays one role builds only its facade (``sluice.entry.root``).
The state machine, key layout and scripts are described in docs/engine.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import redis

from sluice.backends.redis.admin import RedisAdmin
from sluice.backends.redis.client import connect
from sluice.backends.redis.config import RedisQueueConfig
from sluice.backends.redis.connection import RedisConnection
from sluice.backends.redis.keys import QueueKeys
from sluice.backends.redis.queue import RedisJobQueue
from sluice.backends.redis.relay_engine import PushItem, RedisRelayEngine
from sluice.backends.redis.scripts import PushResult, Scripts
from sluice.core.config import Settings
from sluice.core.errors import SluiceError
from sluice.core.limits import Limits
from sluice.core.models import DeadJob, Extended, JobSpec, LeasedJob, QueueConfig, QueueStats, SettleEntry

__all__ = ["RedisQueue"]


class RedisQueue:
    """Every role of the engine over one redis client: a single node, or a cluster client whose
    scripts each touch one queue's keys, so one slot (the ``{queue}`` hash tag)."""

    def __init__(self, client: redis.Redis[Any], limits: Limits | None = None) -> None:
        self.conn = RedisConnection(client, limits)
        self.jobs = RedisJobQueue(self.conn)
        self.relay = RedisRelayEngine(self.conn)
        self.admin = RedisAdmin(self.conn)
        self.config = RedisQueueConfig(self.conn)

    @classmethod
    def from_url(cls, url: str, limits: Limits | None = None, **kwargs: Any) -> RedisQueue:
        """Over one node or a cluster (``RedisConnection.from_url``)."""
        return cls(connect(url, **kwargs), limits)

    @classmethod
    def from_settings(cls, settings: Settings) -> RedisQueue:
        conn = RedisConnection.from_settings(settings)  # its client, with the AUTH token if any
        return cls(conn.client, conn.limits)

    @property
    def client(self) -> redis.Redis[Any]:
        return self.conn.client

    @property
    def scripts(self) -> Scripts:
        return self.conn.scripts

    @property
    def limits(self) -> Limits:
        return self.conn.limits

    def close(self) -> None:
        self.conn.close()

    def keys(self, queue: str) -> QueueKeys:
        return self.conn.keys(queue)

    # --- the worker's and the gateway's queue (RedisJobQueue) ---------------------------------

    def enqueue(self, spec: JobSpec) -> bool:
        return self.jobs.enqueue(spec)

    def enqueue_many(self, specs: Sequence[JobSpec]) -> list[bool]:
        return self.jobs.enqueue_many(specs)

    def lease(self, queue: str, n: int, lease_ms: int | None = None, worker_id: str = "") -> list[LeasedJob]:
        return self.jobs.lease(queue, n, lease_ms, worker_id)

    def extend(self, queue: str, job_id: str, lease_token: int, lease_ms: int) -> Extended:
        return self.jobs.extend(queue, job_id, lease_token, lease_ms)

    def ack(self, queue: str, job_id: str, lease_token: int) -> None:
        self.jobs.ack(queue, job_id, lease_token)

    def ack_many(self, queue: str, jobs: Sequence[tuple[str, int]]) -> list[SluiceError | None]:
        return self.jobs.ack_many(queue, jobs)

    def fail(self, queue: str, job_id: str, lease_token: int, error: str,
             retry_after_ms: int | None = None, permanent: bool = False) -> str:
        return self.jobs.fail(queue, job_id, lease_token, error, retry_after_ms, permanent)

    def release(self, queue: str, job_id: str, lease_token: int) -> None:
        self.jobs.release(queue, job_id, lease_token)

    def cancel(self, queue: str, job_id: str, settle: bool = False) -> str:
        return self.jobs.cancel(queue, job_id, settle)

    def reap(self, queue: str, limit: int = 1000) -> int:
        return self.jobs.reap(queue, limit)

    def holds(self, queue: str, job_id: str) -> bool:
        return self.jobs.holds(queue, job_id)

    def idle(self, queue: str, worker_id: str, ms: int) -> int:
        return self.jobs.idle(queue, worker_id, ms)

    def wait_for_work(self, queue: str, timeout_ms: int) -> bool:
        return self.jobs.wait_for_work(queue, timeout_ms)

    # --- the relay's (RedisRelayEngine) ---------------------------------------------------------

    def push(self, queue: str, topic: str, partition: int, owner_token: int,
             records: Sequence[tuple[int, JobSpec]], gens: Mapping[str, int] | None = None) -> PushResult:
        return self.relay.push(queue, topic, partition, owner_token, records, gens)

    def push_many(self, topic: str, items: Sequence[PushItem],
                  gens: Mapping[str, int] | None = None) -> list[PushResult | SluiceError]:
        return self.relay.push_many(topic, items, gens)

    def relayed_offset(self, queue: str, topic: str, partition: int, owner_token: int) -> int:
        return self.relay.relayed_offset(queue, topic, partition, owner_token)

    def take_rate(self, queue: str, wanted: int) -> int:
        return self.relay.take_rate(queue, wanted)

    def register(self, queue: str) -> None:
        self.relay.register(queue)

    def enqueue_internal(self, spec: JobSpec) -> bool:
        return self.relay.enqueue_internal(spec)

    def enqueue_internal_many(self, specs: Sequence[JobSpec]) -> list[bool]:
        return self.relay.enqueue_internal_many(specs)

    def unsettled(self, queue: str, limit: int = 100) -> list[SettleEntry]:
        return self.relay.unsettled(queue, limit)

    def settled(self, queue: str, jobs: Sequence[SettleEntry]) -> int:
        return self.relay.settled(queue, jobs)

    def trim_dead(self, queue: str, keep: int, max_age_ms: int, limit: int = 1000) -> tuple[int, int]:
        return self.relay.trim_dead(queue, keep, max_age_ms, limit)

    # --- queue settings (RedisQueueConfig) ------------------------------------------------------

    def get_config(self, queue: str) -> QueueConfig:
        return self.config.get_config(queue)

    def set_config(self, queue: str, **changes: Any) -> QueueConfig:
        return self.config.set_config(queue, **changes)

    # --- the operator's (RedisAdmin) ------------------------------------------------------------

    def stats(self, queue: str) -> QueueStats:
        return self.admin.stats(queue)

    def overdue_leases(self, queue: str) -> int:
        return self.admin.overdue_leases(queue)

    def queues(self) -> list[str]:
        return self.admin.queues()

    def registry(self, queue: str) -> tuple[bool, int]:
        return self.admin.registry(queue)

    def memory_percent(self) -> float | None:
        return self.admin.memory_percent()

    def dead_letters(self, queue: str, limit: int = 100) -> list[DeadJob]:
        return self.admin.dead_letters(queue, limit)

    def dead_spec(self, queue: str, job_id: str) -> JobSpec:
        return self.admin.dead_spec(queue, job_id)

    def redrive(self, queue: str, job_id: str | None = None, generation: int = 0) -> int:
        return self.admin.redrive(queue, job_id, generation)

    def purge_dead(self, queue: str) -> int:
        return self.admin.purge_dead(queue)
