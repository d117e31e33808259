"""``RedisTimeline``: the ``sluice.core.ports.TimelineLog`` port, a job's timeline in Redis
(``keys.QueueKeys.timeline``, written by ``timeline.lua``, read with one LRANGE)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sluice.backends.redis.connection import RedisConnection
from sluice.core import read_bounds, timeline
from sluice.core.models import validate_job_id


class RedisTimeline:
    def __init__(self, conn: RedisConnection, ttl_ms: int, cap: int = timeline.CAP) -> None:
        self.conn, self.ttl_ms, self.cap = conn, ttl_ms, cap

    def append(self, queue: str, job_id: str, entries: Sequence[str]) -> None:
        """Up to 16 steps in one call (a worker flushes what it buffered)."""
        for i in range(0, len(entries), 16):
            self.conn.scripts.timeline(self.conn.keys(queue), validate_job_id(job_id), self.cap, self.ttl_ms,
                                       entries[i:i + 16])

    def read(self, queue: str, job_id: str) -> list[dict[str, Any]]:
        """The job's steps, oldest first (as appended); [] when it has none (never recorded, or expired).
        Only the last ``cap`` are read: what timeline.lua keeps, and all a list a team's Redis user
        filled by hand (its own queue's key) costs the operator function and Redis; and only when the
        whole list is no larger than Sluice writes it (``read_bounds``): longer entries were written by
        hand, and reading them out of the shared Redis is refused (InvalidInput)."""
        key = self.conn.keys(queue).timeline(validate_job_id(job_id))
        raw = self.conn.list_tail(key, self.cap, read_bounds.TIMELINE_MAX_BYTES, f"job {job_id}'s timeline")
        return [step for step in map(timeline.decode, raw) if step is not None]
