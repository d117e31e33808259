"""What a handler can say besides returning a result, and how every job ends.

``Retry`` and ``Fail`` are control flow, not errors in Sluice itself, so they do
not derive from ``SluiceError``: a handler that catches ``SluiceError`` around its
own calls must not swallow them by accident.
"""

from __future__ import annotations

import math
from enum import StrEnum

from sluice.core.errors import InvalidInput
from sluice.core.models import MAX_DELAY_MS


class Retry(Exception):
    """Raise from a handler to run the job again ``after`` seconds from now.

    ``after=None`` uses the policy's exponential backoff with jitter. A retry still
    counts as an attempt: once ``max_attempts`` is reached the job is dead-lettered.
    """

    def __init__(self, after: float | None = None, reason: str = "retry requested by handler") -> None:
        if after is not None and (isinstance(after, bool) or not isinstance(after, int | float)
                                  or not math.isfinite(after) or not 0 <= after * 1000 <= MAX_DELAY_MS):
            raise InvalidInput(f"Retry(after={after!r}): seconds in 0..{MAX_DELAY_MS // 1000}")
        super().__init__(reason)
        self.after = after
        self.reason = reason

    @property
    def after_ms(self) -> int | None:
        return None if self.after is None else int(self.after * 1000)


class Fail(Exception):
    """Raise from a handler to fail the job permanently: no retries, status ``failed``."""

    def __init__(self, reason: str = "failed by handler") -> None:
        super().__init__(reason)
        self.reason = str(reason)


class Outcome(StrEnum):
    """How the runtime finished with one leased job (the drain summary counts these)."""

    SUCCEEDED = "succeeded"  # result written (or already written) and acked
    RETRIED = "retried"  # failed this attempt; back in the queue after a backoff
    FAILED = "failed"  # the handler raised Fail: permanent
    DEAD = "dead"  # attempts exhausted, no handler, or ... : dead-letter set
    CANCELLED = "cancelled"  # cancel requested before or while it ran
    LEASE_LOST = "lease_lost"  # another worker holds the job now; nothing written or acked
    RELEASED = "released"  # given back unstarted (out of time, shutting down, store unavailable)
    UNSETTLED = "unsettled"  # the store or queue failed while settling; the lease will lapse
