"""Pure decision logic: no I/O, no clocks read here; callers pass time and randomness in."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sluice.core.errors import InvalidInput
from sluice.core.models import DEFAULT_MAX_ATTEMPTS, MAX_ATTEMPTS, MAX_ATTEMPTS_UNSET, MAX_DELAY_MS

BASE_BACKOFF_MS = 1_000
MAX_BACKOFF_MS = 15 * 60 * 1000


def backoff_ms(attempt: int, *, base_ms: int = BASE_BACKOFF_MS, cap_ms: int = MAX_BACKOFF_MS,
               rng: random.Random | None = None) -> int:
    """Exponential backoff with full jitter (AWS Architecture Blog, 2015).

    Full jitter spreads retries of a burst of failures uniformly, so they do not
    come back as a synchronised wave. ``attempt`` is 1 for the first retry.
    """
    if attempt < 1:
        raise ValueError("attempt starts at 1")
    ceiling = min(cap_ms, base_ms * (2 ** min(attempt - 1, 32)))
    return (rng or random).randint(0, ceiling)


Decision = Literal["retry", "dead"]


def retry_or_dead(attempts: int, max_attempts: int, *, permanent: bool = False) -> Decision:
    """After a failed attempt number ``attempts``: try again, or dead-letter."""
    if permanent or attempts >= max_attempts:
        return "dead"
    return "retry"


ErrorTypes = tuple[type[BaseException], ...]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """A handler's retry policy, declared in code: ``@app.handler(q, retry=RetryPolicy(...))``.

    - ``max_attempts``: attempts before the job is dead-lettered, for jobs whose caller sent none;
      a caller's own ``max_attempts`` may lower it, never raise it (``attempts_allowed``).
    - ``backoff``: seconds, the first retry's delay window, doubling per attempt (full jitter,
      ``backoff_ms``); or ``(base, cap)`` in seconds. None: the worker's default.
    - ``fail_on``: exception types (subclasses too) that end the job ``failed`` at once, as ``Fail``.
    - ``retry_on``: when given, the only exception types retried; any other ends the job at once.
    ``Retry`` raised by the handler is always retried, ``Fail`` never; a hard timeout and an
    unreadable payload are retried whatever the policy says (they are not the handler's errors).
    Invalid values are refused (``InvalidInput``) when the policy is made: at import time.
    """

    max_attempts: int | None = None
    backoff: float | tuple[float, float] | None = None
    retry_on: ErrorTypes | None = None
    fail_on: ErrorTypes = ()

    def __post_init__(self) -> None:
        m = self.max_attempts
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or not 1 <= m <= MAX_ATTEMPTS):
            raise InvalidInput(f"RetryPolicy(max_attempts={m!r}): an integer in 1..{MAX_ATTEMPTS}")
        self.backoff_window_ms()  # validates
        object.__setattr__(self, "fail_on", _error_types("fail_on", self.fail_on))
        if self.retry_on is not None:
            object.__setattr__(self, "retry_on", _error_types("retry_on", self.retry_on))

    def backoff_window_ms(self) -> tuple[int, int] | None:
        """``backoff`` as ``backoff_ms``'s (base_ms, cap_ms), or None for the worker's default."""
        b = self.backoff
        if b is None:
            return None
        pair = b if isinstance(b, tuple) and len(b) == 2 else (b, MAX_BACKOFF_MS / 1000)
        numbers = all(isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
                      for x in pair)
        if not numbers or not 0 <= pair[0] <= pair[1] or pair[1] * 1000 > MAX_DELAY_MS:
            raise InvalidInput(f"RetryPolicy(backoff={b!r}): seconds, or (base, cap) with "
                               f"0 <= base <= cap <= {MAX_DELAY_MS // 1000}")
        return int(pair[0] * 1000), int(pair[1] * 1000)

    def ends_at_once(self, exc: BaseException) -> bool:
        """Whether the handler's error ``exc`` ends the job now, without a retry."""
        if isinstance(exc, self.fail_on):
            return True
        return self.retry_on is not None and not isinstance(exc, self.retry_on)


def _error_types(name: str, value: Any) -> ErrorTypes:
    found = tuple(value) if isinstance(value, tuple | list) else (value,)
    bad = [t for t in found if not (isinstance(t, type) and issubclass(t, BaseException))]
    if bad:
        raise InvalidInput(f"RetryPolicy({name}=...): exception types only (a class such as KeyError), "
                           f"not {', '.join(repr(b) for b in bad)}")
    return found


def attempts_allowed(requested: int, policy_max: int | None) -> int:
    """A job's attempts: the caller's ``requested`` (``MAX_ATTEMPTS_UNSET``, 0: it sent none) and
    its handler's ``policy_max`` (None: no policy says). The lower of the two when both say;
    the one that says; else ``DEFAULT_MAX_ATTEMPTS``. A caller can lower a policy, never raise it."""
    if requested <= MAX_ATTEMPTS_UNSET:
        return DEFAULT_MAX_ATTEMPTS if policy_max is None else policy_max
    return requested if policy_max is None else min(requested, policy_max)


@dataclass(frozen=True, slots=True)
class LeasePlan:
    heartbeat_s: float
    hard_timeout_s: float


def lease_plan(lease_ms: int, *, heartbeat_fraction: float = 1 / 3,
               job_timeout_ms: int | None = None) -> LeasePlan:
    """When to renew, and the per-job hard timeout.

    Renewing every lease/3 tolerates two consecutive missed heartbeats before the
    lease runs out. The hard timeout defaults to 10 leases so a runaway handler is
    stopped long before any sane maximum extension.
    """
    lease_s = lease_ms / 1000
    timeout_ms = job_timeout_ms if job_timeout_ms is not None else lease_ms * 10
    return LeasePlan(heartbeat_s=lease_s * heartbeat_fraction, hard_timeout_s=timeout_ms / 1000)


def grant_margin_ms(lease_ms: int, margin_ms: int, heartbeat_fraction: float = 1 / 3) -> int:
    """The lease a job must have left for the worker to ask for its fencing token.

    A grant mints a newer token; if it lands after the lease lapsed and another worker
    was granted meanwhile, it turns that worker stale and the late holder then discards
    its own work: two attempts lost, a dead letter on the last one. So a grant needs
    ``margin_ms`` of lease left (the worst-case grant latency: one or two DynamoDB
    updates and a pause of the process). Capped at half of what a healthy lease keeps
    between two renewals, ``lease * (1 - heartbeat_fraction)``, so that a short lease is
    never refused while its renewals succeed.
    """
    return max(0, min(margin_ms, int(lease_ms * (1 - heartbeat_fraction) / 2)))


def can_grant(remaining_ms: float, lease_ms: int, margin_ms: int, heartbeat_fraction: float = 1 / 3) -> bool:
    """Whether a lease with ``remaining_ms`` left may still be granted (``grant_margin_ms``)."""
    return remaining_ms > 0 and remaining_ms >= grant_margin_ms(lease_ms, margin_ms, heartbeat_fraction)


def invocation_budget_ms(function_timeout_ms: int, margin_ms: int) -> int:
    """The longest hard timeout a job may have and still be leased by an invocation of a
    function with this timeout.

    The invocation's first lease comes only after its own start (settings, clients, the first
    Redis round trip), so a job whose timeout equalled ``function timeout - margin`` could
    never be leased: ``TimeBudget.fit`` would see less than that left. The start-up allowance
    is a tenth of the timeout, at least a second. Zero or less means no job can ever run.
    """
    allowance_ms = max(1_000, function_timeout_ms // 10)
    return function_timeout_ms - margin_ms - allowance_ms


def default_job_timeout_ms(lease_ms: int, budget_ms: int | None) -> int:
    """The hard timeout of a handler registered without one: 10 leases, or the invocation's
    budget where that is shorter (a Lambda worker), so that such a handler always runs."""
    ten_leases = lease_plan(lease_ms).hard_timeout_s * 1000
    return int(ten_leases if budget_ms is None else min(ten_leases, budget_ms))


def can_finish_before(remaining_ms: int, job_timeout_ms: int, margin_ms: int) -> bool:
    """A Lambda worker leases a job only if the job can finish before the function times out."""
    return remaining_ms >= job_timeout_ms + margin_ms


@dataclass(frozen=True, slots=True)
class Bucket:
    tokens: float
    updated_ms: int


def refill(bucket: Bucket, now_ms: int, rate_per_s: float, burst: int) -> Bucket:
    """Token bucket refill (the Lua rate script does the same arithmetic atomically)."""
    if rate_per_s <= 0:
        return Bucket(tokens=float("inf"), updated_ms=now_ms)
    elapsed = max(0, now_ms - bucket.updated_ms)
    capacity = max(1, burst)
    return Bucket(tokens=min(capacity, bucket.tokens + elapsed * rate_per_s / 1000), updated_ms=now_ms)


def take(bucket: Bucket, wanted: int) -> tuple[int, Bucket]:
    """How many of ``wanted`` the bucket allows now."""
    granted = int(min(wanted, bucket.tokens))
    return granted, Bucket(tokens=bucket.tokens - granted, updated_ms=bucket.updated_ms)


def dispatch_count(ready: int, leased: int, max_in_flight: int, per_invocation: int,
                   cap: int = 50) -> int:
    """How many worker invocations to start for a backlog.

    Never more than the in-flight limit leaves room for, and at most ``cap`` per tick
    so a huge backlog does not exhaust the account's Lambda concurrency at once.
    """
    if ready <= 0:
        return 0
    room = ready if max_in_flight <= 0 else max(0, max_in_flight - leased)
    wanted = min(ready, room)
    return min(cap, -(-wanted // max(1, per_invocation)))


def share_budget(wanted: Mapping[str, int], budget: int, start: int = 0) -> dict[str, int]:
    """Split ``budget`` worker invocations over queues that want ``wanted[q]`` each.

    Round-robin, one invocation at a time, beginning at the ``start``-th queue (the caller
    rotates it): when the budget is short every queue with a backlog gets a turn, so one
    queue's flood cannot take every invocation.
    """
    queues = [q for q, n in wanted.items() if n > 0]
    out = dict.fromkeys(wanted, 0)
    if not queues:
        return out
    order = queues[start % len(queues):] + queues[:start % len(queues)]
    left = max(0, budget)
    while left > 0:
        gave = False
        for q in order:
            if left > 0 and out[q] < wanted[q]:
                out[q] += 1
                left -= 1
                gave = True
        if not gave:
            break
    return out


def is_operator(principal: str, operators: Sequence[str]) -> bool:
    """``principal`` (API Gateway's ``identity.userArn``) is on the operator allow-list.

    An entry is an IAM user or role ARN. A role's sessions call as
    ``arn:aws:sts::<account>:assumed-role/<role name>/<session>``, which matches the entry
    ``arn:aws:iam::<account>:role/[<path>/]<role name>``. Nothing else matches: no wildcards.
    """
    if not principal:
        return False
    if principal in operators:
        return True
    parts = principal.split(":", 5)
    if len(parts) != 6 or parts[2] != "sts" or not parts[5].startswith("assumed-role/"):
        return False
    account, role = parts[4], parts[5].split("/")[1]
    for entry in operators:
        e = entry.split(":", 5)
        if (len(e) == 6 and e[1] == parts[1] and e[2] == "iam" and e[4] == account
                and e[5].startswith("role/") and e[5].rsplit("/", 1)[-1] == role):
            return True
    return False


def priority_allowed(priority: int, principal: str, *, max_caller_priority: int,
                     operators: Sequence[str]) -> bool:
    """Priorities up to ``max_caller_priority`` are everyone's; higher ones are for operators.

    Strict priority lets a flood at the top priority starve every other job of its queue, so
    the top of the range is reserved to whom the deployment names.
    """
    return priority <= max_caller_priority or is_operator(principal, operators)


def watermark_paused(ready: int, high: int, low: int, currently_paused: bool) -> bool:
    """Hysteresis: pause pushing once the ready depth reaches the high mark, resume only below the low
    mark. At the mark, not only above it: a queue whose count came to rest exactly on it (the planner
    aims one past it, from an estimate) was never latched, so a drain to between the marks resumed
    pushing at once (a fresh-clone CI run of test_relay_flow read 501 where hysteresis keeps 250)."""
    if high <= 0:
        return False
    if currently_paused:
        return ready >= max(0, low)
    return ready >= high
