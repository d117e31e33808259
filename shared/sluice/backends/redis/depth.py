"""``RedisDepthLog``: the ``sluice.core.ports.DepthLog`` port, a queue's last hour of depth samples in
Redis (``keys.QueueKeys.depth``, appended by ``sample.lua`` with the waits ``lease.lua`` counted in
``keys.QueueKeys.waits``; read with one LRANGE, after its size: ``RedisConnection.list_tail``)."""

from __future__ import annotations

from sluice.backends.redis.connection import RedisConnection
from sluice.core import depth, read_bounds
from sluice.core.clock import wall_ms
from sluice.core.models import validate_public_queue


class RedisDepthLog:
    def __init__(self, conn: RedisConnection, gap_s: float = depth.SAMPLE_EVERY_S) -> None:
        self.conn, self.gap_ms = conn, max(0, int(gap_s * 1000) - 500)  # a relay's round may come a bit early

    def record(self, queue: str, ready: int, delayed: int, leased: int, dead: int) -> bool:
        """One sample; False when another relay's is younger than the gap (nothing written)."""
        k = self.conn.keys(validate_public_queue(queue))
        return self.conn.scripts.sample(k, [max(0, int(n)) for n in (ready, delayed, leased, dead)],
                                        depth.SAMPLES_KEPT, depth.SAMPLES_TTL_MS, self.gap_ms)

    def read(self, queue: str) -> depth.DepthHistory:
        """The last hour (by this process's clock; the samples carry Redis's: a skew of seconds
        moves the hour's edge by as much)."""
        k = self.conn.keys(validate_public_queue(queue))
        # The last SAMPLES_KEPT (what sample.lua keeps), and only from a list no larger than sample.lua
        # writes it (read_bounds): all a list filled by hand costs.
        stored = self.conn.list_tail(k.depth, depth.SAMPLES_KEPT, read_bounds.DEPTH_MAX_BYTES,
                                     f"queue {k.queue}'s depth samples")
        return depth.history(k.queue, stored, wall_ms())
