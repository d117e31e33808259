"""``RedisCallerThrottle``: the ``sluice.core.ports.CallerThrottle`` port over Redis (issue 27, item 5).

One ``throttle.lua`` call per API request, on the caller's own key (``keys.caller_bucket``), so
every gateway container takes from one pair of buckets per caller. Errors come back translated
(``BackendUnavailable`` when Redis cannot be reached); the gateway decides what then
(``sluice.gateway.throttle``).
"""

from __future__ import annotations

from sluice.backends.redis import keys
from sluice.backends.redis.connection import RedisConnection
from sluice.core.throttle import CallerLimit, Verdict

MAX_SIZE = (1 << 40) - 1  # throttle.lua's bound; a body is at most 10 MiB anyway (API Gateway)


class RedisCallerThrottle:
    def __init__(self, conn: RedisConnection) -> None:
        self.conn = conn
        self._keys: dict[str, str] = {}  # identity -> key: the digest once per caller and container

    def take(self, identity: str, limit: CallerLimit, size: int) -> Verdict:
        key = self._keys.get(identity)
        if key is None:
            key = keys.caller_bucket(identity)
            if len(self._keys) < 10_000:
                self._keys[identity] = key
        reply = self.conn.scripts.throttle(key, limit.rate_per_s, limit.burst, limit.bytes_per_s,
                                           limit.byte_burst, min(max(0, size), MAX_SIZE))
        return Verdict(reply.allowed, reply.retry_after_ms)
