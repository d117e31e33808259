"""In-memory fakes of ``ports.JobQueue`` and ``ports.JobStore`` with the contracts' semantics, for tests.

The queue mirrors the Redis engine: attempts counted at lease time (release gives
one back), a liveness token per lease, expired leases reclaimed by the next lease
call, ``fail`` to delayed or dead. The store mirrors the DynamoDB token authority:
``grant`` mints the fencing token, writes are fenced on ``token = mine AND status =
leased``. Time is real (monotonic ms) unless a clock is given, so heartbeat threads
and handlers can run against them. ``broken`` injects errors per method.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sluice.core.errors import (
    AlreadyFinished,
    BackendUnavailable,
    JobCancelled,
    JobNotFound,
    LeaseLost,
    StaleToken,
    StoreError,
)
from sluice.core.models import (
    FINAL_STATES,
    DeadJob,
    Extended,
    JobRecord,
    JobSpec,
    JobState,
    LeasedJob,
    QueueConfig,
    QueueStats,
    SettleEntry,
    WriteOutcome,
    dump_json,
)
from sluice.worker.registry import Worker
from sluice.worker.runtime.options import WorkerOptions
from sluice.worker.runtime.telemetry import MemoryMetrics, Telemetry


def real_ms() -> int:
    return int(time.monotonic() * 1000)


class ManualClock:
    def __init__(self, start_ms: int = 1_000_000) -> None:
        self.ms = start_ms

    def __call__(self) -> int:
        return self.ms

    def advance(self, ms: int) -> None:
        self.ms += ms


class ManualMonotonic:
    """A monotonic clock in seconds (``time.monotonic``'s shape) that moves only when told."""

    def __init__(self, start_s: float = 1_000.0) -> None:
        self.s = start_s

    def __call__(self) -> float:
        return self.s

    def advance(self, s: float) -> None:
        self.s += s


@dataclass
class QJob:
    spec: JobSpec
    state: str = "ready"  # ready | delayed | leased | dead | done
    token: int = 0
    attempts: int = 0
    deadline_ms: int = 0
    run_at_ms: int = 0
    seq: int = 0
    cancel_requested: bool = False
    last_error: str | None = None
    lease_ms: int = 0
    owner: str | None = None


class Broken:
    """Raise ``exc`` from the next ``times`` calls of a method."""

    def __init__(self) -> None:
        self._plan: dict[str, list[BaseException]] = {}

    def add(self, method: str, exc: BaseException, times: int = 1) -> None:
        self._plan.setdefault(method, []).extend([exc] * times)

    def check(self, method: str) -> None:
        queue = self._plan.get(method)
        if queue:
            raise queue.pop(0)


class FakeQueue:
    def __init__(self, now_ms: Callable[[], int] = real_ms) -> None:
        self.now_ms = now_ms
        self.jobs: dict[tuple[str, str], QJob] = {}
        self.calls: list[tuple[str, str, int]] = []  # (method, job id, token)
        self.broken = Broken()
        self._seq = itertools.count(1)
        self._lock = threading.RLock()
        # The gateway's side: its reads (holds, cancel, stats), the admission view's (the registry,
        # Redis's memory) and what a cancel wrote.
        self.down: Exception | None = None  # raised by holds and cancel: Redis unreachable
        self.cancelled: list[tuple[str, str]] = []  # (queue, job id) of each job a cancel removed
        self.settle_entries: list[str] = []  # what cancel(settle=True) recorded (keys.settle)
        self.configs: dict[str, QueueConfig] = {}
        self.reads = 0  # stats calls
        self.registered: set[str] = set()  # the queue registry (register.lua)
        self.memory: float | None = None  # Redis's used memory, percent of its maxmemory

    # -- helpers for tests ------------------------------------------------------------------

    def add(self, queue: str, job_id: str, payload: Any = None, **spec: Any) -> JobSpec:
        s = JobSpec(job_id=job_id, queue=queue, payload=payload, **spec)
        self.enqueue(s)
        return s

    def job(self, queue: str, job_id: str) -> QJob:
        return self.jobs[(queue, job_id)]

    def called(self, method: str) -> list[tuple[str, str, int]]:
        return [c for c in self.calls if c[0] == method]

    def seed(self, queue: str, state: str, n: int) -> None:
        """Make ``queue`` hold exactly ``n`` jobs in ``state`` (ready, delayed, leased or dead), adding
        anonymous ones (a ready one enqueued 1.5 s ago, a delayed or leased one for a day) or dropping
        some: a depth a test needs without the jobs' story."""
        assert state in ("ready", "delayed", "leased", "dead"), state
        with self._lock:
            now = self.now_ms()
            have = [key for key, j in self.jobs.items() if key[0] == queue and j.state == state]
            for key in have[n:]:
                del self.jobs[key]
            for _ in range(len(have), n):
                seq = next(self._seq)
                spec = JobSpec(job_id=f"{state}-{seq}", queue=queue, enqueued_at_ms=max(0, now - 1_500))
                self.jobs[(queue, spec.job_id)] = QJob(
                    spec, state=state, seq=seq, run_at_ms=now + 86_400_000 if state == "delayed" else 0,
                    token=int(state == "leased"), attempts=int(state == "leased"),
                    deadline_ms=now + 86_400_000 if state == "leased" else 0)

    def hold(self, queue: str, job_id: str, worker_id: str = "w-test") -> int:
        """A worker leases this very job (as ``lease`` would if it came first); its token."""
        with self._lock:
            j = self.job(queue, job_id)
            j.state, j.token, j.attempts = "leased", j.token + 1, j.attempts + 1
            j.deadline_ms, j.lease_ms, j.owner = self.now_ms() + j.spec.lease_ms, j.spec.lease_ms, worker_id
            return j.token

    def steal(self, queue: str, job_id: str) -> int:
        """Another worker takes the lease (as if ours expired): a newer token, a new deadline."""
        with self._lock:
            j = self.job(queue, job_id)
            j.token += 1
            j.deadline_ms = self.now_ms() + 60_000
            return j.token

    # -- the port -----------------------------------------------------------------------------

    def enqueue(self, spec: JobSpec) -> bool:
        with self._lock:
            key = (spec.queue, spec.job_id)
            if key in self.jobs:
                return False
            delayed = spec.run_at_ms > self.now_ms()
            self.jobs[key] = QJob(spec, state="delayed" if delayed else "ready", run_at_ms=spec.run_at_ms,
                                  seq=next(self._seq))
            return True

    def holds(self, queue: str, job_id: str) -> bool:
        if self.down is not None:
            raise self.down
        j = self.jobs.get((queue, job_id))
        return j is not None and j.state in ("ready", "delayed", "leased")

    def _reclaim(self, queue: str) -> None:
        now = self.now_ms()
        for (q, _), j in self.jobs.items():
            if q != queue:
                continue
            if j.state == "delayed" and j.run_at_ms <= now:
                j.state, j.seq = "ready", next(self._seq)
            elif j.state == "leased" and j.deadline_ms <= now:
                j.state = "dead" if j.attempts >= j.spec.max_attempts else "ready"
                j.seq = next(self._seq)

    def lease(self, queue: str, n: int, lease_ms: int | None, worker_id: str) -> list[LeasedJob]:
        with self._lock:
            self.broken.check("lease")
            self.calls.append(("lease", queue, n))
            self._reclaim(queue)
            ready = sorted((j for (q, _), j in self.jobs.items() if q == queue and j.state == "ready"),
                           key=lambda j: (-j.spec.priority, j.seq))
            out = []
            for j in ready[:n]:
                j.state, j.token, j.attempts = "leased", j.token + 1, j.attempts + 1
                ms = lease_ms if lease_ms is not None else j.spec.lease_ms
                j.deadline_ms, j.lease_ms, j.owner = self.now_ms() + ms, ms, worker_id
                out.append(LeasedJob(job_id=j.spec.job_id, queue=queue, payload=j.spec.payload,
                                     lease_token=j.token,
                                     deadline_ms=j.deadline_ms, attempt=j.attempts,
                                     max_attempts=j.spec.max_attempts, priority=j.spec.priority,
                                     lease_ms=ms, enqueued_at_ms=j.spec.enqueued_at_ms,
                                     cancel_requested=j.cancel_requested))
            return out

    def _held(self, method: str, queue: str, job_id: str, token: int) -> QJob:
        self.broken.check(method)
        self.calls.append((method, job_id, token))
        j = self.jobs.get((queue, job_id))
        if j is None or j.state != "leased" or j.token != token:
            raise LeaseLost(f"{method}: token {token} does not hold {job_id}")
        return j

    def extend(self, queue: str, job_id: str, token: int, lease_ms: int) -> Extended:
        with self._lock:
            j = self._held("extend", queue, job_id, token)
            j.deadline_ms = self.now_ms() + lease_ms
            return Extended(deadline_ms=j.deadline_ms, cancel_requested=j.cancel_requested)

    def ack(self, queue: str, job_id: str, token: int) -> None:
        with self._lock:
            self._held("ack", queue, job_id, token).state = "done"

    def fail(self, queue: str, job_id: str, token: int, error: str,
             retry_after_ms: int | None = None, permanent: bool = False) -> str:
        with self._lock:
            j = self._held("fail", queue, job_id, token)
            j.last_error = error
            if permanent or j.attempts >= j.spec.max_attempts:
                j.state = "dead"
                return "dead"
            if retry_after_ms:
                j.state, j.run_at_ms = "delayed", self.now_ms() + retry_after_ms
            else:
                j.state, j.seq = "ready", next(self._seq)
            return "retry"

    def release(self, queue: str, job_id: str, token: int) -> None:
        with self._lock:
            j = self._held("release", queue, job_id, token)
            j.state, j.attempts, j.seq = "ready", j.attempts - 1, next(self._seq)

    def cancel(self, queue: str, job_id: str, settle: bool = False) -> str:
        with self._lock:
            if self.down is not None:
                raise self.down
            j = self.jobs.get((queue, job_id))
            if j is None or j.state == "done":
                raise JobNotFound(f"job {job_id} is not in {queue}", job_id=job_id)
            if j.state == "dead":
                raise AlreadyFinished(f"job {job_id} is dead-lettered", status="dead")
            if j.state == "leased":
                j.cancel_requested = True
                return "requested"
            j.state = "done"
            self.cancelled.append((queue, job_id))
            if settle:
                self.settle_entries.append(f"cancelled:0:{job_id}")
            return "removed"

    def reap(self, queue: str, limit: int) -> int:
        with self._lock:
            before = sum(1 for j in self.jobs.values() if j.state == "leased")
            self._reclaim(queue)
            return before - sum(1 for j in self.jobs.values() if j.state == "leased")

    def stats(self, queue: str) -> QueueStats:
        with self._lock:
            self.reads += 1
            jobs = [j for (q, _), j in self.jobs.items() if q == queue]
            states = [j.state for j in jobs]
            ready_since = [j.spec.enqueued_at_ms for j in jobs if j.state == "ready"]
            oldest = max(0, self.now_ms() - min(ready_since)) if ready_since else None
            return QueueStats(queue=queue, ready=states.count("ready"), delayed=states.count("delayed"),
                              leased=states.count("leased"), dead=states.count("dead"),
                              oldest_ready_age_ms=oldest, config=self.get_config(queue))

    def dead_letters(self, queue: str, limit: int = 100) -> list[DeadJob]:
        return [DeadJob(job_id=j.spec.job_id, queue=q, attempts=j.attempts, last_error=j.last_error,
                        died_at_ms=0) for (q, _), j in self.jobs.items() if q == queue and j.state == "dead"]

    def dead_spec(self, queue: str, job_id: str) -> JobSpec:
        j = self.jobs.get((queue, job_id))
        if j is None or j.state != "dead":
            raise JobNotFound(f"job {job_id} is not dead-lettered in {queue}", job_id=job_id)
        return j.spec

    def overdue_leases(self, queue: str) -> int:
        with self._lock:
            now = self.now_ms()
            return sum(1 for (q, _), j in self.jobs.items()
                       if q == queue and j.state == "leased" and j.deadline_ms <= now)

    def redrive(self, queue: str, job_id: str | None = None, generation: int = 0) -> int:
        raise NotImplementedError

    def purge_dead(self, queue: str) -> int:
        raise NotImplementedError

    def get_config(self, queue: str) -> QueueConfig:
        return self.configs.get(queue, QueueConfig())

    def set_config(self, queue: str, **changes: Any) -> QueueConfig:
        raise NotImplementedError

    def queues(self) -> list[str]:
        return sorted({q for q, _ in self.jobs})

    # The admission view's reads (``sluice.gateway.admission.ViewSource``), as RedisQueue answers them.
    def registry(self, queue: str) -> tuple[bool, int]:
        return queue in self.registered, len(self.registered)

    def memory_percent(self) -> float | None:
        return self.memory


# The relay's calls to the jobs table; a relay rig passes them as ``only`` so that any other
# call fails the test.
RELAY_CALLS = frozenset({"mark_queued", "final_job_ids", "relay_view", "settle_ended"})


class FakeStore:
    """The one in-memory ``ports.JobStore`` of the tests: the worker's, the gateway's, the relay's.

    ``items`` holds one plain dict per job (the jobs item's attributes). ``final`` adds ids
    that ``final_job_ids`` reports final without an item; ``down`` makes the relay's calls
    unavailable; ``only`` (a set of method names) makes any other call an assertion error.
    """

    def __init__(self, *, only: Iterable[str] | None = None) -> None:
        self.items: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str, int]] = []
        self.broken = Broken()
        self._lock = threading.RLock()
        self.only = frozenset(only) if only is not None else None
        self.final: set[str] = set()
        self.queued: list[tuple[str, str, int]] = []  # every mark_queued entry, in order
        self.mark_calls = 0
        self.final_calls = 0
        self.down = False
        self.settled: list[SettleEntry] = []
        self.refuse_settle: set[str] = set()  # job ids whose settle_ended fails
        self.fail_cancel: Exception | None = None
        self.unrecorded: list[tuple[str, str, str]] = []  # cancel_unrecorded calls
        self.generations: dict[str, int] = {}  # redrive generations minted

    def __getattribute__(self, name: str) -> Any:
        only = object.__getattribute__(self, "only")
        if only is not None and name in _STORE_CALLS and name not in only:
            raise AssertionError(f"this caller should not call store.{name}")
        return object.__getattribute__(self, name)

    def item(self, job_id: str) -> dict[str, Any]:
        return self.items[job_id]

    def called(self, method: str) -> list[tuple[str, str, int]]:
        return [c for c in self.calls if c[0] == method]

    def _unavailable(self) -> None:
        if self.down:
            raise BackendUnavailable("dynamodb is down")

    def mark_queued(self, jobs: Sequence[tuple[str, str, int]]) -> None:
        """The relay's part: creates the item if absent, moves only accepted -> queued."""
        with self._lock:
            self.mark_calls += 1
            self.queued.extend(jobs)
            for job_id, queue, _ in jobs:
                it = self.items.setdefault(job_id, {"queue": queue, "status": "queued", "token": 0,
                                                    "attempts": 0, "cancel_requested": False})
                if it["status"] == "accepted":
                    it["status"] = "queued"

    def set_status(self, job_id: str, status: JobState, **extra: Any) -> None:
        self.items[job_id].update(status=status.value, **extra)

    def put(self, record: JobRecord) -> None:
        """Seed an item from a record, as if the job had got there."""
        it = record.model_dump(exclude={"job_id", "lease_owner"})
        self.items[record.job_id] = {**it, "status": record.status.value, "owner": record.lease_owner}

    def grant(self, job_id: str, queue: str, owner: str, redrive_gen: int = 0, *,
              lease_token: int | None = None) -> int:
        with self._lock:
            self.broken.check("grant")
            it = self.items.setdefault(job_id, {"queue": queue, "status": "queued", "token": 0,
                                                "attempts": 0, "cancel_requested": False})
            if lease_token is not None and it.get("lease_token", 0) > lease_token:
                raise LeaseLost(f"job {job_id} was granted to a newer lease")
            if it["status"] in ("failed", "dead") and redrive_gen <= it.get("run_gen", 0):
                raise AlreadyFinished(f"job {job_id} already {it['status']}", status=it["status"])
            it["run_gen"] = redrive_gen
            if it["status"] == "cancelled" or it["cancel_requested"]:
                if it["status"] != "succeeded":
                    it["status"] = "cancelled"
                raise JobCancelled(f"job {job_id} was cancelled")
            it["token"] += 1
            it["attempts"] += 1
            it["owner"] = owner
            if lease_token is not None:
                it["lease_token"] = lease_token
            if it["status"] != "succeeded":  # once succeeded, always (a re-run keeps the status)
                it["status"] = "leased"
            self.calls.append(("grant", job_id, it["token"]))
            return int(it["token"])

    def _fenced(self, method: str, job_id: str, token: int) -> dict[str, Any] | None:
        """The item if ``token`` may write now; None if this is a landed retry to be checked."""
        self.broken.check(method)
        self.calls.append((method, job_id, token))
        it = self.items.get(job_id)
        if it is None:
            raise StoreError(f"{method}: no item for {job_id}")
        if it["token"] > token:
            raise StaleToken(mine=token, current=it["token"])
        if it["status"] == "cancelled":
            raise JobCancelled(f"job {job_id} was cancelled")
        if it["token"] == token and it["status"] == "leased":
            return it
        if (method == "write_result" and it["token"] == token and it["status"] == "succeeded"
                and it.get("result_token", 0) < token):
            return it  # the current holder of a re-run writes once
        return None

    def _refuse_if_succeeded(self, job_id: str, token: int) -> None:
        it = self.items[job_id]
        if it["token"] == token and it["status"] == "succeeded":
            raise AlreadyFinished(f"job {job_id} already succeeded")

    def write_result(self, job_id: str, token: int, result: Any) -> WriteOutcome:
        with self._lock:
            text = dump_json(result)
            it = self._fenced("write_result", job_id, token)
            if it is None:
                old = self.items[job_id]
                if old["status"] == "succeeded" and old.get("result_json") == text:
                    return WriteOutcome.ALREADY_WRITTEN
                raise StoreError(f"write_result: {job_id} is {old['status']}")
            it.update(status="succeeded", result=result, result_json=text, result_token=token)
            return WriteOutcome.WRITTEN

    def write_result_unfenced(self, job_id: str, token: int, result: Any) -> None:
        with self._lock:
            self.items[job_id].update(status="succeeded", result=result, result_token=token)

    def record_failure(self, job_id: str, token: int, error: str, status: str) -> None:
        with self._lock:
            if status not in ("queued", "failed", "dead", "cancelled"):
                raise ValueError(status)
            it = self._fenced("record_failure", job_id, token)
            if it is None:
                self._refuse_if_succeeded(job_id, token)
                raise StoreError(f"record_failure: {job_id} is {self.items[job_id]['status']}")
            it.update(status=status, last_error=error)

    def write_progress(self, job_id: str, token: int, fraction: float, detail: str = "") -> None:
        from sluice.core.models import validate_progress

        with self._lock:
            fraction, detail = validate_progress(fraction, detail)
            it = self._fenced("write_progress", job_id, token)
            if it is None:
                raise LeaseLost(f"write_progress: {job_id} is {self.items[job_id]['status']}")
            it.update(progress=fraction, progress_detail=detail)

    def release(self, job_id: str, token: int) -> None:
        with self._lock:
            it = self._fenced("release", job_id, token)
            if it is None:
                self._refuse_if_succeeded(job_id, token)
                raise StoreError("release: not leased")
            it["attempts"] -= 1
            it["status"] = "queued"

    def get_job(self, job_id: str) -> JobRecord:
        it = self.items.get(job_id)
        if it is None:
            raise JobNotFound(f"no job {job_id}")
        fields = {k: v for k, v in it.items() if k in JobRecord.model_fields and v is not None}
        return JobRecord(**{**fields, "job_id": job_id, "status": JobState(it["status"]),
                            "lease_owner": it.get("owner")})

    def request_cancel(self, job_id: str) -> JobRecord:
        with self._lock:
            record = self.get_job(job_id)
            if record.status.final:
                raise AlreadyFinished(f"job {job_id} is {record.status}")
            if record.status is JobState.LEASED:
                self.items[job_id]["cancel_requested"] = True
            else:
                self.items[job_id]["status"] = "cancelled"
            return self.get_job(job_id)

    def cancel_unrecorded(self, job_id: str, queue: str, reason: str, created_at_ms: int = 0) -> JobRecord:
        with self._lock:
            self.unrecorded.append((job_id, queue, reason))
            if self.fail_cancel is not None:
                raise self.fail_cancel
            if job_id not in self.items:
                self.items[job_id] = {"queue": queue, "status": "cancelled", "token": 0, "attempts": 0,
                                      "cancel_requested": False, "last_error": reason}
                return self.get_job(job_id)
        return self.request_cancel(job_id)

    def honour_cancel(self, job_id: str) -> JobRecord:
        record = self.get_job(job_id)
        if record.status is JobState.CANCELLED:
            return record
        if record.status.final:
            raise AlreadyFinished(f"job {job_id} is {record.status}")
        assert record.cancel_requested, "honour_cancel without a cancel request"
        self.items[job_id]["status"] = "cancelled"
        return self.get_job(job_id)

    def final_job_ids(self, job_ids: Iterable[str]) -> set[str]:
        self.final_calls += 1
        self._unavailable()
        return {j for j in job_ids if j in self.final or (
            j in self.items and JobState(self.items[j]["status"]) in FINAL_STATES)}

    def relay_view(self, job_ids: Iterable[str]) -> tuple[set[str], dict[str, int]]:
        ids = list(job_ids)
        return self.final_job_ids(ids), {j: self.generations[j] for j in ids if self.generations.get(j)}

    def settle_ended(self, ended: SettleEntry) -> bool:
        if ended.job_id in self.refuse_settle:
            raise BackendUnavailable("dynamodb is down")
        self._unavailable()
        self.settled.append(ended)
        return True

    def redrive(self, job_id: str) -> int:
        self.generations[job_id] = self.generations.get(job_id, 0) + 1
        return self.generations[job_id]

    def fenced_table(self, table_name: str, job_id: str, token: int, *,
                     events: Any = None) -> FakeFencedTable:
        return FakeFencedTable(self, table_name, job_id, token)


