"""The knobs of a worker and of each registered handler."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sluice.errors import InvalidInput
from sluice.models import MAX_LEASE_MS, MIN_LEASE_MS, validate_queue_name
from sluice.policy import lease_plan

if TYPE_CHECKING:
    from sluice.config import Settings
    from sluice.models import Job
    from sluice.runtime.context import JobContext

Handler = Callable[["Job", "JobContext"], Any]


@dataclass(frozen=True, slots=True)
class WorkerOptions:
    """How a worker leases and runs jobs.

    ``lease_ms`` is what the worker asks the engine for; None (the Lambda default) takes
    each job's own lease, the ``lease_seconds`` its enqueuer chose. Heartbeats renew a
    job's lease every ``lease * heartbeat_fraction``. ``lease_batch`` is how many jobs one lease call
    takes; ``concurrency`` how many run at once (1 = one after another).
    ``margin_ms`` is the Lambda safety margin: a job is leased only if the time left
    covers its hard timeout plus this margin (writing, acking, releasing the rest).
    ``grant_margin_ms`` is the lease a job must have left to be granted its fencing token
    (``policy.grant_margin_ms``); with less, it is released without running.
    """

    lease_ms: int | None = 30_000
    heartbeat_fraction: float = 1 / 3
    lease_batch: int = 10
    concurrency: int = 1
    margin_ms: int = 2_000
    grant_margin_ms: int = 5_000
    settle_attempts: int = 3  # tries for a store/queue call that failed with BackendUnavailable
    budget_lease_ms: int = 30_000  # the lease assumed for hard timeouts when lease_ms is None
    retry_base_ms: int = 1_000  # backoff for a failed attempt: full jitter under base * 2**(n-1)
    retry_cap_ms: int = 15 * 60 * 1000

    def __post_init__(self) -> None:
        if self.lease_ms is not None and not MIN_LEASE_MS <= self.lease_ms <= MAX_LEASE_MS:
            raise InvalidInput(f"lease_ms must be in {MIN_LEASE_MS}..{MAX_LEASE_MS}")
        if not 0 < self.heartbeat_fraction < 1:
            raise InvalidInput("heartbeat_fraction must be in (0, 1)")
        if not 1 <= self.lease_batch <= 1000 or not 1 <= self.concurrency <= 64:
            raise InvalidInput("lease_batch must be in 1..1000 and concurrency in 1..64")
        if self.margin_ms < 0 or self.grant_margin_ms < 0 or self.settle_attempts < 1:
            raise InvalidInput("margin_ms and grant_margin_ms must be >= 0 and settle_attempts >= 1")
        if not 0 <= self.retry_base_ms <= self.retry_cap_ms:
            raise InvalidInput("retry_base_ms must be in 0..retry_cap_ms")

    @classmethod
    def from_settings(cls, s: Settings) -> WorkerOptions:
        return cls(lease_ms=None, heartbeat_fraction=s.heartbeat_fraction,
                   lease_batch=s.worker_batch, concurrency=s.worker_concurrency, margin_ms=s.lambda_margin_ms,
                   grant_margin_ms=s.grant_margin_ms,
                   budget_lease_ms=s.default_lease_seconds * 1000, retry_base_ms=s.retry_base_ms,
                   retry_cap_ms=s.retry_cap_ms)

    def default_timeout_ms(self) -> int:
        # Before leasing, a job's own lease is unknown: budget with the deployment default.
        plan = lease_plan(self.lease_ms or self.budget_lease_ms, heartbeat_fraction=self.heartbeat_fraction)
        return int(plan.hard_timeout_s * 1000)


@dataclass(frozen=True, slots=True)
class HandlerSpec:
    """One registered handler. ``timeout_ms`` None means the worker's default (10 leases)."""

    queue: str
    fn: Handler
    timeout_ms: int | None = None

    def __post_init__(self) -> None:
        validate_queue_name(self.queue)
        if not callable(self.fn):
            raise InvalidInput(f"handler for {self.queue!r} is not callable")
        if self.timeout_ms is not None and not 0 < self.timeout_ms < MAX_LEASE_MS:
            # The hard timeout must stay below the longest lease the engine will extend to.
            raise InvalidInput(f"timeout for {self.queue!r} must be in (0, {MAX_LEASE_MS // 1000}) seconds")

    def timeout_for(self, options: WorkerOptions) -> int:
        return self.timeout_ms if self.timeout_ms is not None else options.default_timeout_ms()


def timeout_ms_of(seconds: float | None) -> int | None:
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds) \
            or seconds <= 0:
        raise InvalidInput(f"timeout_s must be a positive number of seconds, got {seconds!r}")
    return max(1, int(seconds * 1000))
