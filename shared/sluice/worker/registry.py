"""The worker: a registry of handlers per queue, and the loop that drains queues through them.

    app = sluice.Worker()

    @app.handler("thumbnails", timeout_s=60)
    def make_thumbnail(job: sluice.Job, ctx: sluice.JobContext) -> dict: ...

    @app.handler("resize", model=Resize)  # a pydantic model: the handler gets a validated Resize
    def resize(req: Resize, ctx: sluice.JobContext) -> dict: ...

The same ``app`` runs in the worker Lambda (``drain`` with the invocation's
remaining time) and in a long-running process (``run``). It talks to Redis and
DynamoDB only through the ``JobQueue`` and ``JobStore`` ports, bound with
``bind`` (the Lambda entry does that from Settings via ``sluice.entry.root``).
Per-job mechanics live in ``sluice.worker.runtime``.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, overload

from pydantic import BaseModel

from sluice.core import bus as ev
from sluice.core.errors import InvalidInput, SluiceError
from sluice.core.families import FamilyGateway, FamilyStore
from sluice.core.lazy import Lazy, resolve
from sluice.core.models import LeasedJob, validate_public_queue
from sluice.core.policy import RetryPolicy
from sluice.core.ports import JobQueue, JobStore, PayloadStore, WorkWaiter
from sluice.core.traces import HandlerTraces
from sluice.worker.countdown import RoundCountdown
from sluice.worker.runtime.budget import RemainingMs, TimeBudget
from sluice.worker.runtime.context import FencedTableFactory, JobContext
from sluice.worker.runtime.execute import JobRunner
from sluice.worker.runtime.finish import Finisher
from sluice.worker.runtime.heartbeat import Heartbeat, Tracked
from sluice.worker.runtime.observers import observe
from sluice.worker.runtime.options import AnyHandler, Handler, HandlerSpec, WorkerOptions, timeout_ms_of
from sluice.worker.runtime.outcomes import Outcome
from sluice.worker.runtime.telemetry import Telemetry
from sluice.worker.runtime.typed import schema_copy

if TYPE_CHECKING:
    from sluice.core.declared import Declared

H = TypeVar("H", bound=Handler)
M = TypeVar("M", bound=BaseModel)
R = TypeVar("R")
MAX_WAIT_MS = 4_000  # one blocking wait (the engine's bound, below its socket timeout)


def default_worker_id() -> str:
    return f"{socket.gethostname()[:64]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass
class DrainSummary:
    """What one ``drain`` did; the worker Lambda returns ``as_dict()``."""

    leased: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    stopped: str = ""  # batch | empty | time | stop | error
    skipped_for_time: list[str] = field(default_factory=list)
    error: str | None = None
    elapsed_ms: int = 0

    def add(self, outcome: Outcome) -> None:
        self.outcomes[outcome.value] += 1

    def merge(self, other: DrainSummary) -> None:
        self.leased += other.leased
        self.outcomes.update(other.outcomes)
        self.elapsed_ms += other.elapsed_ms
        self.stopped, self.error = other.stopped, other.error or self.error

    def as_dict(self) -> dict[str, Any]:
        return {"leased": self.leased, **{o.value: self.outcomes[o.value] for o in Outcome},
                "stopped": self.stopped, "skipped_for_time": sorted(set(self.skipped_for_time)),
                "error": self.error, "elapsed_ms": self.elapsed_ms}


@dataclass
class _Session:
    """Per-drain machinery: one heartbeat thread and one runner, shared by every job.

    ``events`` is the drain's own bus: this worker's telemetry observes it (metrics and
    lifecycle logs, ``runtime.observers``), and it hands every event on to ``Worker.events``,
    which bound copies of one app share: so each drain counts only its own jobs.

    The runner and finisher need the store; they are built on the first leased job
    (``settle``), so a drain of an empty queue never builds a store held lazily (the
    worker Lambda's: boto3 and a DynamoDB client cost a cold start ~240 ms of CPU).
    """

    def __init__(self, queue: JobQueue, heartbeat: Heartbeat,
                 settle: Lazy[tuple[JobRunner, Finisher]], pool: ThreadPoolExecutor | None,
                 events: ev.EventBus) -> None:
        self.queue, self.heartbeat, self.settle = queue, heartbeat, settle
        self.pool, self.events = pool, events

    @property
    def runner(self) -> JobRunner:
        return self.settle.get()[0]

    @property
    def finisher(self) -> Finisher:
        return self.settle.get()[1]


class Worker:
    """The handlers and the drains that run them; what happens to each job is emitted on three buses.

    - The app's bus, ``events``: the one bus a worker part builds itself, because the user's
      ``app = sluice.Worker()`` is made when its handlers module is imported, before any
      composition root runs (a caller may hand one in). The app's own subscribers go there
      (a test's or the chaos run's fault points, the worker entry's per-queue metrics), and the
      worker entry forwards it, once per app, to the process's bus (``sluice.entry.worker.prepare``).
      Bound copies (``bind``) share it.
    - A drain's bus (``_open``): every event of one drain is emitted there first and forwarded to
      the app's bus, then heard by the drain's own subscribers: the metrics and logs of its
      telemetry and worker id, and the countdown over its store. Drains of one app may run at once
      (bound copies in threads), and each must observe only its own jobs; the bus ends with the
      drain, so nothing has to be unsubscribed. The heartbeat, the finisher and the fenced tables
      are handed it.
    - The process's bus (``sluice.entry.root.events``), which only the composition root builds.
    """

    def __init__(self, *, queue: JobQueue | None = None, store: JobStore | Lazy[JobStore] | None = None,
                 options: WorkerOptions | None = None, telemetry: Telemetry | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 worker_id: str | None = None,
                 fenced: FencedTableFactory | None = None, events: ev.EventBus | None = None,
                 family_gateway: FamilyGateway | None = None,
                 families: FamilyStore | Lazy[FamilyStore] | None = None,
                 payloads: PayloadStore | Lazy[PayloadStore] | None = None,
                 traces: HandlerTraces | None = None) -> None:
        self._handlers: dict[str, HandlerSpec] = {}
        self._schedules: dict[tuple[str, str], Declared] = {}  # (queue, name): declared in code
        self.queue = queue
        self.store = store
        self.options = options or WorkerOptions()
        self._telemetry = telemetry
        self.worker_id = worker_id or default_worker_id()
        self._fenced = fenced
        self.events = events if events is not None else ev.EventBus()  # what happens to each job
        self.family_gateway = family_gateway  # the gateway's family entry: ctx.enqueue, continuations
        # The jobs table's families, on the same store as ``store`` (its grants name each job's
        # continuation): ctx.children(), and the countdown of the children that end here.
        self.families = families
        self.payloads = payloads  # where large payloads live (sluice.core.payloads); None: all inline
        # The handler spans of the process's tracing observer (sluice.backends.otel), which the
        # composition root subscribed; None: ctx.traceparent is the job's own.
        self.traces = traces
        self._clock = clock  # monotonic seconds: leases, timeouts, lingering (tests inject one)

    # -- registration ---------------------------------------------------------------------------

    @overload
    def handler(self, queue: str, *, timeout_s: float | None = None,
                model: None = None, retry: RetryPolicy | None = None) -> Callable[[H], H]: ...

    @overload
    def handler(self, queue: str, *, timeout_s: float | None = None,
                model: type[M], retry: RetryPolicy | None = None,
                ) -> Callable[[Callable[[M, JobContext], R]], Callable[[M, JobContext], R]]: ...

    def handler(self, queue: str, *, timeout_s: float | None = None, model: type[BaseModel] | None = None,
                retry: RetryPolicy | None = None) -> Callable[[Any], Any]:
        """Register the decorated function for ``queue``; ``timeout_s`` is its hard timeout.

        With ``model`` (a pydantic model) the function takes the payload validated as that
        model, ``fn(payload: Model, ctx)``; a payload that does not validate fails the job at
        once, not retried, with the validation errors as its reason (docs/worker.md).
        ``retry`` (a ``sluice.RetryPolicy``) is the default retry policy of its jobs."""
        def register(fn: Any) -> Any:
            self.register(queue, fn, timeout_s=timeout_s, model=model, retry=retry)
            return fn
        return register

    def register(self, queue: str, fn: AnyHandler, *, timeout_s: float | None = None,
                 model: type[BaseModel] | None = None, retry: RetryPolicy | None = None) -> None:
        if queue in self._handlers:
            raise InvalidInput(f"a handler for queue {queue!r} is already registered")
        self._handlers[queue] = HandlerSpec(queue, fn, timeout_ms_of(timeout_s), model=model, retry=retry)

    @property
    def handlers(self) -> Mapping[str, HandlerSpec]:
        return dict(self._handlers)

    def schemas(self) -> dict[str, dict[str, Any]]:
        """Each typed queue's JSON Schema (``model.model_json_schema()``), by queue name.

        A team's deployment publishes these next to its routes; the gateway refuses a payload
        that does not match with a 400 before it reaches Kafka. Each call returns fresh copies."""
        return {q: schema_copy(spec.schema) for q, spec in self._handlers.items() if spec.schema is not None}

    def schedule(self, name: str, expression: str, *, queue: str, payload: Any = None) -> None:
        """Declare a schedule: each firing of ``expression`` (EventBridge Scheduler's ``rate(...)`` or
        ``cron(...)``, UTC, at most once a minute) enqueues ``payload`` (JSON, or a pydantic model)
        on ``queue``, one of this team's queues. The deploy registers it (the registrar): created,
        updated and removed as the code changes (docs/worker.md, "Schedules in code")."""
        from sluice.core.declared import Declared

        declared = Declared.of(name, expression, queue, payload)
        if declared.key in self._schedules:
            raise InvalidInput(f"schedule {queue}/{name} is already declared")
        self._schedules[declared.key] = declared

    def declared_schedules(self) -> list[Declared]:
        """The schedules this module declares (``schedule``), by queue and name."""
        return [self._schedules[k] for k in sorted(self._schedules)]

    def bind(self, *, queue: JobQueue | None = None, store: JobStore | Lazy[JobStore] | None = None,
             options: WorkerOptions | None = None, telemetry: Telemetry | None = None,
             clock: Callable[[], float] | None = None,
             worker_id: str | None = None,
             fenced: FencedTableFactory | None = None, events: ev.EventBus | None = None,
             family_gateway: FamilyGateway | None = None,
             families: FamilyStore | Lazy[FamilyStore] | None = None,
             payloads: PayloadStore | Lazy[PayloadStore] | None = None,
             traces: HandlerTraces | None = None) -> Worker:
        """A copy of this worker with the same handlers and the given adapters and knobs."""
        bound = Worker(queue=queue or self.queue, store=store or self.store,
                       options=options or self.options, telemetry=telemetry or self._telemetry,
                       worker_id=worker_id or self.worker_id,
                       fenced=fenced or self._fenced, events=events or self.events,
                       family_gateway=family_gateway or self.family_gateway,
                       families=families or self.families, payloads=payloads or self.payloads,
                       traces=traces or self.traces)
        bound._handlers = dict(self._handlers)
        bound._schedules = dict(self._schedules)
        bound._clock = self._clock if clock is None else clock
        return bound

    @property
    def telemetry(self) -> Telemetry:
        if self._telemetry is None:
            self._telemetry = Telemetry()  # Powertools; built lazily so importing is cheap
        return self._telemetry

    # -- draining -------------------------------------------------------------------------------

    def drain(self, queues: Iterable[str], batch: int, remaining_ms: RemainingMs | None = None, *,
              stop: threading.Event | None = None) -> DrainSummary:
        """Lease and run up to ``batch`` jobs from ``queues``, round-robin, then return.

        With ``remaining_ms`` (Lambda's ``context.get_remaining_time_in_millis``) it
        leases only jobs whose hard timeout plus ``options.margin_ms`` fits in the time
        left, and releases any lease it will not finish before returning.
        """
        names = [validate_public_queue(q) for q in queues]
        if not names or isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise InvalidInput("drain needs at least one queue and a batch of at least 1")
        session = self._open()
        try:
            return self._drain(session, names, batch, TimeBudget(remaining_ms, self.options.margin_ms),
                               stop or threading.Event())
        finally:
            self._close(session)

    def run(self, queues: Iterable[str], *, stop: threading.Event, idle_s: float = 0.2,
            max_jobs: int | None = None) -> DrainSummary:
        """Drain forever (a worker process) until ``stop`` is set or ``max_jobs`` were leased."""
        names = [validate_public_queue(q) for q in queues]
        total = DrainSummary()
        session = self._open()
        try:
            while not stop.is_set() and (max_jobs is None or total.leased < max_jobs):
                want = self.options.lease_batch if max_jobs is None else max_jobs - total.leased
                one = self._drain(session, names, min(want, self.options.lease_batch),
                                  TimeBudget(None, 0), stop)
                total.merge(one)
                if one.leased == 0:
                    stop.wait(idle_s)
        finally:
            self._close(session)
        return total

    def _open(self) -> _Session:
        queue, store = self.queue, self.store
        if queue is None or store is None:
            raise SluiceError("the worker is not bound to a queue and a store; call bind(queue=, store=)")
        tel = self.telemetry
        bus = ev.EventBus()  # the drain's (the class's docstring says why a drain has a bus of its own)
        bus.subscribe(self.events.emit)  # first: the process's subscribers (a nemesis) see it first
        observe(bus, tel, self.worker_id)
        hb = Heartbeat(queue, heartbeat_fraction=self.options.heartbeat_fraction, clock=self._clock,
                       events=bus)

        def settle() -> tuple[JobRunner, Finisher]:
            built = resolve(store)
            finisher = Finisher(queue, built, hb, attempts=self.options.settle_attempts,
                                retry_base_ms=self.options.retry_base_ms,
                                retry_cap_ms=self.options.retry_cap_ms, events=bus)
            fenced = self._fenced or self._store_tables(built, bus)
            runner = JobRunner(finisher, built, self.options, self.worker_id, fenced=fenced,
                               family_gateway=self.family_gateway, families=self.families, clock=self._clock,
                               payloads=self.payloads, traces=self.traces)
            # A child that ends here counts down its continuation when its round ends (worker.countdown):
            # a drain's subscriber.
            if self.family_gateway is not None and self.families is not None:
                RoundCountdown(resolve(self.families), self.family_gateway.release).subscribe(bus)
            return runner, finisher

        parts: Lazy[tuple[JobRunner, Finisher]] = Lazy(settle)
        if not isinstance(store, Lazy) or store.built:
            parts.get()  # nothing to save: built now, as before
        pool = None
        if self.options.concurrency > 1:
            pool = ThreadPoolExecutor(self.options.concurrency, thread_name_prefix="sluice-slot")
        hb.start()
        return _Session(queue, hb, parts, pool, bus)

    def _store_tables(self, store: JobStore, events: ev.EventBus) -> FencedTableFactory:
        """The store's fenced tables, reporting their writes on the drain's events."""

        def fenced_table(name: str, job_id: str, token: int) -> Any:
            return store.fenced_table(name, job_id, token, events=events)

        return fenced_table

    def _close(self, session: _Session) -> None:
        if session.pool is not None:
            session.pool.shutdown(wait=True)
        # The last line of "never strand a job": whatever is still held (only an
        # unexpected error can leave one) goes back now, before Lambda freezes us.
        for tracked in session.heartbeat.held():
            try:
                session.finisher.release(tracked, tracked.log, None, "the drain ended without finishing it")
            except Exception as exc:
                tracked.log.error("could not release a held lease: %s", exc)
        session.heartbeat.stop()
        try:
            self.telemetry.metrics.flush()
        except Exception:  # metrics must never fail a drain
            self.telemetry.logger.exception("could not flush metrics")

    def _drain(self, session: _Session, queues: list[str], batch: int, budget: TimeBudget,
               stop: threading.Event) -> DrainSummary:
        summary = DrainSummary()
        started = self._clock()
        left, reason = batch, ""
        idle_since: float | None = None
        lingers = self._lingers(session, queues)
        while not reason:
            left, leased_any, skipped = self._round(session, queues, left, budget, stop, summary)
            if summary.error:
                reason = "error"
            elif stop.is_set():
                reason = "stop"
            elif left <= 0:
                reason = "" if lingers else "batch"
                left = batch  # a lingering drain goes on while its queue has work: batch is per round
            elif leased_any:
                idle_since = None
            elif skipped == len(queues):
                reason = "time"
            else:
                idle_since = self._clock() if idle_since is None else idle_since
                if not (lingers and self._linger(session, queues[0], budget, idle_since)):
                    reason = "empty"
        summary.stopped = reason
        summary.elapsed_ms = int((self._clock() - started) * 1000)
        return summary

    def _round(self, session: _Session, queues: list[str], left: int, budget: TimeBudget,
               stop: threading.Event, summary: DrainSummary) -> tuple[int, bool, int]:
        """One lease-and-run pass over ``queues``: (jobs still allowed, leased any, queues skipped
        for lack of time). A failed lease sets ``summary.error``."""
        leased_any, skipped = False, 0
        for name in queues:
            if left <= 0 or stop.is_set():
                break
            spec = self._handlers.get(name)
            timeout_ms = spec.timeout_for(self.options) if spec else 0
            wanted = budget.fit(timeout_ms, self.options.concurrency, min(left, self.options.lease_batch))
            if wanted == 0:
                skipped += 1
                summary.skipped_for_time.append(name)
                continue
            leased_at, lease_t0 = self._clock(), ev.wall()
            try:
                jobs = session.queue.lease(name, wanted, self.options.lease_ms, self.worker_id,
                                           None if spec is None else spec.policy_attempts)
            except SluiceError as exc:
                self.telemetry.logger.error("lease failed on %s: %s", name, exc, extra={"queue": name})
                summary.error = f"lease {name}: {exc}"
                break
            if jobs:
                self._settle(session, name, jobs)
            for j in jobs:
                session.events.emit(ev.Leased(job=j.job_id, queue=j.queue, lease=j.lease_token,
                                              attempt=j.attempt, deadline_ms=j.deadline_ms,
                                              t0=lease_t0, traceparent=j.traceparent))
            left -= len(jobs)
            summary.leased += len(jobs)
            leased_any = leased_any or bool(jobs)
            tracked = [session.heartbeat.track(j, leased_at, self._job_log(j)) for j in jobs]
            try:
                self._run_batch(session, tracked, spec, budget, stop, summary)
            finally:
                if jobs:  # what waits for the round's end (the countdown) goes now
                    session.events.emit(ev.RoundEnded(queue=name, jobs=len(jobs)))
        return left, leased_any, skipped

    def _settle(self, session: _Session, name: str, jobs: list[LeasedJob]) -> None:
        """Build the drain's store-bound parts before its first job is tracked or run; if the
        store cannot be built, hand the leases straight back (not strand them) and raise."""
        try:
            session.settle.get()
        except Exception:
            for j in jobs:
                try:
                    session.queue.release(name, j.job_id, j.lease_token)
                except SluiceError as exc:
                    self.telemetry.logger.error("could not release %s: %s", j.job_id, exc)
            raise

    def _lingers(self, session: _Session, queues: list[str]) -> bool:
        """Whether this drain waits for new jobs once its queue is empty (one queue, a queue that
        can wake it, a linger set). Draining several queues (the safety net) never lingers."""
        return self.options.linger_ms > 0 and len(queues) == 1 and isinstance(session.queue, WorkWaiter)

    def _linger(self, session: _Session, queue: str, budget: TimeBudget, idle_since: float) -> bool:
        """Wait for the relay's next push into the empty ``queue``, within the linger and the time
        budget; True to lease again. While waiting the worker is counted as idle (``idle.lua``), so
        the relay starts no new worker for the jobs it pushes: ``push.lua`` wakes this one."""
        spec = self._handlers.get(queue)
        timeout_ms = spec.timeout_for(self.options) if spec else 0
        left_ms = self.options.linger_ms - (self._clock() - idle_since) * 1000
        if budget.remaining_ms is not None:  # waking up is only worth it if a job can still fit
            left_ms = min(left_ms, budget.remaining_ms() - self.options.margin_ms - timeout_ms)
        if left_ms < 1:
            return False
        waiter = session.queue
        assert isinstance(waiter, WorkWaiter)
        try:
            waiter.idle(queue, self.worker_id, int(left_ms))
            woke = waiter.wait_for_work(queue, int(min(left_ms, MAX_WAIT_MS)), self.worker_id)
            if woke:  # busy from now on: the relay must not count on this worker for new pushes
                waiter.idle(queue, self.worker_id, 0)
        except SluiceError as exc:
            self.telemetry.logger.warning("waiting for work on %s failed: %s", queue, exc,
                                          extra={"queue": queue})
            return False
        return True

    def _job_log(self, job: LeasedJob) -> Any:
        return self.telemetry.job_logger(job_id=job.job_id, queue=job.queue, attempt=job.attempt,
                                         lease_token=job.lease_token, worker_id=self.worker_id)

    def _run_batch(self, session: _Session, tracked: list[Tracked], spec: HandlerSpec | None,
                   budget: TimeBudget, stop: threading.Event, summary: DrainSummary) -> None:
        """Run a leased batch on ``concurrency`` slots; release whatever cannot start in time."""
        work = deque(tracked)
        lock = threading.Lock()
        timeout_ms = spec.timeout_for(self.options) if spec else 0

        def slot() -> None:
            while True:
                with lock:
                    if not work:
                        return
                    item = work.popleft()
                outcome = self._run_one(session, item, spec, budget, stop, timeout_ms)
                with lock:
                    summary.add(outcome)

        if session.pool is None or len(tracked) <= 1:
            slot()
            return
        futures = [session.pool.submit(slot) for _ in range(min(self.options.concurrency, len(tracked)))]
        for f in futures:
            f.result()

    def _run_one(self, session: _Session, item: Tracked, spec: HandlerSpec | None, budget: TimeBudget,
                 stop: threading.Event, timeout_ms: int) -> Outcome:
        if stop.is_set():
            return session.finisher.release(item, item.log, None, "the worker is stopping")
        if not budget.can_start(timeout_ms):
            return session.finisher.release(item, item.log, None, "not enough time left to finish it")
        try:
            return session.runner.run(item, spec)
        except Exception as exc:  # a bug or an untranslated client error: never strand the job
            item.log.exception("unexpected error while running the job: %s", exc)
            if item.active:
                return session.finisher.release(item, item.log, None, f"unexpected error: {exc}")
            return Outcome.UNSETTLED