_STORE_CALLS = frozenset(n for n, v in vars(FakeStore).items() if callable(v) and not n.startswith("_"))


class FakeFencedTable:
    def __init__(self, store: FakeStore, name: str, job_id: str, token: int) -> None:
        self.store, self.table_name, self.job_id, self.token = store, name, job_id, token
        self.rows: dict[str, Any] = {}

    def put_item(self, item: dict[str, Any]) -> None:
        current = self.store.items[self.job_id]["token"]
        if current > self.token:
            raise StaleToken(mine=self.token, current=current)
        self.rows[str(item.get("id"))] = item


# -- a worker wired to the fakes, with captured metrics and logs -----------------------------


@dataclass
class Line:
    level: str
    message: str
    extra: dict[str, Any]


@dataclass
class CaptureLog:
    """A LogSink that keeps every line with its structured keys."""

    lines: list[Line] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _log(self, level: str, msg: object, *args: object, **kwargs: Any) -> None:
        text = str(msg) % args if args else str(msg)
        with self._lock:
            self.lines.append(Line(level, text, dict(kwargs.get("extra") or {})))

    def debug(self, msg: object, *args: object, **kwargs: Any) -> None:
        self._log("debug", msg, *args, **kwargs)

    def info(self, msg: object, *args: object, **kwargs: Any) -> None:
        self._log("info", msg, *args, **kwargs)

    def warning(self, msg: object, *args: object, **kwargs: Any) -> None:
        self._log("warning", msg, *args, **kwargs)

    def error(self, msg: object, *args: object, **kwargs: Any) -> None:
        self._log("error", msg, *args, **kwargs)

    def exception(self, msg: object, *args: object, **kwargs: Any) -> None:
        self._log("error", msg, *args, **kwargs)

    def having(self, text: str) -> list[Line]:
        return [line for line in self.lines if text in line.message]


