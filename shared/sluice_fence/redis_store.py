"""A fence's records in Redis: one string per key, advanced by one script (``fence.lua``).

The service's own Redis (or Sluice's: the keys are ``sluice-fence:*``, outside every queue's);
each call touches one key, so a Redis Cluster serves it as well. Without persistence a Redis that
restarts forgets its records, and a stale holder's call after that is let through once more:
give the fence a Redis with AOF (``appendfsync everysec`` loses at most a second), or use
DynamoDB (``dynamodb_store``), whose writes are durable before they answer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from sluice.core.errors import BackendUnavailable, InvalidInput
from sluice.core.fencing import validate_fence_token
from sluice_fence.verifier import Advance

PREFIX = "sluice-fence:"
DEFAULT_TTL_MS = 15 * 86_400_000  # a job's life bound (14 days) and a day: no holder calls later
SCRIPT = (Path(__file__).parent / "fence.lua").read_text()


class RedisFenceStore:
    """``FenceStore`` on a redis-py client (``redis.Redis`` or ``redis.RedisCluster``)."""

    def __init__(self, client: Any, *, ttl_ms: int = DEFAULT_TTL_MS) -> None:
        if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or not 0 < ttl_ms <= 31_536_000_000:
            raise InvalidInput(f"ttl_ms must be in 1..31536000000, got {ttl_ms!r}")
        self.client, self.ttl_ms = client, ttl_ms
        self._script = client.register_script(SCRIPT)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisFenceStore:
        import redis

        return cls(redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5), **options)

    def advance(self, key: str, token: int) -> Advance:
        import redis

        validate_fence_token(token)
        try:
            verdict, newest = self._script(keys=[PREFIX + key], args=[str(token), str(self.ttl_ms)])
        except redis.RedisError as exc:
            raise BackendUnavailable(f"fence store: {exc}") from exc
        word = verdict.decode() if isinstance(verdict, bytes) else str(verdict)
        return Advance(cast(Any, word), int(newest))
