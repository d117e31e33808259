"""A JSONL history of what workers did: grants, result writes (accepted or refused), acks.

On the local stack (``sluice dev``, ``sluice demo``, ``sluice chaos``) every worker
process appends one line per event to the file named by ``Settings.history_path``.
The recording is done by decorators around the worker's two ports, so the runtime
itself is unchanged: ``recorded(queue, store, path)`` returns adapters that behave
exactly like the real ones and write a line after each call. This is the one
recorder: the worker Lambda uses it (``runtime.lambda_entry``), and so do the chaos
run's worker processes; the chaos run adds its own ops to the same file
(``sluice.chaos.history``: enqueues, handler invocations, faults, relay pushes).

Each line: ``{"op", "job", "queue", "token", "outcome", "t0", "t1", "pid", ...}``, with
``t0``/``t1`` the wall-clock start and end of the call. Ops:

- ``grant``: a fencing token was minted for an invocation (``token``);
- ``write``: a result write with ``token``; outcome ``written``, ``already_written``,
  ``rejected`` (stale token; ``current`` is the newer one), ``cancelled`` or ``error``;
  ``digest`` identifies the result;
- ``fenced``: a handler's ``FencedTable`` write, same outcomes;
- ``failure``: a failure record (``status`` queued|failed|dead|cancelled), same outcomes;
- ``ack`` / ``fail`` / ``release``: the Redis side, outcome ``ok`` (``fail`` also gives
  ``retry``/``dead``), ``lost`` or ``error``; ``lease`` is the Redis lease token;
- ``extend``: only failures are recorded (outcome ``lost``), a heartbeat finding its lease gone;
- ``lease``: a job leased from Redis (``lease`` token, ``attempt``), no outcome.

``analyse`` turns a history into per-job facts and the counts the demo and the
chaos checker report. A write is a *stale write accepted* when it was accepted and
it started after a newer token for the same job had been granted: DynamoDB must
have seen that newer token, so fencing failed.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from sluice.errors import JobCancelled, JobNotFound, LeaseLost, SluiceError, StaleToken
from sluice.models import (
    DeadJob,
    EndedJob,
    Extended,
    JobRecord,
    JobSpec,
    LeasedJob,
    QueueConfig,
    QueueStats,
    WriteOutcome,
    dump_json,
)
from sluice.ports import JobQueue, JobStore

T = TypeVar("T")

# The history's clock, bound at import: a chaos run may skew a relay process's wall clock
# (``sluice.chaos.skew`` replaces ``time.time``), and the lines that process writes must stay
# on the machine's. (The recorders below run in worker processes, which are never skewed.)
wall = time.time


def digest(value: Any) -> str:
    try:
        text = dump_json(value)
    except SluiceError:
        text = repr(value)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


class History:
    """Appends JSON lines; one ``write`` per line on an O_APPEND file, so processes can share it."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()
        self.pid = os.getpid()

    def emit(self, op: str, **fields: Any) -> None:
        fields.setdefault("t1", wall())
        line = json.dumps({"op": op, "pid": self.pid, **fields}, separators=(",", ":"), default=str)
        data = (line + "\n").encode("utf-8")
        with self._lock:
            os.write(self._fd, data)

    def close(self) -> None:
        with self._lock:
            os.close(self._fd)


def outcome_of(exc: BaseException) -> str:
    """How a history line names a refused call (shared with sluice.chaos)."""
    if isinstance(exc, StaleToken):
        return "rejected"
    if isinstance(exc, JobCancelled):
        return "cancelled"
    if isinstance(exc, LeaseLost | JobNotFound):
        return "lost"
    return "error"


class _Recorder:
    def __init__(self, history: History) -> None:
        self.history = history

    def call(self, op: str, fn: Callable[[], T], fields: dict[str, Any],
             ok: Callable[[T], str] = lambda _r: "ok", record_ok: bool = True) -> T:
        t0 = time.time()
        try:
            result = fn()
        except SluiceError as exc:
            extra: dict[str, Any] = {"error": str(exc)[:200]}
            if isinstance(exc, StaleToken):
                extra["current"] = exc.current
            self.history.emit(op, outcome=outcome_of(exc), t0=t0, t1=time.time(), **fields, **extra)
            raise
        if record_ok:
            self.history.emit(op, outcome=ok(result), t0=t0, t1=time.time(), **fields)
        return result


