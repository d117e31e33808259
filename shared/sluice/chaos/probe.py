"""Ports that report what a worker did, as it does it, for the scenarios' timelines.

``ProbedQueue`` and ``ProbedStore`` wrap the real Redis engine and DynamoDB store of a
scenario worker process and emit one event per lease, renewal, grant, result write
and ack, stamped with the wall clock at the moment the call returned. The events
are facts about what the process did; the controller builds the timeline from them
and never from its own script.

``ProbedStore(fencing=False)`` sends result writes down the store's unconditional
path (``write_result_unfenced``): the bug the gc-pause scenario shows with
``--no-fencing``.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

from sluice.errors import JobNotFound, LeaseLost, SluiceError, StaleToken
from sluice.local.history import StorePassThrough
from sluice.models import (
    Extended,
    LeasedJob,
    WriteOutcome,
)
from sluice.ports import JobQueue, JobStore

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


def _why(exc: SluiceError) -> str:
    if isinstance(exc, StaleToken):
        return "stale"
    if isinstance(exc, LeaseLost | JobNotFound):
        return "lost"
    return "error"


class ProbedQueue:
    """The engine calls a scenario worker makes, each reported once it returned."""

    def __init__(self, queue: JobQueue, emit: Emit) -> None:
        self._queue = queue
        self._emit = emit

    def lease(self, queue: str, n: int, lease_ms: int | None, worker_id: str) -> list[LeasedJob]:
        jobs = self._queue.lease(queue, n, lease_ms, worker_id)
        for job in jobs:
            self._emit("leased", job=job.job_id, lease=job.token, deadline_ms=job.deadline_ms)
        return jobs

    def extend(self, queue: str, job_id: str, token: int, lease_ms: int) -> Extended:
        try:
            extended = self._queue.extend(queue, job_id, token, lease_ms)
        except SluiceError as exc:
            self._emit("renew_failed", job=job_id, lease=token, why=_why(exc), error=str(exc)[:200])
            raise
        self._emit("renewed", job=job_id, lease=token, deadline_ms=extended.deadline_ms)
        return extended

    def ack(self, queue: str, job_id: str, token: int) -> None:
        try:
            self._queue.ack(queue, job_id, token)
        except SluiceError as exc:
            self._emit("ack", job=job_id, lease=token, outcome=_why(exc), error=str(exc)[:200])
            raise
        self._emit("ack", job=job_id, lease=token, outcome="ok")

    def fail(self, queue: str, job_id: str, token: int, error: str,
             retry_after_ms: int | None = None, permanent: bool = False) -> str:
        return self._queue.fail(queue, job_id, token, error, retry_after_ms=retry_after_ms,
                                permanent=permanent)

    def release(self, queue: str, job_id: str, token: int) -> None:
        self._queue.release(queue, job_id, token)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queue, name)


class ProbedStore(StorePassThrough):
    """The job store calls a scenario worker makes; ``fencing=False`` is the bug."""

    def __init__(self, store: JobStore, emit: Emit, *, fencing: bool = True) -> None:
        self._store = store
        self._emit = emit
        self.fencing = fencing

    def grant(self, job_id: str, queue: str, owner: str, redrive_gen: int = 0) -> int:
        token = self._store.grant(job_id, queue, owner, redrive_gen)
        self._emit("granted", job=job_id, token=token)
        return token

    def write_result(self, job_id: str, token: int, result: Any) -> WriteOutcome:
        fenced = self.fencing
        try:
            if fenced:
                outcome = self._store.write_result(job_id, token, result)
            else:
                self._store.write_result_unfenced(job_id, token, result)
                outcome = WriteOutcome.WRITTEN
        except StaleToken as exc:
            self._emit("write", job=job_id, token=token, outcome="rejected", current=exc.current,
                       fenced=fenced)
            raise
        except SluiceError as exc:
            self._emit("write", job=job_id, token=token, outcome="error", error=str(exc)[:200],
                       fenced=fenced)
            raise
        self._emit("write", job=job_id, token=token, outcome=str(outcome), fenced=fenced)
        return outcome

    def write_result_unfenced(self, job_id: str, token: int, result: Any) -> None:
        self._store.write_result_unfenced(job_id, token, result)

    def record_failure(self, job_id: str, token: int, error: str, status: str) -> None:
        self._store.record_failure(job_id, token, error, status)

    def release(self, job_id: str, token: int) -> None:
        self._store.release(job_id, token)

