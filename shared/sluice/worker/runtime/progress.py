"""``ctx.progress(fraction, detail)``: a handler's progress, fenced and throttled.

Each report is validated at once (a fraction in [0, 1], a detail of at most
``models.MAX_PROGRESS_DETAIL_BYTES``; ``InvalidInput`` otherwise), then written to the
jobs table at most once every ``every_ms`` per attempt. A report inside the window is
kept, and the latest one kept wins: it is written by the next report after the window, or
by ``flush`` when the handler returns (before the verdict, which ends the lease). Every
write is conditional on the job's fencing token and status leased, so a stale worker's
report is refused: ``StaleToken`` (or ``LeaseLost``) reaches the handler, as a refused
``FencedTable`` write does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from sluice.core.clock import wall_ms
from sluice.core.models import validate_progress

ProgressWrite = Callable[[str, int, float, str], None]  # (job id, fencing token, fraction, detail)


class Progress:
    def __init__(self, write: ProgressWrite, job_id: str, token: int, *, every_ms: int = 1_000,
                 now_ms: Callable[[], int] = wall_ms) -> None:
        self._write, self.job_id, self.token = write, job_id, token
        self.every_ms, self._now_ms = every_ms, now_ms
        self._lock = threading.Lock()
        self._last_ms: int | None = None
        self._pending: tuple[float, str] | None = None
        self.writes = 0

    def report(self, fraction: float, detail: str = "") -> None:
        value = validate_progress(fraction, detail)
        with self._lock:
            now = self._now_ms()
            if self._last_ms is not None and now - self._last_ms < self.every_ms:
                self._pending = value  # the latest wins, at the next allowed write or the end
                return
            self._pending = None
            self._last_ms = now
            self._send(value)

    def flush(self) -> None:
        """Write the report kept back by the throttle, if any (the handler has returned)."""
        with self._lock:
            value, self._pending = self._pending, None
            if value is not None:
                self._last_ms = self._now_ms()
                self._send(value)

    def _send(self, value: tuple[float, str]) -> None:
        self.writes += 1
        self._write(self.job_id, self.token, *value)
