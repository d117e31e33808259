"""The chaos run's history: one JSON line per operation, appended by every process.

Each line: ``{"op", "pid", "t0", "t1", ...}`` with ``t0``/``t1`` the wall-clock start and
end of the operation (one machine, one clock). Ops and their fields:

- ``enqueue`` (controller): ``job``, ``i`` (workload index), ``expect`` (digest of the
  correct result), ``outcome`` ``ok`` (accepted: Kafka acknowledged), ``info`` (unknown:
  the append failed and may or may not have landed) or ``fail``;
- ``lease`` (worker): ``job``, ``lease`` (the Redis lease token);
- ``grant`` (worker): ``job``, ``token`` (the DynamoDB fencing token), ``outcome``;
- ``invoke`` (worker, from inside the handler): ``job``, ``token``: one execution;
- ``write`` (worker): ``job``, ``token``, ``digest``, ``outcome`` ``written`` |
  ``already_written`` | ``rejected`` (``current`` = the newer token) | ``cancelled`` | ``error``;
- ``ack`` / ``fail`` / ``release`` (worker): ``job``, ``lease``, ``outcome`` ``ok`` | ``lost`` | ``error``;
- ``failure`` (worker): a failure record in the store, ``status``;
- ``fault`` (nemesis, or a process about to kill itself): ``kind``, ``target``, ``phase``.

Lines are written with one ``os.write`` on an ``O_APPEND`` file, so processes never
interleave inside a line; a line torn by SIGKILL is skipped when reading.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from sluice.errors import SluiceError, StaleToken
from sluice.local.history import StorePassThrough, outcome_of
from sluice.models import LeasedJob, WriteOutcome, dump_json
from sluice.ports import JobQueue, JobStore

T = TypeVar("T")


def digest(value: Any) -> str:
    """What the checker compares results by: sha256 of the canonical JSON, 16 hex digits."""
    return hashlib.sha256(dump_json(value).encode("utf-8")).hexdigest()[:16]


class History:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()
        self.pid = os.getpid()

    def emit(self, op: str, **fields: Any) -> None:
        fields.setdefault("t1", time.time())
        line = json.dumps({"op": op, "pid": self.pid, **fields}, separators=(",", ":"), default=str)
        with self._lock:
            os.write(self._fd, (line + "\n").encode("utf-8"))

    def close(self) -> None:
        with self._lock:
            os.close(self._fd)


def read(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return []
    return _parse(data)


class Tail:
    """Reads a history as it grows: each ``read`` returns only the complete lines added since."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.offset = 0

    def read(self) -> list[dict[str, Any]]:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1  # a line still being written waits for the next read
        self.offset += end
        return _parse(data[:end])


def _parse(data: bytes) -> list[dict[str, Any]]:
    events = []
    for raw in data.splitlines():
        try:
            event = json.loads(raw)
        except ValueError:
            continue  # torn by a SIGKILL mid-write
        if isinstance(event, dict) and "op" in event:
            events.append(event)
    return events


class _Recorder:
    def __init__(self, history: History) -> None:
        self.history = history

    def call(self, op: str, fn: Callable[[], T], fields: dict[str, Any],
             ok: Callable[[T], dict[str, Any]] = lambda _r: {"outcome": "ok"}) -> T:
        t0 = time.time()
        try:
            result = fn()
        except SluiceError as exc:
            extra: dict[str, Any] = {"outcome": outcome_of(exc), "error": str(exc)[:200]}
            if isinstance(exc, StaleToken):
                extra["current"] = exc.current
            self.history.emit(op, t0=t0, **fields, **extra)
            raise
        self.history.emit(op, t0=t0, **fields, **ok(result))
        return result


class RecordingStore(StorePassThrough):
    """``ports.JobStore`` that records grants, result writes, failure records and releases."""

    def __init__(self, store: JobStore, history: History) -> None:
        self._store = store
        self._rec = _Recorder(history)

    def grant(self, job_id: str, queue: str, owner: str) -> int:
        return self._rec.call("grant", lambda: self._store.grant(job_id, queue, owner), {"job": job_id},
                              ok=lambda token: {"outcome": "ok", "token": token})

    def write_result(self, job_id: str, token: int, result: Any) -> WriteOutcome:
        return self._rec.call("write", lambda: self._store.write_result(job_id, token, result),
                              {"job": job_id, "token": token, "digest": digest(result)},
                              ok=lambda r: {"outcome": str(r)})

    def write_result_unfenced(self, job_id: str, token: int, result: Any) -> None:
        self._rec.call("write", lambda: self._store.write_result_unfenced(job_id, token, result),
                       {"job": job_id, "token": token, "digest": digest(result), "unfenced": True},
                       ok=lambda _r: {"outcome": "written"})

    def record_failure(self, job_id: str, token: int, error: str, status: str) -> None:
        self._rec.call("failure", lambda: self._store.record_failure(job_id, token, error, status),
                       {"job": job_id, "token": token, "status": status})

    def release(self, job_id: str, token: int) -> None:
        self._rec.call("store_release", lambda: self._store.release(job_id, token),
                       {"job": job_id, "token": token})


    def fenced_table(self, table_name: str, job_id: str, token: int) -> Any:
        return self._store.fenced_table(table_name, job_id, token)  # type: ignore[attr-defined]


class RecordingQueue:
    """``ports.JobQueue`` that records leases, acks, fails, releases and lost heartbeats."""

    def __init__(self, queue: JobQueue, history: History) -> None:
        self._queue = queue
        self._rec = _Recorder(history)

    def lease(self, queue: str, n: int, lease_ms: int | None, worker_id: str) -> list[LeasedJob]:
        jobs = self._queue.lease(queue, n, lease_ms, worker_id)
        for job in jobs:
            self._rec.history.emit("lease", job=job.job_id, lease=job.token, attempt=job.attempt)
        return jobs

    def extend(self, queue: str, job_id: str, token: int, lease_ms: int) -> Any:
        try:
            return self._queue.extend(queue, job_id, token, lease_ms)
        except SluiceError as exc:
            self._rec.history.emit("extend", job=job_id, lease=token, outcome=outcome_of(exc))
            raise

    def ack(self, queue: str, job_id: str, token: int) -> None:
        self._rec.call("ack", lambda: self._queue.ack(queue, job_id, token), {"job": job_id, "lease": token})

    def fail(self, queue: str, job_id: str, token: int, error: str,
             retry_after_ms: int | None = None, permanent: bool = False) -> str:
        return self._rec.call("fail", lambda: self._queue.fail(queue, job_id, token, error,
                                                               retry_after_ms=retry_after_ms,
                                                               permanent=permanent),
                              {"job": job_id, "lease": token}, ok=lambda r: {"outcome": str(r)})

    def release(self, queue: str, job_id: str, token: int) -> None:
        self._rec.call("release", lambda: self._queue.release(queue, job_id, token),
                       {"job": job_id, "lease": token})

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queue, name)
