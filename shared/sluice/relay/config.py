"""The relay's knobs, parsed once: one frozen ``RelayConfig`` that every relay part reads.

Built from Settings by ``RelayConfig.from_settings`` (the Lambda) or directly (tests,
benchmarks, the chaos run); a part never takes its knobs one keyword at a time.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sluice.core.limits import Limits

if TYPE_CHECKING:
    from sluice.core.config import Settings


@dataclass(frozen=True, slots=True)
class RelayConfig:
    batch: int = 500  # records per (partition, queue) per push; a poll takes up to twice this
    poll_ms: int = 200
    lease_ms: int = 15_000  # partition ownership lease
    max_partitions: int = 1_000
    max_pending: int = 5_000  # records buffered per partition before its fetching pauses
    # Parking (relay/parking.py): a held queue's records buffered in a partition beyond this are
    # parked (0: twice ``batch``); a page read back from the lot holds up to ``batch`` records.
    park_threshold: int = 0
    # ... and a record due more than this after it is taken goes to its queue's delay lane (0: none)
    delay_horizon_ms: int = 900_000
    # ... and the lot's calls run on this many threads, off the step (0: in the step; relay/lot_calls.py)
    park_threads: int = 8
    # ... each park call taking at most this many of a lane's records (short calls: a relay that
    # stops waits for the calls in flight only briefly)
    park_call_max: int = 500
    # ... and a lane has up to this many park calls in flight at once (a held queue's flood is written
    # as it comes, not one call at a time behind the buffer: the others' records wait behind it in Kafka)
    park_calls: int = 4
    refresh_s: float = 0.5  # how often a queue's config and depth are re-read from Redis
    # ... and a queue whose new jobs were left to workers waiting for work: if those have just
    # left (their linger over), its jobs get workers within this, not at the next maintenance
    recount_s: float = 0.05
    ownership_s: float = 1.0  # how often free partitions are looked for
    # ... and by a relay that owns none: the next scheduled invocation, started while the
    # outgoing one still runs, takes the partitions over within this of their release
    takeover_s: float = 0.1
    maintenance_s: float = 5.0  # reap, settle, trim, dispatch for idle backlogs
    dispatch_interval_s: float = 1.0
    worker_batch: int = 10
    reap_limit: int = 500
    commit_s: float = 0.2  # at most one Kafka commit per this
    status_drain_s: float = 2.0  # how long ``stop`` waits for queued status writes
    status_max_waiting: int = 1_000  # status writes waiting beyond this: the oldest are dropped
    status_max_per_s: float = 100.0  # status writes a second at most (0: no limit); relay/status.py
    default_rate_per_s: float = 0.0  # written to Redis for a queue nobody configured
    default_burst: int = 0
    partition_groups: int = 1  # relays started at once; each takes its share first
    share_grace_s: float = 10.0
    lag_every_s: float = 30.0
    # the worker invocations this relay starts per second across all queues (0: no budget
    # beyond the per-queue cap), and its burst
    dispatch_per_s: float = 0.0
    dispatch_burst: int = 0
    limits: Limits = field(default_factory=Limits)

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> RelayConfig:
        base = cls(batch=settings.relay_batch, poll_ms=settings.relay_poll_ms,
                   worker_batch=settings.worker_batch, default_rate_per_s=settings.default_rate_per_s,
                   default_burst=settings.default_burst, partition_groups=settings.relay_partition_groups,
                   limits=Limits.from_settings(settings), dispatch_per_s=settings.dispatch_budget_per_s,
                   dispatch_burst=settings.dispatch_budget_burst, max_pending=settings.relay_max_pending,
                   park_threshold=settings.relay_park_threshold,
                   delay_horizon_ms=settings.relay_delay_horizon_s * 1000)
        return base.replace(**overrides)

    @property
    def park_above(self) -> int:
        """Records of a held queue a partition keeps buffered; the rest are parked. At most a quarter
        of ``max_pending``: a held queue that kept more than the partition's buffer holds (a small
        buffer beside the default batch: 500 records against twice 500) would fill it, and the
        partition's fetching would pause for every queue, as before parking."""
        return max(1, min(self.park_threshold or 2 * self.batch, self.max_pending // 4))

    @property
    def parking_max(self) -> int:
        """Records of a partition in park calls in flight at most (relay/parking.py): as many as its
        buffer holds, or one full call. They are out of the buffer's count (its fetching goes on
        while they are written), so a partition holds at most about twice ``max_pending``."""
        return max(self.max_pending, self.park_call_max)

    def replace(self, **changes: Any) -> RelayConfig:
        return dataclasses.replace(self, **changes)
