"""In-memory fake of ``ports.JobQueue`` with the contract's semantics, for tests: the workers' and the
gateway's.

The queue mirrors the Redis engine: attempts counted at lease time (release gives
one back), a liveness token per lease, expired leases reclaimed by the next lease
call, ``fail`` to delayed or dead. Time is real (monotonic ms) unless a clock is given,
so heartbeat threads and handlers can run against it. ``broken`` injects errors per method.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sluice.core import listing
from sluice.core.errors import AlreadyFinished, JobNotFound, LeaseLost, QueueNotAllowed
from sluice.core.models import (
    MAX_ATTEMPTS,
    MAX_ATTEMPTS_UNSET,
    DeadJob,
    Extended,
    FinishedCounts,
    JobSpec,
    LeasedJob,
    QueueConfig,
    QueueStats,
    is_reserved_queue,
)
from sluice.core.policy import attempts_allowed


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


def _ceiling(spec: JobSpec, unset: int) -> int:
    """lua/_lib.lua max_attempts_of: an unset max_attempts (its caller sent none) is ``unset``."""
    return unset if spec.max_attempts == MAX_ATTEMPTS_UNSET else spec.max_attempts


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
        self.settle_entries: list[str] = []  # what cancel(settle=True) and fail recorded (keys.settle)
        self.configs: dict[str, QueueConfig] = {}
        self.reads = 0  # stats calls
        self.registered: set[str] = set()  # the queue registry (register.lua)
        self.max_queues = 0  # the registry's limit (register.lua's); 0 = none
        self.memory: float | None = None  # Redis's used memory, percent of its maxmemory
        self.finished: dict[str, FinishedCounts] = {}  # a queue's cumulative endings (keys.finished)
        self.used: dict[str, int] = {}  # bytes a queue's jobs count against its budget (keys.used)
        self.writes: list[tuple[str, ...]] = []  # the operator's writes: set_config, redrive, purge_dead
        self.policies: dict[str, int] = {}  # a queue's handler policy's attempts, as a lease told them

    # -- helpers for tests ------------------------------------------------------------------

    def add(self, queue: str, job_id: str, payload: Any = None, **spec: Any) -> JobSpec:
        s = JobSpec(job_id=job_id, queue=queue, payload=payload, **spec)
        self.enqueue(s)
        return s

    def job(self, queue: str, job_id: str) -> QJob:
        return self.jobs[(queue, job_id)]

    def called(self, method: str) -> list[tuple[str, str, int]]:
        return [c for c in self.calls if c[0] == method]

    @property
    def config(self) -> dict[str, QueueConfig]:
        """The per-queue configs (``configs``), as the operator's calls set them."""
        return self.configs

    @property
    def dead(self) -> dict[str, list[str]]:
        """The dead jobs' ids, by queue (every queue the fake knows has an entry)."""
        with self._lock:
            out: dict[str, list[str]] = {q: [] for q in self.queues()}
            for (q, job_id), j in self.jobs.items():
                if j.state == "dead":
                    out[q].append(job_id)
            return out

    def kill(self, queue: str, job_id: str, payload: Any = None, *, attempts: int = 1,
             error: str | None = None, **spec: Any) -> JobSpec:
        """Add a job that is dead already (``attempts`` tries, the last failing with ``error``)."""
        s = self.add(queue, job_id, payload, **spec)
        with self._lock:
            j = self.jobs[(queue, job_id)]
            j.state, j.attempts, j.last_error = "dead", attempts, error
        return s

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
        policy = self.policies.get(queue)
        for (q, _), j in self.jobs.items():
            if q != queue:
                continue
            if j.state == "delayed" and j.run_at_ms <= now:
                j.state, j.seq = "ready", next(self._seq)
            elif j.state == "leased" and j.deadline_ms <= now:
                j.state = "dead" if j.attempts >= attempts_allowed(j.spec.max_attempts, policy) else "ready"
                j.seq = next(self._seq)

    def lease(self, queue: str, n: int, lease_ms: int | None, worker_id: str,
              policy_attempts: int | None = None) -> list[LeasedJob]:
        with self._lock:
            self.broken.check("lease")
            self.calls.append(("lease", queue, n))
            if policy_attempts is not None:  # lease.lua's ARGV[4]: kept per queue, 0 forgets it
                if policy_attempts:
                    self.policies[queue] = policy_attempts
                else:
                    self.policies.pop(queue, None)
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
                                     cancel_requested=j.cancel_requested,
                                     traceparent=j.spec.traceparent))
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
            if j.cancel_requested and not permanent:  # removed, as fail.lua does: never dead
                j.state = "done"
                self.settle_entries.append(f"cancelled:0:{job_id}")
                return "cancelled"
            if permanent or j.attempts >= _ceiling(j.spec, MAX_ATTEMPTS):
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

    def cancel(self, queue: str, job_id: str, settle: bool = False, cancelled: bool = False) -> str:
        with self._lock:
            if self.down is not None:
                raise self.down
            j = self.jobs.get((queue, job_id))
            if j is None or j.state == "done":
                raise JobNotFound(f"job {job_id} is not in {queue}", job_id=job_id)
            if j.state == "dead" and not cancelled:
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
                              oldest_ready_age_ms=oldest, config=self.get_config(queue),
                              finished=self.finished.get(queue, FinishedCounts()),
                              used_bytes=self.used.get(queue, 0))

    def dead_letters(self, queue: str, limit: int = 100) -> list[DeadJob]:
        return [DeadJob(job_id=j.spec.job_id, queue=q, attempts=j.attempts, last_error=j.last_error,
                        died_at_ms=0) for (q, _), j in self.jobs.items() if q == queue and j.state == "dead"]

    def list_jobs(self, queue: str, state: str, limit: int = 50, cursor: str | None = None,
                  prefix: str | None = None) -> listing.JobPage:
        """Redis's listing (``RedisAdmin.list_jobs``) over the fake's jobs: the same checks and
        pagination, each state's score as Redis keeps it (finished: the fake's ``done`` jobs)."""
        state, limit = listing.check_state(state), listing.check_limit(limit)
        start, prefix = listing.parse_cursor(cursor), listing.check_prefix(prefix)
        own = "done" if state == "finished" else state
        with self._lock:
            jobs = {j.spec.job_id: j for (q, _), j in self.jobs.items() if q == queue and j.state == own}

        def score(j: QJob) -> int:
            return {"ready": (9 - j.spec.priority) * 2 ** 44 + j.seq, "delayed": j.run_at_ms,
                    "leased": j.deadline_ms}.get(state, j.seq)

        rows = sorted(((i, int(score(j))) for i, j in jobs.items()), key=lambda r: (r[1], r[0].encode()),
                      reverse=True)
        rest = [r for r in rows if listing.after(start, r[1], r[0])]
        scores = dict(rest)
        picked, boundary, examined = listing.paginate(lambda o, n: [m for m, _ in rest[o:o + n]], prefix,
                                                      limit)
        after = None if boundary is None else listing.encode_cursor(scores[boundary], boundary)
        out = [listing.ListedJob(job_id=i, state=state, at_ms=None if state == "ready" else scores[i],
                                 enqueued_at_ms=jobs[i].spec.enqueued_at_ms, priority=jobs[i].spec.priority,
                                 attempts=jobs[i].attempts, group=jobs[i].spec.group,
                                 last_error=jobs[i].last_error, payload=jobs[i].spec.payload)
               for i in picked]
        return listing.JobPage(queue=queue, state=state, jobs=out, next=after, scanned=examined)

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
        """The dead job (every dead job of ``queue`` if None) back to ready; ``JobNotFound`` if it is
        not dead."""
        with self._lock:
            self.writes.append(("redrive", queue, str(job_id), str(generation)))
            keys = [key for key, j in self.jobs.items()
                    if key[0] == queue and j.state == "dead" and job_id in (None, key[1])]
            if job_id is not None and not keys:
                raise JobNotFound(f"job {job_id} is not dead-lettered in {queue}", job_id=job_id)
            for key in keys:
                j = self.jobs[key]
                j.state, j.attempts, j.last_error, j.run_at_ms = "ready", 0, None, 0
            return len(keys)

    def purge_dead(self, queue: str) -> int:
        with self._lock:
            self.writes.append(("purge_dead", queue))
            keys = [key for key, j in self.jobs.items() if key[0] == queue and j.state == "dead"]
            for key in keys:
                del self.jobs[key]
            return len(keys)

    def get_config(self, queue: str) -> QueueConfig:
        return self.configs.get(queue, QueueConfig())

    def set_config(self, queue: str, **changes: Any) -> QueueConfig:
        with self._lock:
            self.writes.append(("set_config", queue, *sorted(changes)))
            self.configs[queue] = self.get_config(queue).model_copy(update=changes)
            return self.configs[queue]

    def queues(self) -> list[str]:
        return sorted({q for q, _ in self.jobs} | set(self.configs))

    # The admission view's reads (``sluice.gateway.admission.ViewSource``), as RedisQueue answers them.
    def registry(self, queue: str) -> tuple[bool, int]:
        return queue in self.registered, len(self.registered)

    def memory_percent(self) -> float | None:
        return self.memory

    def register(self, queue: str) -> bool:
        """The gateway's reservation (register.lua, mode limit): ``max_queues`` public names at most."""
        if self.down is not None:
            raise self.down
        if queue in self.registered:
            return False
        public = {q for q in self.registered if not is_reserved_queue(q)}
        if self.max_queues and len(public) >= self.max_queues:
            raise QueueNotAllowed(f"QUEUE_NOT_ALLOWED: registry full: a new queue would pass the limit "
                                  f"limit={self.max_queues}", queue=queue)
        self.registered.add(queue)
        return True


if TYPE_CHECKING:  # each fake is its port's: mypy --strict checks these, nothing runs them
    from sluice.core import ports
    from sluice.gateway.admission import ViewSource

    _QUEUE: ports.JobQueue = FakeQueue()
    _VIEW: ViewSource = FakeQueue()  # the gateway's admission view reads the same queue
