"""What one relay instance keeps in memory, and the constructor that sets it all up.

The relay's behaviour is split over mixins (``ownership``, ``control``, ``push``,
``loop``) that all work on the state built here. Keeping every attribute in one
``__init__`` means each mixin's reads are typed, and there is one place to see
what a relay remembers between steps.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from sluice import policy
from sluice.ids import Verifier
from sluice.limits import Limits
from sluice.models import JobSpec, QueueConfig
from sluice.ports import Dispatcher, JobStore, Metrics
from sluice.relay.ports import PushOutcome, RecordSource, RelayEngine, SystemClock, _NoMetrics
from sluice.relay.status import StatusWriter


@dataclass
class RelayReport:
    pushed: int = 0
    skipped: int = 0  # already in Redis: at or below the recorded offset, or the job hash exists
    reread: int = 0  # of those, skipped by the recorded offset before the push (no rate token spent)
    final_dropped: int = 0  # the store said the job is already final (cancelled, done)
    dead_lettered: int = 0
    stale_stops: int = 0  # pushes refused because a newer owner pushed
    partitions_lost: int = 0  # stale stops plus leases lost or expired
    dispatched: int = 0
    reaped: int = 0
    trimmed: int = 0  # old dead jobs deleted from Redis (their endings stay in the jobs table)
    refused: int = 0  # records of a queue the registry refused, sent to the dead-letter topic
    settled: int = 0  # endings Redis made alone (last-attempt expiry, cancelled lease) written to the store
    bad_ownership_jobs: int = 0  # jobs in the ownership queue that were not a partition's own: removed
    unexpected_errors: int = 0  # non-Sluice errors a step met (logged, counted; the relay went on)
    loops: int = 0
    errors: int = 0
    lag: int | None = None  # records in Kafka not yet in Redis, worst owned partition, last measured
    partitions_owned: set[int] = field(default_factory=set)

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "partitions_owned"}
        return out | {"partitions_owned": sorted(self.partitions_owned)}

    def publish(self, metrics: Metrics) -> None:
        """Once per invocation: per-step counts would be one log line each in EMF."""
        for name in ("pushed", "skipped", "reread", "final_dropped", "dead_lettered", "dispatched", "reaped",
                     "settled", "trimmed", "refused"):
            metrics.count("Relay" + name.title().replace("_", ""), getattr(self, name))


@dataclass
class _Owned:
    number: int
    job_id: str
    token: int
    leased_at: float  # monotonic
    pending: dict[str, deque[tuple[int, JobSpec]]] = field(default_factory=dict)
    pending_count: int = 0
    next_offset: int | None = None  # one past the last record taken from the source
    committed: int | None = None
    fetch_paused: bool = False
    dead_since_commit: bool = False
    # per queue: push.lua's recorded offset for this partition, read once per session; records at
    # or below it are in Redis already (a re-read after a restart) and are skipped before they
    # cost a rate token, a finality read or a status write
    relayed: dict[str, int] = field(default_factory=dict)

    def commit_point(self) -> int | None:
        heads = [q[0][0] for q in self.pending.values() if q]
        return min(heads) if heads else self.next_offset


@dataclass
class _QueueState:
    config: QueueConfig = field(default_factory=QueueConfig)
    ready: int = 0
    leased: int = 0
    delayed: int = 0  # since the last refresh, plus the delayed jobs pushed since (sluice.limits)
    dead: int = 0
    refreshed_at: float = float("-inf")
    watermark_paused: bool = False
    pushed_since_refresh: int = 0
    pushed_since_dispatch: int = 0
    dispatched_at: float = float("-inf")

    dead_full: bool = False  # at its dead cap: held back in Kafka (sluice.limits)

    @property
    def ready_estimate(self) -> int:
        return self.ready + self.pushed_since_refresh

    @property
    def blocked(self) -> bool:
        return self.config.paused or self.watermark_paused or self.dead_full


_Item = tuple[_Owned, str, list[tuple[int, JobSpec]]]  # a partition's next records for one queue

AfterPush = Callable[[int, str, PushOutcome], None]


class _RelayState:
    """The relay's constructor and state; ``sluice.relay.Relay`` adds the behaviour."""

    def __init__(self, engine: RelayEngine, store: JobStore, source: RecordSource,
                 dispatcher: Dispatcher | None = None, *, relay_id: str,
                 clock: Any = None, metrics: Metrics | None = None,
                 batch: int = 500, poll_ms: int = 200, lease_ms: int = 15_000,
                 max_partitions: int = 1_000, max_pending: int = 5_000,
                 refresh_s: float = 0.5, ownership_s: float = 1.0, maintenance_s: float = 5.0,
                 dispatch_interval_s: float = 1.0, worker_batch: int = 10, reap_limit: int = 500,
                 commit_s: float = 0.2, status_drain_s: float = 2.0,
                 default_rate_per_s: float = 0.0, default_burst: int = 0,
                 partition_groups: int = 1, share_grace_s: float = 10.0, lag_every_s: float = 30.0,
                 config_writer: Any = None, highwater: Callable[[int], int | None] | None = None,
                 after_push: AfterPush | None = None, limits: Limits | None = None,
                 job_ids: Verifier | None = None,
                 dispatch_per_s: float = 0.0, dispatch_burst: int = 0) -> None:
        """``config_writer`` (default: the engine) writes default rates; ``highwater`` (default:
        the source's) gives a partition's end offset for the ``RelayLag`` metric. Both are
        optional so that wrapped engines and sources need not pass them through. ``job_ids``
        (the job id keys) makes every record prove a gateway of this deployment minted its id;
        a record that cannot goes to the dead-letter topic. None trusts every record (harnesses
        that name jobs themselves). ``dispatch_per_s`` and ``dispatch_burst`` bound the worker
        invocations this relay starts across all queues (0: no budget beyond the per-queue cap)."""
        self.engine, self.store, self.source, self.dispatcher = engine, store, source, dispatcher
        self.topic = source.topic
        self.relay_id = relay_id
        self.clock = clock or SystemClock()
        self.metrics: Metrics = metrics or _NoMetrics()
        self.batch, self.poll_ms, self.lease_ms = batch, poll_ms, lease_ms
        self.max_partitions, self.max_pending = max_partitions, max_pending
        self.refresh_s, self.ownership_s, self.maintenance_s = refresh_s, ownership_s, maintenance_s
        self.dispatch_interval_s, self.worker_batch = dispatch_interval_s, worker_batch
        self.reap_limit = reap_limit
        self.after_push = after_push
        # Caps, dead-job trimming and the memory guard (sluice.limits); the engine, if it can,
        # answers the registry and memory questions (wrapped or fake engines may not).
        self.limits = limits or Limits()
        self._register_queue = getattr(engine, "register", None)
        self._trim_dead = getattr(engine, "trim_dead", None)
        self._memory_percent = getattr(engine, "memory_percent", None)
        self._admitted: set[str] = set()
        self._refused: dict[str, tuple[float, str]] = {}  # queue -> (until, why)
        self._memory: float | None = None
        self._next_memory = float("-inf")
        self.job_ids = job_ids
        self.dispatch_per_s, self.dispatch_burst = dispatch_per_s, dispatch_burst
        self._dispatch_bucket = policy.Bucket(tokens=float(max(1, dispatch_burst)), updated_ms=0)
        self._dispatch_turn = 0
        self.status_drain_s = status_drain_s
        self.commit_s = commit_s
        self.default_rate_per_s, self.default_burst = default_rate_per_s, default_burst
        self._defaulted: set[str] = set()
        self.partition_groups, self.share_grace_s = partition_groups, share_grace_s
        self.lag_every_s = lag_every_s
        self._set_config = getattr(config_writer or engine, "set_config", None)
        self._highwater = highwater or getattr(source, "highwater", None)
        self._started = self.clock.monotonic()
        self._next_lag = self._started + lag_every_s
        self.report = RelayReport()
        self._owned: dict[int, _Owned] = {}
        self._queues: dict[str, _QueueState] = {}
        self._registered: set[int] = set()
        self._next_ownership = float("-inf")
        self._next_maintenance = float("-inf")
        self._rotation = 0
        self._throttled = False
        self._status = StatusWriter(store, self.metrics)
        self._executor: ThreadPoolExecutor | None = None
        self._last_commit = float("-inf")