class RecordingFencedTable:
    """A handler's FencedTable whose writes are recorded as ``fenced`` events."""

    def __init__(self, table: Any, recorder: _Recorder, job_id: str, token: int) -> None:
        self._table = table
        self._rec = recorder
        self._fields = {"job": job_id, "token": token, "table": getattr(table, "table_name", "?")}

    def put_item(self, item: Any, **kwargs: Any) -> None:
        self._rec.call("fenced", lambda: self._table.put_item(item, **kwargs),
                       {**self._fields, "kind": "put"},
                       ok=lambda _r: "written")

    def update_item(self, key: Any, update: str, **kwargs: Any) -> None:
        self._rec.call("fenced", lambda: self._table.update_item(key, update, **kwargs),
                       {**self._fields, "kind": "update"}, ok=lambda _r: "written")

    def delete_item(self, key: Any, **kwargs: Any) -> None:
        self._rec.call("fenced", lambda: self._table.delete_item(key, **kwargs),
                       {**self._fields, "kind": "delete"}, ok=lambda _r: "written")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._table, name)


class StorePassThrough:
    """The JobStore calls that no recorder or probe looks at, passed straight to ``_store``."""

    _store: JobStore

    def record_accepted(self, spec: JobSpec) -> None:
        self._store.record_accepted(spec)

    def mark_queued(self, jobs: Sequence[tuple[str, str, int]]) -> None:
        self._store.mark_queued(jobs)

    def get_job(self, job_id: str) -> JobRecord:
        return self._store.get_job(job_id)

    def request_cancel(self, job_id: str) -> JobRecord:
        return self._store.request_cancel(job_id)

    def honour_cancel(self, job_id: str) -> JobRecord:
        return self._store.honour_cancel(job_id)

    def redrive(self, job_id: str) -> int:
        return self._store.redrive(job_id)

    def final_job_ids(self, job_ids: Iterable[str]) -> set[str]:
        return self._store.final_job_ids(job_ids)

    def cancel_unrecorded(self, job_id: str, queue: str, reason: str, created_at_ms: int = 0) -> JobRecord:
        return self._store.cancel_unrecorded(job_id, queue, reason, created_at_ms)

    def settle_ended(self, ended: EndedJob) -> bool:
        return self._store.settle_ended(ended)


class RecordingStore(StorePassThrough):
    """``ports.JobStore`` that records grants, result writes and failure records."""

    def __init__(self, store: JobStore, history: History) -> None:
        self._store = store
        self._rec = _Recorder(history)

    def grant(self, job_id: str, queue: str, owner: str, redrive_gen: int = 0) -> int:
        t0 = time.time()
        try:
            token = self._store.grant(job_id, queue, owner, redrive_gen)
        except SluiceError as exc:
            self._rec.history.emit("grant", outcome=outcome_of(exc), job=job_id, queue=queue, owner=owner,
                                   t0=t0, t1=time.time(), error=str(exc)[:200])
            raise
        self._rec.history.emit("grant", outcome="ok", job=job_id, queue=queue, owner=owner, token=token,
                               t0=t0, t1=time.time())
        return token

    def write_result(self, job_id: str, token: int, result: Any) -> WriteOutcome:
        return self._rec.call("write", lambda: self._store.write_result(job_id, token, result),
                              {"job": job_id, "token": token, "digest": digest(result)},
                              ok=lambda r: str(r))

    def write_result_unfenced(self, job_id: str, token: int, result: Any) -> None:
        self._rec.call("write", lambda: self._store.write_result_unfenced(job_id, token, result),
                       {"job": job_id, "token": token, "digest": digest(result), "unfenced": True},
                       ok=lambda _r: "written")

    def record_failure(self, job_id: str, token: int, error: str, status: str) -> None:
        self._rec.call("failure", lambda: self._store.record_failure(job_id, token, error, status),
                       {"job": job_id, "token": token, "status": status})

    def release(self, job_id: str, token: int) -> None:
        self._rec.call("store_release", lambda: self._store.release(job_id, token),
                       {"job": job_id, "token": token})

    def fenced_table(self, table_name: str, job_id: str, token: int) -> RecordingFencedTable:
        factory = getattr(self._store, "fenced_table", None)
        if factory is None:
            raise SluiceError("the store offers no fenced tables")
        return RecordingFencedTable(factory(table_name, job_id, token), self._rec, job_id, token)