@dataclass
class Kit:
    app: Worker
    queue: FakeQueue
    store: FakeStore
    metrics: MemoryMetrics
    log: CaptureLog

    def worker(self, **options: Any) -> Worker:
        opts = {"lease_ms": 2_000, "margin_ms": 0, **options}
        return self.app.bind(queue=self.queue, store=self.store, options=WorkerOptions(**opts),
                             telemetry=Telemetry(self.metrics, self.log), worker_id="w-test")

    def count(self, name: str) -> float:
        return self.metrics.counts.get(name, 0)


def kit(queue: FakeQueue | None = None) -> Kit:
    return Kit(Worker(), queue or FakeQueue(), FakeStore(), MemoryMetrics(), CaptureLog())


class FakeLambdaContext:
    """The shape of awslambdaric's LambdaContext, with a real deadline ``budget_ms`` from now."""

    def __init__(self, budget_ms: int, function_name: str = "sluice-worker",
                 request_id: str = "6f1c1a8e-2a4b-4c1e-9d55-0c2b8f7e5a10") -> None:
        self._deadline = time.monotonic() + budget_ms / 1000
        self.aws_request_id = request_id
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = "512"
        self.invoked_function_arn = f"arn:aws:lambda:us-east-1:123456789012:function:{function_name}"
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = "2024/01/01/[$LATEST]0123456789abcdef"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


