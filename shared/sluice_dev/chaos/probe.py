"""Ports that report what a worker did, as it does it, for the scenarios' timelines.

``probe`` subscribes to a scenario worker's event bus (``sluice.core.bus``) and emits
one line per lease, renewal, grant, result write and ack, stamped with the wall clock
at the moment the call returned. The lines are facts about what the process did; the
controller builds the timeline from them and never from its own script.

The gc-pause scenario's ``--no-fencing`` is the store's own option
(``DynamoJobStore(fencing=False)``: result writes go the unconditional path), not the
probe's.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

from sluice.core import bus as ev

Emit = Callable[..., None]


class EventPipe:
    """One JSON object per line on a stream (the child's stdout), flushed at once."""

    def __init__(self, name: str, stream: IO[str] | None = None) -> None:
        self.name = name
        self._stream = stream or sys.stdout
        self._lock = threading.Lock()

    def __call__(self, event: str, **fields: Any) -> None:
        line = json.dumps({"event": event, "who": self.name, "t": time.time(), **fields},
                          separators=(",", ":"), default=str)
        with self._lock:
            self._stream.write(line + "\n")
            self._stream.flush()


def _why(outcome: str) -> str:
    """The probe's word for a refused call: a stale token, a lost lease, or anything else."""
    return {"rejected": "stale", "lost": "lost"}.get(outcome, "error")


def probe(emit: Emit, *, fencing: bool = True) -> Callable[[ev.Event], None]:
    """An event-bus subscriber reporting a scenario worker's leases, renewals, grants, writes
    and acks as they return; ``fencing`` says which kind of store the worker writes through."""

    def report(e: ev.Event) -> None:
        if isinstance(e, ev.Leased):
            emit("leased", job=e.job, lease=e.lease, deadline_ms=e.deadline_ms)
        elif isinstance(e, ev.Renewed):
            if e.outcome == "ok":
                emit("renewed", job=e.job, lease=e.lease, deadline_ms=e.deadline_ms)
            else:
                emit("renew_failed", job=e.job, lease=e.lease, why=_why(e.outcome), error=e.error)
        elif isinstance(e, ev.Acked):
            error = {"error": e.error} if e.outcome != "ok" else {}
            emit("ack", job=e.job, lease=e.lease, outcome=e.outcome if e.outcome == "ok" else _why(e.outcome),
                 **error)
        elif isinstance(e, ev.Granted) and e.token is not None:
            emit("granted", job=e.job, token=e.token)
        elif isinstance(e, ev.ResultWritten):
            emit("write", job=e.job, token=e.token, outcome=e.outcome, fenced=fencing)
        elif isinstance(e, ev.ResultRefused):
            if e.outcome == "rejected":
                emit("write", job=e.job, token=e.token, outcome="rejected", current=e.current, fenced=fencing)
            else:
                emit("write", job=e.job, token=e.token, outcome="error", error=e.error, fenced=fencing)

    return report