class RecordingQueue:
    """``ports.JobQueue`` that records leases, acks, fails, releases and lost heartbeats."""

    def __init__(self, queue: JobQueue, history: History) -> None:
        self._queue = queue
        self._rec = _Recorder(history)

    def extend(self, queue: str, job_id: str, token: int, lease_ms: int) -> Extended:
        return self._rec.call("extend", lambda: self._queue.extend(queue, job_id, token, lease_ms),
                              {"job": job_id, "queue": queue, "lease": token}, record_ok=False)

    def ack(self, queue: str, job_id: str, token: int) -> None:
        self._rec.call("ack", lambda: self._queue.ack(queue, job_id, token),
                       {"job": job_id, "queue": queue, "lease": token})

    def fail(self, queue: str, job_id: str, token: int, error: str,
             retry_after_ms: int | None = None, permanent: bool = False) -> str:
        return self._rec.call("fail", lambda: self._queue.fail(queue, job_id, token, error,
                                                               retry_after_ms=retry_after_ms,
                                                               permanent=permanent),
                              {"job": job_id, "queue": queue, "lease": token}, ok=lambda r: str(r))

    def release(self, queue: str, job_id: str, token: int) -> None:
        self._rec.call("release", lambda: self._queue.release(queue, job_id, token),
                       {"job": job_id, "queue": queue, "lease": token})

    # -- unrecorded delegation ------------------------------------------------------------------

    def enqueue(self, spec: JobSpec) -> bool:
        return self._queue.enqueue(spec)

    def lease(self, queue: str, n: int, lease_ms: int | None, worker_id: str) -> list[LeasedJob]:
        jobs = self._queue.lease(queue, n, lease_ms, worker_id)
        for job in jobs:  # where an attempt began: a job killed before its grant shows up here only
            self._rec.history.emit("lease", job=job.job_id, queue=queue, lease=job.token, attempt=job.attempt)
        return jobs

    def cancel(self, queue: str, job_id: str, settle: bool = False) -> str:
        return self._queue.cancel(queue, job_id, settle)

    def reap(self, queue: str, limit: int) -> int:
        return self._queue.reap(queue, limit)

    def stats(self, queue: str) -> QueueStats:
        return self._queue.stats(queue)

    def dead_letters(self, queue: str, limit: int = 100) -> list[DeadJob]:
        return self._queue.dead_letters(queue, limit)

    def redrive(self, queue: str, job_id: str | None = None, generation: int = 0) -> int:
        return self._queue.redrive(queue, job_id, generation)

    def purge_dead(self, queue: str) -> int:
        return self._queue.purge_dead(queue)

    def get_config(self, queue: str) -> QueueConfig:
        return self._queue.get_config(queue)

    def set_config(self, queue: str, **changes: Any) -> QueueConfig:
        return self._queue.set_config(queue, **changes)

    def queues(self) -> list[str]:
        return self._queue.queues()


_open: dict[str, History] = {}
_open_lock = threading.Lock()


def open_history(path: str | os.PathLike[str]) -> History:
    """This process's one ``History`` for ``path``, shared by every recorder and probe in it."""
    key = str(path)
    with _open_lock:
        history = _open.get(key)
        if history is None:
            history = _open[key] = History(key)
    return history


def recorded(queue: JobQueue, store: JobStore, path: str) -> tuple[RecordingQueue, RecordingStore]:
    """The worker's ports, recording to ``path`` (one open file per process and path)."""
    history = open_history(path)
    return RecordingQueue(queue, history), RecordingStore(store, history)


# -- reading and analysis ---------------------------------------------------------------------------