# -- the other ports: the clock, the log (Kafka), the dispatcher (ports.Clock, JobLog, Dispatcher) --

class FakeClock:
    """``ports.Clock`` on a manual time: ``sleep`` moves it, nothing waits."""

    def __init__(self) -> None:
        self.t = 1000.0

    def now_ms(self) -> int:
        return int(self.t * 1000)

    def monotonic(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += max(seconds, 0.001)


class FakeLog:
    """``ports.JobLog``: ``records`` acknowledged; ``fail`` or ``before_ack`` to break an append."""

    def __init__(self) -> None:
        self.records: list[JobSpec] = []
        self.pending: list[JobSpec] = []  # the append in flight
        self.fail: Exception | None = None
        self.before_ack: Callable[[], None] | None = None

    def append(self, specs: Sequence[JobSpec]) -> None:
        self.pending = list(specs)
        if self.before_ack is not None:
            self.before_ack()
        if self.fail is not None:
            raise self.fail
        self.records.extend(specs)


class FakeDispatcher:
    """``ports.Dispatcher`` that records each call and starts what it was asked to."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int]] = []

    def dispatch(self, queue: str, invocations: int, batch: int) -> int:
        self.calls.append((queue, invocations, batch))
        return invocations


if TYPE_CHECKING:  # each fake is its port's: mypy --strict checks these, nothing runs them
    from sluice.core import ports

    _QUEUE: ports.JobQueue = FakeQueue()
    _STORE: ports.JobStore = FakeStore()
    _CLOCK: ports.Clock = FakeClock()
    _LOG: ports.JobLog = FakeLog()
    _DISPATCHER: ports.Dispatcher = FakeDispatcher()
