"""The pieces the job model (``test_job_model.py``) drives: a worker that can die or freeze
at any call, a relay wired with recovery around a fake Kafka source, and meters.

Nothing here replaces a sluice adapter: the wrappers pass every call through to the real
``RedisQueue`` and ``DynamoJobStore`` and only add a fault (die or freeze at one named call)
or a record of what the call returned.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sluice.backends.redis.engine import RedisQueue
from sluice.core import bus as ev
from sluice.core.bus import EventBus
from sluice.core.models import WriteOutcome
from sluice.relay import Relay
from sluice.relay.config import RelayConfig
from sluice.relay.recovery.adapters import RedisEpochs
from sluice.relay.recovery.checkpoints import DynamoCheckpoints
from sluice.relay.recovery.hook import Recovery
from sluice.worker.runtime.execute import JobRunner
from sluice.worker.runtime.finish import Finisher
from sluice.worker.runtime.heartbeat import Heartbeat, Tracked
from sluice.worker.runtime.observers import observe
from sluice.worker.runtime.options import HandlerSpec, WorkerOptions
from sluice.worker.runtime.outcomes import Fail, Retry
from sluice.worker.runtime.telemetry import MemoryMetrics, Telemetry
from sluice_dev.fakes import FakeClock, FakeSource

if TYPE_CHECKING:
    from sluice.core.endings import Settled

QUEUE = "jm"
LONG_MS = 60_000  # every lease: nothing lapses by itself; the machine lapses leases explicitly
PAGE_BYTES = 100  # checkpoint pages this small, so that a few unfinished jobs fill several of them
quiet = logging.getLogger("sluice.jobmodel")
quiet.setLevel(logging.CRITICAL)


class Died(BaseException):
    """The worker process is gone at this point: it makes no further call (not an Exception,
    so that no ``except SluiceError`` / ``except Exception`` in the runtime can catch it)."""


@dataclass(frozen=True)
class Fault:
    call: str  # grant, write_result, record_failure, release (store); ack, fail, release_q (queue);
    # "a|b": whichever of these calls the attempt makes first (its verdict write, its queue call)
    when: str  # before | after
    mode: str  # die | freeze


@dataclass(frozen=True)
class Event:
    kind: str  # grant | write | record | release
    job_id: str
    token: int
    worker: str
    detail: str = ""


@dataclass(eq=False)
class WorkerRun:
    """One leased job in the hands of one worker, and the thread running its attempt."""

    name: str
    tracked: Tracked
    fault: Fault | None = None
    state: str = "held"  # held | running | frozen | done | died
    granted: int | None = None
    verdict_written: bool = False
    thread: threading.Thread | None = None
    frozen: threading.Event = field(default_factory=threading.Event)
    thaw: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    before_loss: bool = False  # leased in a Redis that has since lost its data (tokens restart)

    @property
    def job_id(self) -> str:
        return self.tracked.leased.job_id

    @property
    def lease_token(self) -> int:
        return self.tracked.leased.lease_token


class Faulty:
    """Passes calls to ``target``; records store outcomes; dies or freezes at ``run.fault``."""

    def __init__(self, target: Any, run: WorkerRun, events: list[Event], *, names: dict[str, str]) -> None:
        self._target, self._run, self._events, self._names = target, run, events, names

    def _trigger(self, call: str, when: str) -> None:
        f = self._run.fault
        if f is None or call not in f.call.split("|") or f.when != when:
            return
        if f.mode == "die":
            self._run.state = "died"
            raise Died(f"{self._run.name} died {when} {call}")
        self._run.state = "frozen"
        self._run.frozen.set()
        self._run.thaw.wait(60)
        self._run.state = "running"

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        call = self._names.get(name)
        if call is None or not callable(attr):
            return attr

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            self._trigger(call, "before")
            out = attr(*args, **kwargs)
            self._record(name, args, out)
            self._trigger(call, "after")
            return out
        return wrapped

    def _record(self, name: str, args: tuple[Any, ...], out: Any) -> None:
        r = self._run
        if name == "grant":
            r.granted = int(out)
            self._events.append(Event("grant", args[0], int(out), r.name))
        elif name == "write_result":
            r.verdict_written = True
            if out is WriteOutcome.WRITTEN:
                self._events.append(Event("write", args[0], args[1], r.name))
        elif name in ("record_failure", "release") and hasattr(self._target, "grant"):
            r.verdict_written = True
            self._events.append(Event("record" if name == "record_failure" else "release", args[0], args[1],
                                      r.name, args[3] if name == "record_failure" else ""))


# Where in an attempt a worker dies or freezes: the machine's run_dies and run_freezes rules draw
# one of these points, whatever the handler's verdict, so that each (verdict, point) pair is as
# likely as any other (a worker that fails permanently and dies right after record_failure, bug 4,
# is one such pair; a worker that pauses between its grant and its handler, bugs 2 and 6, another).
VERDICT_WRITE = "write_result|record_failure|release"
QUEUE_CALL = "ack|fail|release_q"
POINTS = {"before_grant": ("grant", "before"), "after_grant": ("grant", "after"),
          "before_verdict": (VERDICT_WRITE, "before"), "after_verdict": (VERDICT_WRITE, "after"),
          "before_queue": (QUEUE_CALL, "before")}


def fault_at(point: str, mode: str) -> Fault:
    call, when = POINTS[point]
    return Fault(call, when, mode)


STORE_CALLS = {"grant": "grant", "write_result": "write_result", "record_failure": "record_failure",
               "release": "release"}
QUEUE_CALLS = {"ack": "ack", "fail": "fail", "release": "release_q"}


def handler_for(verdict: str, runs: list[tuple[str, int]]) -> Callable[[Any, Any], Any]:
    def handle(job: Any, ctx: Any) -> Any:
        runs.append((job.job_id, ctx.token))
        if verdict == "ok":
            return {"job": job.job_id}
        if verdict == "fail":
            raise Fail("the handler said no")
        if verdict == "retry":
            raise Retry(after=3600, reason="later")  # delayed for the whole example
        raise RuntimeError("boom")  # retried now (backoff base 0)
    return handle


class Workers:
    """Leases from the real engine and runs attempts with the real ``JobRunner``."""

    def __init__(self, engine: RedisQueue, store: Any, events: list[Event]) -> None:
        self.engine, self.store, self.events = engine, store, events
        self.tel = Telemetry(MemoryMetrics(), quiet)
        self.bus = EventBus()  # the heartbeat's and every finisher's, which the telemetry observes
        observe(self.bus, self.tel)
        self.heartbeat = Heartbeat(engine, events=self.bus)  # never started: the machine beats explicitly
        self.runs: list[tuple[str, int]] = []  # (job id, fencing token) of every handler call
        self.all: list[WorkerRun] = []
        self._names = itertools.count()

    def lease(self, n: int) -> list[WorkerRun]:
        started = time.monotonic()
        got = self.engine.lease(QUEUE, n, LONG_MS, "model")
        out = []
        for leased in got:
            log = self.tel.job_logger(job_id=leased.job_id)
            run = WorkerRun(f"w{next(self._names)}", self.heartbeat.track(leased, started, log))
            out.append(run)
        self.all.extend(out)
        return out

    def start(self, run: WorkerRun, verdict: str, fault: Fault | None) -> None:
        """Run the attempt on its own thread; return once it ended, died or froze."""
        run.fault, run.state = fault, "running"
        store = Faulty(self.store, run, self.events, names=STORE_CALLS)
        queue = Faulty(self.engine, run, self.events, names=QUEUE_CALLS)
        finisher = Finisher(queue, store, self.heartbeat, attempts=1, retry_base_ms=0,
                          retry_cap_ms=0, events=self.bus)
        runner = JobRunner(finisher, store, WorkerOptions(lease_ms=LONG_MS), run.name)
        spec = HandlerSpec(QUEUE, handler_for(verdict, self.runs), timeout_ms=20_000)

        def body() -> None:
            try:
                runner.run(run.tracked, spec)
                run.state = "done"
            except Died:
                run.state = "died"
            except BaseException as exc:
                run.error, run.state = exc, "done"

        run.thread = threading.Thread(target=body, name=run.name, daemon=True)
        run.thread.start()
        self.wait(run)

    def wait(self, run: WorkerRun) -> None:
        assert run.thread is not None
        deadline = time.monotonic() + 60
        while run.thread.is_alive() and not run.frozen.is_set():
            assert time.monotonic() < deadline, f"{run.name} neither ended nor froze"
            run.thread.join(0.005)
        if run.error is not None:
            raise run.error

    def thaw(self, run: WorkerRun) -> None:
        run.frozen.clear()
        run.fault = None
        run.thaw.set()
        self.wait(run)

    def close(self) -> None:
        for run in self.all:
            run.fault = None
            run.thaw.set()
        for run in self.all:
            if run.thread is not None:
                run.thread.join(30)


class RateMeter:
    """The relay's engine with its rate-token takes and pushes counted."""

    def __init__(self, engine: RedisQueue) -> None:
        self._engine = engine
        self.taken = 0
        self.pushed = 0

    def take_rate(self, queue: str, wanted: int) -> int:
        got = self._engine.take_rate(queue, wanted)
        self.taken += got
        return got

    def on_pushed(self, e: ev.Pushed) -> None:
        if e.outcome == "ok":
            self.pushed += e.pushed

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)


