"""Lambda time budgeting: lease only what can finish before the function times out.

Lambda freezes the process when the handler returns, which stops the heartbeat
thread exactly as SIGSTOP would; a lease still held then would expire silently
and the job would wait a whole lease for nothing. So the drain loop asks this
budget before every lease call and before starting every job, and releases what
it will not finish.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sluice.core.policy import can_finish_before

RemainingMs = Callable[[], int]


@dataclass(frozen=True, slots=True)
class TimeBudget:
    """``remaining_ms`` None means no deadline (a long-running worker process)."""

    remaining_ms: RemainingMs | None
    margin_ms: int

    def can_start(self, timeout_ms: int) -> bool:
        """Whether a job with this hard timeout can run to its end and be finished in time."""
        if self.remaining_ms is None:
            return True
        return can_finish_before(self.remaining_ms(), timeout_ms, self.margin_ms)

    def fit(self, timeout_ms: int, slots: int, wanted: int) -> int:
        """How many of ``wanted`` jobs to lease so that every one can finish in the worst case.

        Each of ``slots`` parallel runners takes jobs one after another, each possibly
        lasting its full timeout, so a slot can finish (remaining - margin) // timeout.
        """
        if self.remaining_ms is None:
            return wanted
        usable = self.remaining_ms() - self.margin_ms
        if usable <= 0 or usable < timeout_ms:
            return 0
        per_slot = usable // max(1, timeout_ms)
        return int(min(wanted, per_slot * slots))


UNLIMITED = TimeBudget(None, 0)
