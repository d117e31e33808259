"""The knobs of a worker and of each registered handler."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sluice.core.errors import HandlerDoesNotFit, InvalidInput
from sluice.core.models import MAX_LEASE_MS, MIN_LEASE_MS, validate_queue_name
from sluice.core.policy import RetryPolicy, default_job_timeout_ms, invocation_budget_ms
from sluice.worker.runtime.typed import check_model, parse_payload

if TYPE_CHECKING:
    from pydantic import BaseModel

    from sluice.core.config import Settings
    from sluice.core.models import Job
    from sluice.worker.runtime.context import JobContext

Handler = Callable[["Job", "JobContext"], Any]
# A Handler, or one registered with ``model=``, which takes the validated payload instead of the Job.
AnyHandler = Callable[[Any, "JobContext"], Any]


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
    ``invocation_budget_ms`` is the longest hard timeout an invocation of the worker function
    can lease (``policy.invocation_budget_ms``); None means no deadline (a worker process).
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
    invocation_budget_ms: int | None = None
    progress_every_ms: int = 1_000  # ctx.progress writes at most once per this per job
    # Once its one queue is empty, how long a drain waits for a push to wake it before it
    # returns (0: it returns at once, and ``batch`` bounds the whole drain).
    linger_ms: int = 0

    def __post_init__(self) -> None:
        if self.lease_ms is not None and not MIN_LEASE_MS <= self.lease_ms <= MAX_LEASE_MS:
            raise InvalidInput(f"lease_ms must be in {MIN_LEASE_MS}..{MAX_LEASE_MS}")
        if not 0 < self.heartbeat_fraction < 1:
            raise InvalidInput("heartbeat_fraction must be in (0, 1)")
        if not 1 <= self.lease_batch <= 1000 or not 1 <= self.concurrency <= 64:
            raise InvalidInput("lease_batch must be in 1..1000 and concurrency in 1..64")
        if self.margin_ms < 0 or self.grant_margin_ms < 0 or self.settle_attempts < 1:
            raise InvalidInput("margin_ms and grant_margin_ms must be >= 0 and settle_attempts >= 1")
        if not 0 <= self.linger_ms <= 60_000:
            raise InvalidInput("linger_ms must be in 0..60000")
        if not 0 <= self.retry_base_ms <= self.retry_cap_ms:
            raise InvalidInput("retry_base_ms must be in 0..retry_cap_ms")
        if self.invocation_budget_ms is not None and self.invocation_budget_ms <= 0:
            raise InvalidInput(f"the worker function leaves no time for any job (budget "
                               f"{self.invocation_budget_ms} ms): raise its timeout or lower the margin")

    @classmethod
    def from_settings(cls, s: Settings) -> WorkerOptions:
        budget = None if s.function_timeout_s is None else \
            invocation_budget_ms(s.function_timeout_s * 1000, s.lambda_margin_ms)
        return cls(lease_ms=None, heartbeat_fraction=s.heartbeat_fraction,
                   lease_batch=s.worker_batch, concurrency=s.worker_concurrency, margin_ms=s.lambda_margin_ms,
                   grant_margin_ms=s.grant_margin_ms,
                   budget_lease_ms=s.default_lease_seconds * 1000, retry_base_ms=s.retry_base_ms,
                   retry_cap_ms=s.retry_cap_ms, invocation_budget_ms=budget,
                   progress_every_ms=s.progress_every_ms, linger_ms=s.worker_linger_ms)

    def default_timeout_ms(self) -> int:
        # Before leasing, a job's own lease is unknown: budget with the deployment default.
        return default_job_timeout_ms(self.lease_ms or self.budget_lease_ms, self.invocation_budget_ms)

    def check_fits(self, specs: Iterable[HandlerSpec]) -> None:
        """Refuse handlers whose hard timeout no invocation of the worker function could lease.

        Called once per container when the handlers module loads; without it such a handler's
        jobs would wait in ready for ever, every invocation skipping them for want of time.
        """
        budget = self.invocation_budget_ms
        if budget is None:
            return
        unfit = [f"{spec.queue!r} (timeout_s={spec.timeout_ms / 1000:g})" for spec in specs
                 if spec.timeout_ms is not None and spec.timeout_ms > budget]
        if unfit:
            raise HandlerDoesNotFit(
                f"handler {', '.join(unfit)} cannot run: the worker function's budget for one job is "
                f"{budget / 1000:g} s (its timeout less the {self.margin_ms / 1000:g} s margin and a "
                f"start-up allowance). Lower timeout_s, or raise WorkerTimeoutSeconds "
                f"(at most 900).", budget_ms=budget, handlers=unfit)


@dataclass(frozen=True, slots=True)
class HandlerSpec:
    """One registered handler. ``timeout_ms`` None means the worker's default (10 leases, or the
    invocation budget where that is shorter). With a ``model`` (a pydantic model), ``fn`` takes
    the validated payload instead of the Job, and ``schema`` is the model's JSON Schema. ``retry``
    is its retry policy, the default for its jobs (docs/worker.md, "Retry policy in code")."""

    queue: str
    fn: AnyHandler
    timeout_ms: int | None = None
    model: type[BaseModel] | None = None
    retry: RetryPolicy | None = None  # the handler's retry policy (core.policy.RetryPolicy); None: defaults
    schema: dict[str, Any] | None = field(default=None, init=False, compare=False)

    def __post_init__(self) -> None:
        validate_queue_name(self.queue)
        if not callable(self.fn):
            raise InvalidInput(f"handler for {self.queue!r} is not callable")
        if self.timeout_ms is not None and not 0 < self.timeout_ms < MAX_LEASE_MS:
            # The hard timeout must stay below the longest lease the engine will extend to.
            raise InvalidInput(f"timeout for {self.queue!r} must be in (0, {MAX_LEASE_MS // 1000}) seconds")
        if self.retry is not None and not isinstance(self.retry, RetryPolicy):
            raise InvalidInput(f"retry for {self.queue!r} must be a sluice.RetryPolicy, got {self.retry!r}")
        if self.model is not None:
            object.__setattr__(self, "schema", check_model(self.queue, self.model))

    def timeout_for(self, options: WorkerOptions) -> int:
        return self.timeout_ms if self.timeout_ms is not None else options.default_timeout_ms()

    @property
    def policy_attempts(self) -> int:
        """Its retry policy's ``max_attempts`` as the lease tells Redis (0: the policy says none),
        so that a lapsed lease ends its job where a failed attempt would (docs/worker.md)."""
        return (self.retry.max_attempts or 0) if self.retry is not None else 0

    def call(self, job: Job, ctx: JobContext) -> Any:
        """Run the handler on ``job``: on its Job, or on its payload validated as ``model``
        (``Fail`` with the validation errors if it does not validate). Runs on the job's
        thread, under its hard timeout, like the handler itself."""
        if self.model is None:
            return self.fn(job, ctx)
        return self.fn(parse_payload(self.model, job.payload), ctx)


def timeout_ms_of(seconds: float | None) -> int | None:
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds) \
            or seconds <= 0:
        raise InvalidInput(f"timeout_s must be a positive number of seconds, got {seconds!r}")
    return max(1, int(seconds * 1000))