def read(path: str | os.PathLike[str], offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """Complete lines from ``offset`` on, and the offset after the last complete line."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n") + 1
    events = []
    for raw in data[:end].splitlines():
        try:
            event = json.loads(raw)
        except ValueError:
            continue  # a line torn by a SIGKILL mid-write
        if isinstance(event, dict):
            events.append(event)
    return events, offset + end


@dataclass
class JobFacts:
    grants: list[tuple[int, float, float]] = field(default_factory=list)  # (token, t0, t1)
    writes: list[dict[str, Any]] = field(default_factory=list)  # accepted result writes
    rejected_writes: int = 0
    retries: int = 0
    dead: bool = False
    acked: bool = False
    lost: set[tuple[int, int]] = field(default_factory=set)  # (pid, fencing token) attempts lost

    @property
    def succeeded(self) -> bool:
        return bool(self.writes)


@dataclass
class HistoryReport:
    jobs: dict[str, JobFacts] = field(default_factory=dict)
    invocations: int = 0
    fenced_writes_rejected: int = 0  # result writes and FencedTable writes refused for a stale token
    stale_writes_accepted: int = 0
    leases_lost: int = 0
    retries: int = 0

    @property
    def succeeded(self) -> set[str]:
        return {j for j, f in self.jobs.items() if f.succeeded}

    @property
    def dead(self) -> set[str]:
        return {j for j, f in self.jobs.items() if f.dead and not f.succeeded}

    def first_success_at(self, job_id: str) -> float | None:
        facts = self.jobs.get(job_id)
        return min(w["t1"] for w in facts.writes) if facts and facts.writes else None


class Analyser:
    """Incremental: ``feed`` new lines as they arrive, read ``report`` at any time.

    A lost lease is counted once per attempt, an attempt being (worker process, job,
    fencing token): its heartbeat, ack or fail finding the Redis lease gone and its
    result write being refused are one loss, not three.
    """

    def __init__(self) -> None:
        self.report = HistoryReport()
        self._accepted_fenced: list[dict[str, Any]] = []
        self._current: dict[tuple[int, str], int] = {}  # (pid, job) -> token of its latest grant

    def facts(self, job_id: str) -> JobFacts:
        f = self.report.jobs.get(job_id)
        if f is None:
            f = self.report.jobs[job_id] = JobFacts()
        return f

    def feed(self, events: Iterable[dict[str, Any]]) -> None:  # noqa: C901 - one branch per op
        r = self.report
        for e in events:
            op, job, outcome = e.get("op"), str(e.get("job", "")), e.get("outcome")
            if not job:
                continue
            f = self.facts(job)
            pid = int(e.get("pid", 0))
            if op == "grant" and outcome == "ok":
                r.invocations += 1
                f.grants.append((int(e["token"]), float(e["t0"]), float(e["t1"])))
                self._current[(pid, job)] = int(e["token"])
            elif op == "write":
                if outcome in ("written", "already_written"):
                    f.writes.append(e)
                elif outcome == "rejected":
                    f.rejected_writes += 1
                    r.fenced_writes_rejected += 1
                    self._lose(f, pid, int(e.get("token", 0)))
            elif op == "fenced":
                if outcome == "written":
                    self._accepted_fenced.append(e)
                elif outcome == "rejected":
                    r.fenced_writes_rejected += 1
                    self._lose(f, pid, int(e.get("token", 0)))
            elif op == "failure" and outcome == "ok" and e.get("status") == "queued":
                f.retries += 1
                r.retries += 1
            elif (op == "fail" and outcome == "dead") or (op == "failure" and outcome == "ok"
                                                          and e.get("status") == "dead"):
                f.dead = True
            elif op == "ack" and outcome == "ok":
                f.acked = True
            if outcome in ("lost", "rejected") and op in ("extend", "ack", "fail", "release"):
                self._lose(f, pid, self._current.get((pid, job), -int(e.get("lease", 0))))

    def _lose(self, f: JobFacts, pid: int, token: int) -> None:
        key = (pid, token)
        if key not in f.lost:
            f.lost.add(key)
            self.report.leases_lost += 1

    def finish(self) -> HistoryReport:
        """Count stale writes accepted (needs every grant, so call it once the history is complete)."""
        r = self.report
        stale = 0
        for f in r.jobs.values():
            for w in f.writes:
                if _granted_newer_before(f.grants, int(w["token"]), float(w["t0"])):
                    stale += 1
        for e in self._accepted_fenced:
            facts = r.jobs.get(str(e["job"]))
            if facts and _granted_newer_before(facts.grants, int(e["token"]), float(e["t0"])):
                stale += 1
        r.stale_writes_accepted = stale
        return r


def _granted_newer_before(grants: Sequence[tuple[int, float, float]], token: int, started: float) -> bool:
    return any(g_token > token and g_t1 < started for g_token, _t0, g_t1 in grants)


def analyse(path: str | os.PathLike[str]) -> HistoryReport:
    events, _ = read(path)
    a = Analyser()
    a.feed(events)
    return a.finish()


def follow(path: str | os.PathLike[str]) -> Iterator[list[dict[str, Any]]]:
    """Yields the lines appended since the last ``next`` (empty when nothing new)."""
    offset = 0
    while True:
        events, offset = read(path, offset)
        yield events
