"""``TimelineRecorder``: an event-bus subscriber that records a worker's steps on each job in the
job's timeline (issue 32 item 2; ``sluice.core.timeline``, ``TimelineLog``).

Cost first: a job that runs once takes two appends, one after its grant (the lease and the grant,
so a takeover shows even if this worker then freezes or dies) and one when it finishes (its
renewals, its write, accepted or refused, and its ack). A lost lease and a refused write are sent
as they happen. Each append is one small script call (``timeline.lua``); a failed one is dropped
(the timeline is for looking at, never for deciding), so the job goes on whatever Redis says.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sluice.core import bus as ev
from sluice.core import timeline
from sluice.core.errors import SluiceError
from sluice.core.ports import TimelineLog

MAX_OPEN = 256  # jobs with steps not yet sent (a worker holds a batch at most; more means lost events)


@dataclass
class _Open:
    queue: str
    lease: int  # on every step: the drawing's lane (a write or a grant does not name its lease)
    steps: list[str] = field(default_factory=list)


@dataclass
class TimelineRecorder:
    log: Callable[[], TimelineLog]  # looked up at each append: the process's adapter may be rebuilt
    open: dict[str, _Open] = field(default_factory=dict)
    # The heartbeat's thread reports renewals while the job's own thread runs: the buffers are
    # shared, the appends are not held under the lock.
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def subscribe(self, bus: ev.EventBus) -> None:
        bus.subscribe(self, *_HANDLERS)

    def __call__(self, e: ev.Event) -> None:
        handler = _HANDLERS.get(type(e))
        if handler is not None:
            handler(self, e)

    def _step(self, job: str, kind: str, at: float, **facts: Any) -> _Open | None:
        with self._lock:
            entry = self.open.get(job)
            if entry is not None:
                entry.steps.append(timeline.encode(kind, round(at * 1000), lease=entry.lease, **facts))
        return entry

    def flush(self, job: str, *, done: bool = False) -> None:
        with self._lock:
            entry = self.open.pop(job, None) if done else self.open.get(job)
            if entry is None or not entry.steps:
                return
            steps, entry.steps = entry.steps, []
        with contextlib.suppress(SluiceError):  # looked at, never decided on: a lost append is a gap
            self.log().append(entry.queue, job, steps)

    # -- one method per event ------------------------------------------------------------------

    def _leased(self, e: ev.Leased) -> None:
        if e.job in self.open:
            self.flush(e.job, done=True)
        if len(self.open) >= MAX_OPEN:
            self.flush(next(iter(self.open)), done=True)
        with self._lock:
            self.open[e.job] = _Open(e.queue, e.lease)
        self._step(e.job, "lease", e.at, attempt=e.attempt, deadline_ms=e.deadline_ms)

    def _granted(self, e: ev.Granted) -> None:
        if self._step(e.job, "grant", e.at, worker=e.owner, token=e.token,
                      outcome=None if e.outcome == "ok" else e.outcome) is not None:
            self.flush(e.job)

    def _renewed(self, e: ev.Renewed) -> None:
        if e.outcome == "ok":
            self._step(e.job, "renew", e.at, deadline_ms=e.deadline_ms)
        elif self._step(e.job, "lost", e.at, outcome=e.outcome) is not None:
            self.flush(e.job)

    def _lease_gone(self, e: ev.LeaseGone) -> None:
        if not e.again and self._step(e.job, "lost", e.at, outcome=e.why[:80]) is not None:
            self.flush(e.job)

    def _written(self, e: ev.ResultWritten) -> None:
        self._step(e.job, "write", e.at, token=e.token, outcome=e.outcome)

    def _refused(self, e: ev.ResultRefused) -> None:
        if self._step(e.job, "write", e.at, token=e.token, outcome=e.outcome, current=e.current) is not None:
            self.flush(e.job)

    def _acked(self, e: ev.Acked) -> None:
        self._step(e.job, "ack", e.at, outcome=e.outcome)

    def _finished(self, e: ev.Finished) -> None:
        self._step(e.job, "finish", e.at, outcome=e.outcome)
        self.flush(e.job, done=True)


_HANDLERS: dict[type[ev.Event], Callable[[TimelineRecorder, Any], None]] = {
    ev.Leased: TimelineRecorder._leased, ev.Granted: TimelineRecorder._granted,
    ev.Renewed: TimelineRecorder._renewed, ev.LeaseGone: TimelineRecorder._lease_gone,
    ev.ResultWritten: TimelineRecorder._written, ev.ResultRefused: TimelineRecorder._refused,
    ev.Acked: TimelineRecorder._acked, ev.Finished: TimelineRecorder._finished,
}
