"""The ports the core talks through. Adapters implement them; tests use fakes.

Each Protocol is small on purpose: a use-case depends only on the methods it calls.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

from sluice.core.bus import EventBus
from sluice.core.endings import Settled
from sluice.core.models import (
    DeadJob,
    Extended,
    JobRecord,
    JobSpec,
    LeasedJob,
    QueueConfig,
    QueueStats,
    SettleEntry,
    WriteOutcome,
)

if TYPE_CHECKING:  # annotations only: a function loads these with the use cases that call them (cold start)
    from sluice.core.depth import DepthHistory
    from sluice.core.listing import JobPage
    from sluice.core.schedules import Schedule
    from sluice.core.throttle import CallerLimit, Verdict


class CallerThrottle(Protocol):
    """The callers' shared token buckets (``backends.redis.throttle.RedisCallerThrottle``; issue 27)."""

    def take(self, identity: str, limit: CallerLimit, size: int) -> Verdict: ...


class Clock(Protocol):
    def now_ms(self) -> int: ...
    def monotonic(self) -> float: ...
    def sleep(self, seconds: float) -> None: ...


@runtime_checkable
class WorkWaiter(Protocol):
    """A queue a worker can wait on for new jobs (``RedisJobQueue``): the worker's linger."""

    def idle(self, queue: str, worker_id: str, ms: int) -> int: ...
    def wait_for_work(self, queue: str, timeout_ms: int, worker_id: str = "") -> bool: ...


class JobQueue(Protocol):
    """The Redis lease engine as workers and the gateway use it (``backends.redis.queue.RedisJobQueue``)."""

    def enqueue(self, spec: JobSpec) -> bool:
        """True if newly added, False if a job with that id already existed."""
        ...

    def lease(self, queue: str, n: int, lease_ms: int | None, worker_id: str,
              policy_attempts: int | None = None) -> list[LeasedJob]:
        """``lease_ms`` None leases each job for its own ``lease_ms``. ``policy_attempts``: the
        queue's handler's retry policy's ``max_attempts`` (0: none), which the queue keeps to end a
        lapsed lease's job as ``policy.attempts_allowed`` says; None tells nothing."""
        ...
    def extend(self, queue: str, job_id: str, lease_token: int, lease_ms: int) -> Extended:
        """Raises LeaseLost unless ``lease_token`` still holds the lease."""
        ...

    def ack(self, queue: str, job_id: str, lease_token: int) -> None: ...
    def fail(self, queue: str, job_id: str, lease_token: int, error: str,
             retry_after_ms: int | None = None, permanent: bool = False) -> str:
        """Returns "retry" or "dead". ``retry_after_ms`` comes from policy.backoff_ms; None = now."""
        ...

    def release(self, queue: str, job_id: str, lease_token: int) -> None: ...
    def cancel(self, queue: str, job_id: str, settle: bool = False, cancelled: bool = False) -> str:
        """Returns "removed" (was waiting) or "requested" (leased; the worker will see it).
        ``settle``: the store says leased, so a removal also records a settle entry.
        ``cancelled``: the store says cancelled, so a dead-lettered job is removed too (it is no
        dead job); otherwise a dead one is AlreadyFinished."""
        ...

    def reap(self, queue: str, limit: int) -> int: ...
    def holds(self, queue: str, job_id: str) -> bool:
        """Whether the job is live in Redis (ready, delayed or leased)."""
        ...

    def stats(self, queue: str) -> QueueStats: ...
    def overdue_leases(self, queue: str) -> int:
        """Leases past their deadline not yet reaped (Redis's clock)."""
        ...

    def dead_letters(self, queue: str, limit: int = 100) -> list[DeadJob]: ...
    def list_jobs(self, queue: str, state: str, limit: int = 50, cursor: str | None = None,
                  prefix: str | None = None) -> JobPage:
        """One page of the queue's jobs in ``state``, newest first (``sluice.core.listing``)."""
        ...

    def dead_spec(self, queue: str, job_id: str) -> JobSpec:
        """A dead job as its Kafka record had it (JobNotFound if not dead), for a redrive's append."""
        ...

    def redrive(self, queue: str, job_id: str | None = None, generation: int = 0) -> int:
        """Dead -> ready. Queues with a jobs table go through ``sluice.gateway.redrive`` (generation)."""
        ...

    def purge_dead(self, queue: str) -> int: ...
    def get_config(self, queue: str) -> QueueConfig: ...
    def set_config(self, queue: str, **changes: Any) -> QueueConfig: ...
    def queues(self) -> list[str]: ...


