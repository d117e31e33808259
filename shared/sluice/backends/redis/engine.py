"""``RedisQueue``: the whole Redis lease engine as one object, for the callers that play every
role (the CLI, the chaos and local tooling, benchmarks, the engine's tests).

It holds no logic: it is both role facades over one ``RedisConnection``, ``queue.RedisJobQueue``
(the worker's and the gateway's ``JobQueue``, with the operator's reads and the queue settings of
``admin.RedisAdmin`` and ``config.RedisQueueConfig``) and ``relay_engine.RedisRelayEngine`` (the
relay's ``RelayEngine``), so each call is the facade's own. A process that plays one role builds
only its facade (``sluice.entry.root``).
The state machine, key layout and scripts are described in docs/engine.md.
"""

from __future__ import annotations

from typing import Any

import redis

from sluice.backends.redis.client import connect
from sluice.backends.redis.connection import RedisConnection
from sluice.backends.redis.keys import QueueKeys
from sluice.backends.redis.queue import RedisJobQueue
from sluice.backends.redis.relay_engine import RedisRelayEngine
from sluice.backends.redis.scripts import Scripts
from sluice.core.config import Settings
from sluice.core.limits import Limits

__all__ = ["RedisQueue"]


class RedisQueue(RedisJobQueue, RedisRelayEngine):
    """Every role of the engine over one redis client: a single node, or a cluster client whose
    scripts each touch one queue's keys, so one slot (the ``{queue}`` hash tag). A call both
    facades answer (lease, ack, stats, ...) is the queue's, to which the relay's passes it anyway."""

    def __init__(self, client: redis.Redis[Any], limits: Limits | None = None) -> None:
        RedisRelayEngine.__init__(self, RedisConnection(client, limits))

    @classmethod
    def from_url(cls, url: str, limits: Limits | None = None, **kwargs: Any) -> RedisQueue:
        """Over one node or a cluster (``RedisConnection.from_url``)."""
        return cls(connect(url, **kwargs), limits)

    @classmethod
    def from_settings(cls, settings: Settings) -> RedisQueue:
        conn = RedisConnection.from_settings(settings)  # its client, with the AUTH token if any
        return cls(conn.client, conn.limits)

    @property
    def scripts(self) -> Scripts:
        return self.conn.scripts

    @property
    def limits(self) -> Limits:
        return self.conn.limits

    def keys(self, queue: str) -> QueueKeys:
        return self.conn.keys(queue)