class SourceOffsets:
    """``recovery.Offsets`` over the fake source (Kafka's committed offset and seek)."""

    def __init__(self, source: FakeSource) -> None:
        self.source = source

    def committed(self, partition: int) -> int | None:
        return self.source.committed_offsets.get(partition)

    def seek(self, partition: int, offset: int) -> None:
        self.source.positions[partition] = offset


class PausableStore:
    """The relay's store; ``settle_ended`` can be made to freeze the relay just before it."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.armed = False
        self.frozen = threading.Event()
        self.thaw = threading.Event()

    def settle_ended(self, ended: Any) -> Settled:
        if self.armed:
            self.armed = False
            self.frozen.set()
            self.thaw.wait(60)
        result: Settled = self._store.settle_ended(ended)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class RelayBox:
    """One relay invocation at a time, with recovery, over the fake source."""

    def __init__(self, engine: RedisQueue, store: Any, db: Any, table: str, source: FakeSource) -> None:
        self.engine, self.db, self.table, self.source = engine, db, table, source
        self.store = PausableStore(store)
        self.meter = RateMeter(engine)
        self.n = 0
        self.relay = self._new()
        self.maint: threading.Thread | None = None

    def _new(self) -> Relay:
        self.n += 1
        recovery = Recovery(self.source.topic, RedisEpochs(self.engine.client),
                            DynamoCheckpoints(self.db, self.table, page_bytes=PAGE_BYTES,
                                              inline_bytes=PAGE_BYTES),
                            SourceOffsets(self.source), self.store, interval_s=0.0, events=EventBus())
        config = RelayConfig(batch=50, commit_s=0.0, maintenance_s=1e9, refresh_s=0.0, status_drain_s=10.0)
        bus = EventBus()
        bus.subscribe(self.meter.on_pushed, ev.Pushed)
        return Relay(self.meter, self.store, self.source, None,  # type: ignore[arg-type]
                     relay_id=f"relay-{self.n}", clock=FakeClock(), config=config, hooks=recovery,
                     events=bus)

    def restart(self) -> None:
        """The invocation ends (commit, checkpoint, partitions given back); a new one starts."""
        self.relay.stop()
        self.relay = self._new()

    def drain(self) -> tuple[int, int, int]:
        """Step until every record was read and pushed; (rate tokens taken, pushed, dropped final)."""
        before = (self.meter.taken, self.meter.pushed, self.relay.report.final_dropped)
        log = self.source.log.get(0, [])
        for _ in range(40):
            self.relay.step()
            owned = self.relay.ownership.owned
            if (owned and self.source.positions.get(0, 0) >= len(log)
                    and not any(q for o in owned.values() for q in o.pending.values())):
                break
        else:
            raise AssertionError("the relay did not catch up with the source")
        self.relay.pusher.drain()
        return (self.meter.taken - before[0], self.meter.pushed - before[1],
                self.relay.report.final_dropped - before[2])

    def maintain(self, freeze: bool) -> None:
        self.store.armed = freeze
        self.store.frozen.clear()
        self.store.thaw.clear()
        relay = self.relay
        self.maint = threading.Thread(target=lambda: relay.maintenance.run(relay.clock.monotonic()),
                                      daemon=True)
        self.maint.start()
        deadline = time.monotonic() + 60
        while self.maint.is_alive() and not self.store.frozen.is_set():
            assert time.monotonic() < deadline
            self.maint.join(0.005)
        if not self.maint.is_alive():
            self.maint = None
            self.store.armed = False

    @property
    def frozen(self) -> bool:
        return self.maint is not None

    def thaw(self) -> None:
        assert self.maint is not None
        self.store.thaw.set()
        self.maint.join(60)
        self.maint = None

    def close(self) -> None:
        if self.maint is not None:
            self.thaw()
        self.relay.stop()