class JobStore(Protocol):
    """The DynamoDB jobs table: status for users, fencing-token authority for workers."""

    def mark_queued(self, jobs: Sequence[tuple[str, str, int]]) -> None:
        """(job_id, queue, enqueued_at_ms) of jobs the relay moved from accepted to queued."""
        ...

    def grant(self, job_id: str, queue: str, owner: str, redrive_gen: int = 0, *,
              lease_token: int | None = None) -> int:
        """Mint the next fencing token for a new lease; strictly increasing per job.
        A failed/dead item only for a newer ``redrive_gen`` (else AlreadyFinished); never for a
        ``lease_token`` older than the one granted last (LeaseLost)."""
        ...

    def write_result(self, job_id: str, token: int, result: Any) -> WriteOutcome: ...
    def write_result_unfenced(self, job_id: str, token: int, result: Any) -> None:
        """The bug, kept for the gc-pause scenario's --no-fencing mode only."""
        ...

    def record_failure(self, job_id: str, token: int, error: str, status: str) -> None: ...
    def release(self, job_id: str, token: int) -> None: ...
    def get_job(self, job_id: str) -> JobRecord: ...
    def request_cancel(self, job_id: str) -> JobRecord: ...
    def honour_cancel(self, job_id: str) -> JobRecord:
        """End a cancel-requested job nobody will run any more as cancelled."""
        ...

    def redrive(self, job_id: str) -> int:
        """Mint the job's next redrive generation (before Redis moves it out of dead)."""
        ...

    def cancel_unrecorded(self, job_id: str, queue: str, reason: str, created_at_ms: int = 0) -> JobRecord:
        """Cancel a job that may have no item yet: creates a cancelled one, else request_cancel."""
        ...

    def settle_ended(self, ended: SettleEntry) -> Settled:
        """Record a job Redis ended (dead, cancelled) unless its item is already final (a redriven
        item whose redriven attempt was never granted is not: ``core.endings``). ``Settled.FINAL``:
        the item is succeeded or cancelled, so a dead job Redis holds for it is residue."""
        ...

    def refuse_record(self, job_id: str, queue: str, reason: str, created_at_ms: int = 0, *,
                      queued: bool = False) -> bool:
        """End ``dead`` with ``reason`` a job whose record the relay refused (its seal or its age),
        while it has no item or an ``accepted`` one (``queued``: or a queued one); True if written."""
        ...

    def final_job_ids(self, job_ids: Iterable[str]) -> set[str]:
        """The ids whose item is in a final state."""
        ...

    def relay_view(self, job_ids: Iterable[str]) -> tuple[set[str], dict[str, int]]:
        """The relay's read: the ids whose jobs are done with (final, and not redriven since they
        last ran), and the redrive generation of every job that has one."""
        ...

    def write_progress(self, job_id: str, token: int, fraction: float, detail: str = "") -> None:
        """A lease holder's progress (``ctx.progress``), fenced on its token as its result is."""
        ...

    def fenced_table(self, table_name: str, job_id: str, token: int, *, events: EventBus) -> Any:
        """A holder's view of another DynamoDB table (``ctx.fenced_table``): each write carries
        its fencing token and is refused once a newer one wrote; each reported on ``events``."""
        ...


class QueueDirectory(Protocol):
    """The durable registry of queues (DynamoDB's queues table, issue 28): every queue a gateway
    reserved, whatever Redis lost. Redis holds its cache, which also decides the limit."""

    def put(self, queue: str) -> None:
        """Record ``queue`` (idempotent: an existing item and its state are left as they are)."""
        ...

    def names(self) -> list[str]:
        """Every queue recorded, by name."""
        ...

    def parked(self) -> dict[str, ParkedState]:
        """Every queue recorded, with its parking state (one read of the registry, as ``names``)."""
        ...

    def parked_of(self, queue: str) -> ParkedState:
        """One queue's parking state (``ParkedState()`` when it has none)."""
        ...

    def sensitive_of(self, queue: str) -> tuple[str, ...]:
        """The payload fields an operator marked sensitive for ``queue`` (checked JSON pointers,
        ``sluice.core.listing.check_sensitive``), kept here so a Redis loss cannot unmark them."""
        ...

    def set_sensitive(self, queue: str, fields: Sequence[str]) -> None: ...


class JobLog(Protocol):
    """The durable append-only log (Kafka)."""

    def append(self, specs: Sequence[JobSpec]) -> None:
        """Returns only after every record is acknowledged; raises BackendUnavailable."""
        ...


class DepthLog(Protocol):
    """A queue's depth over the last hour with its jobs' enqueue-to-start waits
    (``sluice.core.depth``): the relay records a sample, the operator API reads the hour."""

    def record(self, queue: str, ready: int, delayed: int, leased: int, dead: int) -> bool: ...
    def read(self, queue: str) -> DepthHistory: ...


class TimelineLog(Protocol):
    """A job's timeline (``sluice.core.timeline``): capped and expiring, written by its workers,
    read by the operator API (issue 32)."""

    def append(self, queue: str, job_id: str, entries: Sequence[str]) -> None: ...
    def read(self, queue: str, job_id: str) -> list[dict[str, Any]]: ...


