"""What a handler gets besides its job: identity, token, lease state and a bound logger."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sluice.errors import SluiceError
from sluice.runtime.telemetry import JobLogger

FencedTableFactory = Callable[[str, str, int], Any]  # (table name, job id, fencing token) -> FencedTable


@dataclass
class LeaseState:
    """The lease as the runtime last saw it; the heartbeat thread updates it.

    The events are shared by the heartbeat thread (which sets them) and the handler
    (which may poll or wait on them).
    """

    deadline_ms: int
    expires_at: float  # time.monotonic() by which the lease lapses unless renewed
    lease_lost: threading.Event = field(default_factory=threading.Event)
    cancel_requested: threading.Event = field(default_factory=threading.Event)


@dataclass(eq=False)
class JobContext:
    """Passed to every handler next to the ``Job``.

    ``token`` is the fencing token granted by the jobs table: the one to hand to any
    service that can check it. ``lease_lost`` is set when the runtime learns another
    worker may hold the job (or the job hit its hard timeout); from then on nothing
    this handler returns is written, so a cooperative handler stops early.
    """

    job_id: str
    queue: str
    attempt: int
    max_attempts: int
    token: int
    lease_token: int  # the Redis lease token: liveness only, never a fencing token
    worker_id: str
    logger: JobLogger
    timeout_at: float  # time.monotonic() of the hard timeout
    _lease: LeaseState
    _fenced: FencedTableFactory | None = None
    _tables: dict[str, Any] = field(default_factory=dict)
    _progress: Any = None  # a runtime.progress.Progress, if the store records progress

    def progress(self, fraction: float, detail: str = "") -> None:
        """Record how far the job is (``fraction`` in [0, 1], a short ``detail``), fenced on this
        job's token and written at most once a second; see ``sluice.runtime.progress``."""
        if self._progress is None:
            raise SluiceError("this worker's store records no progress")
        self._progress.report(fraction, detail)

    @property
    def lease_lost(self) -> threading.Event:
        return self._lease.lease_lost

    @property
    def cancel_requested(self) -> threading.Event:
        return self._lease.cancel_requested

    @property
    def lease_deadline_ms(self) -> int:
        """The lease's current deadline (epoch ms, Redis time); moves on every heartbeat."""
        return self._lease.deadline_ms

    def time_left_s(self) -> float:
        """Seconds until the hard timeout."""
        return max(0.0, self.timeout_at - time.monotonic())

    def should_stop(self) -> bool:
        return self.lease_lost.is_set() or self.cancel_requested.is_set()

    def fenced_table(self, name: str) -> Any:
        """A ``sluice.store.fenced.FencedTable`` on ``name`` whose writes carry this job's token.

        One per table and attempt, so that sending a write again after ``BackendUnavailable``
        is recognised as a retry (same request token) however the handler gets the table."""
        if self._fenced is None:
            raise SluiceError("this worker's store offers no fenced tables")
        table = self._tables.get(name)
        if table is None:
            table = self._tables[name] = self._fenced(name, self.job_id, self.token)
        return table