class SourceRecord(NamedTuple):
    """One record of the job topic as the relay reads it (``sluice.relay.ports.RecordSource``, which
    the Kafka adapter implements): no client library types leak past the adapter.
    A tuple: the adapter builds one per record (a frozen dataclass costs about 3 times more)."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


class ParkedState(NamedTuple):
    """A queue's parking state in the durable registry (``relay/parked_counts.py`` keeps it): about
    how many of its records are in the parking lot (a counter, at least 0), and when one last
    parked (epoch ms; 0: never)."""

    parked: int = 0
    parked_at_ms: int = 0


class ParkedRecord(NamedTuple):
    """A held record as the parking lot keeps it: the raw Kafka record (its key and value, decoded
    and seal-checked again when it comes back) and what the lot's sweep needs without decoding it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes
    job_id: str
    enqueued_at_ms: int
    run_at_ms: int
    # Where the lot keeps it, when that is not an item of its own: (its item's sort key, the records
    # that item holds). The DynamoDB lot packs a park call's records into segments
    # (backends/dynamodb/segments.py) and deletes a segment only once all of them are released.
    item: tuple[str, int] | None = None

    def record(self) -> SourceRecord:
        return SourceRecord(self.partition, self.offset, self.key, self.value)

    @property
    def due_key(self) -> tuple[int, int]:
        """Its place in its delay lane: by run time, then offset (``ParkingLot.due``)."""
        return self.run_at_ms, self.offset


# A partition's marker for a queue's delay lane is this prefix and the queue's name (its ordered
# lane's marker is the name alone; queue names never start with "~").
DELAY_MARKER = "~d#"


class ParkedPage(NamedTuple):
    """A page of a queue's parked records, the lot's order read backwards (``ParkedJobs.newest``):
    each record with whether it waits in a delay lane (True) or a held queue's lane (False); the
    place the next page starts after (a lot's place, ``listing.LotPlace``; None: no more); how
    many records the page examined."""

    records: list[tuple[ParkedRecord, bool]]
    next: tuple[str, int] | None
    examined: int


class ParkedJobs(Protocol):
    """The parking lot as the operator's listing reads it (``state=parked``; issue 32's review):
    read only, a queue's records newest first in the lot's order. Raises a ``SluiceError`` when the
    lot cannot be reached."""

    def newest(self, queue: str, after: tuple[str, int] | None, limit: int,
               prefix: str | None = None) -> ParkedPage:
        """At most ``limit`` records of ``queue`` after ``after`` (a page's ``next``; None: from the
        newest), whose job id starts with ``prefix``; a page examines at most
        ``listing.SCAN_MOST`` records (and the rest of the last item it read)."""
        ...


class Dispatcher(Protocol):
    """Starts workers for a queue: Lambda async invokes in AWS, processes locally."""

    def dispatch(self, queue: str, invocations: int, batch: int) -> int: ...


class PayloadStore(Protocol):
    """Where payloads too large for Redis live (S3: ``sluice.backends.aws.payloads``), by the key
    ``sluice.core.payloads.payload_key`` derives from the job."""

    def put(self, key: str, body: bytes) -> None:
        """Stored, or raises (BackendUnavailable, StoreError): nothing may be appended then."""
        ...

    def get(self, key: str) -> bytes:
        """The object's bytes; PayloadUnavailable if there is none."""
        ...


class ResultSink(Protocol):
    """Where large results go (S3)."""

    def put(self, key: str, body: bytes) -> str: ...
    def get(self, ref: str) -> bytes: ...


class Metrics(Protocol):
    def count(self, name: str, value: float = 1, **dimensions: str) -> None: ...


class ScriptLoader(Protocol):
    """Puts Lua texts into Redis's script cache: SCRIPT LOAD itself (a Sluice function's user), or,
    for a worker, whose user may not (docs/security.md), the internal function's load, which takes
    only shipped worker scripts (``sluice.core.script_loads``)."""

    def load(self, texts: Mapping[str, str]) -> None:
        """Each text (by its script's name, e.g. "lease.lua") is in the cache, or this raises
        (ScriptNotAllowed, BackendUnavailable, NotPermitted)."""
        ...



class ScheduleTrigger(Protocol):
    """What fires the schedules (EventBridge Scheduler in AWS: ``backends.dynamodb.schedules``); the
    operator API's schedules (``gateway.schedules``) and the registrar's (``registrar.schedules``)."""

    def create(self, schedule: Schedule) -> None: ...

    def set_paused(self, schedule: Schedule) -> None:
        """Restate the schedule (its pause flag, and whatever else changed)."""

    def delete(self, queue: str, name: str) -> None: ...


class ScheduleItems(Protocol):
    """The schedules table's writes that ``create_fired`` needs (the gateway's and the registrar's stores)."""

    def create(self, schedule: Schedule) -> None: ...

    def delete(self, queue: str, name: str) -> None: ...


def create_fired(store: ScheduleItems, trigger: ScheduleTrigger | None, schedule: Schedule) -> None:
    """Store ``schedule``, then create what fires it; if that fails, the item is withdrawn: no item is
    kept that nothing fires (the operator API's create and a registration's)."""
    store.create(schedule)
    if trigger is not None:
        try:
            trigger.create(schedule)
        except Exception:
            store.delete(schedule.queue, schedule.name)
            raise
