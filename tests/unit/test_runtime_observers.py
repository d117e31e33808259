"""The worker's metrics and lifecycle logs are subscribers of its events (issue 16)."""

from __future__ import annotations

import pytest

from sluice.core import bus as ev
from sluice.core.models import Job
from sluice.worker.runtime import telemetry as t
from sluice.worker.runtime.context import JobContext
from sluice.worker.runtime.observers import LogObserver, MetricsObserver, observe
from sluice.worker.runtime.telemetry import MemoryMetrics, Telemetry
from sluice_dev.fakes import CaptureLog, kit

JOB = {"job": "j", "queue": "q", "lease": 7, "attempt": 2}


def finished(outcome: str, **more: object) -> ev.Finished:
    return ev.Finished(**JOB, outcome=outcome, token=5, **more)  # type: ignore[arg-type]


@pytest.mark.parametrize(("event", "metric"), [
    (ev.Renewed(job="j", queue="q", lease=7, outcome="ok", t0=0.0), t.LEASE_EXTENSIONS),
    (ev.ResultRefused(job="j", token=5, outcome="rejected", t0=0.0, current=6), t.FENCED_WRITES_REJECTED),
    (ev.FailureRecorded(job="j", token=5, status="dead", outcome="rejected", t0=0.0),
     t.FENCED_WRITES_REJECTED),
    (ev.LeaseGone(**JOB, why="x"), t.LEASES_LOST),  # type: ignore[arg-type]
    (finished("succeeded"), t.JOBS_SUCCEEDED),
    (finished("retried"), t.JOBS_RETRIED),
    (finished("failed"), t.JOBS_FAILED),
    (finished("dead"), t.JOBS_DEAD_LETTERED),
    (finished("cancelled"), t.JOBS_CANCELLED),
    (finished("released"), t.LEASES_RELEASED),
    (ev.HandlerEnded(job="j", queue="q", token=5, outcome="raised", duration_ms=3.0, stale_token=True),
     t.FENCED_WRITES_REJECTED),
])
def test_each_counted_event_adds_one_to_its_metric(event: ev.Event, metric: str) -> None:
    m = MemoryMetrics()
    MetricsObserver(m)(event)
    assert dict(m.counts) == {metric: 1}


@pytest.mark.parametrize("event", [
    ev.Renewed(job="j", queue="q", lease=7, outcome="lost", t0=0.0),
    ev.Renewed(job="j", queue="q", lease=7, outcome="error", t0=0.0),
    ev.ResultRefused(job="j", token=5, outcome="error", t0=0.0),
    ev.ResultRefused(job="j", token=5, outcome="cancelled", t0=0.0),
    ev.FailureRecorded(job="j", token=5, status="queued", outcome="ok", t0=0.0),
    ev.LeaseGone(**JOB, why="x", again=True),  # type: ignore[arg-type]
    finished("lease_lost"),  # counted from its LeaseGone
    finished("unsettled"),
    ev.Acked(job="j", queue="q", lease=7, outcome="ok", t0=0.0),
    ev.JobEnded(job="j", queue="q", state="succeeded", source="worker"),
])
def test_other_events_count_nothing(event: ev.Event) -> None:
    m = MemoryMetrics()
    MetricsObserver(m)(event)
    assert dict(m.counts) == {}


def test_timings_come_from_the_handler_events() -> None:
    m = MemoryMetrics()
    obs = MetricsObserver(m)
    obs(ev.HandlerStarted(job="j", queue="q", token=5, attempt=1, queue_wait_ms=40))
    obs(ev.HandlerStarted(job="k", queue="q", token=5, attempt=1))  # enqueue time unknown
    obs(ev.HandlerEnded(job="j", queue="q", token=5, outcome="returned", duration_ms=12.5))
    assert dict(m.observations) == {t.QUEUE_WAIT: [40], t.JOB_DURATION: [12.5]} and not m.counts


def test_log_lines_carry_the_jobs_keys() -> None:
    log = CaptureLog()
    obs = LogObserver(log, "w-1")
    obs(ev.HandlerStarted(job="j", queue="q", token=5, attempt=2, lease=7))
    obs(ev.LeaseGone(**JOB, why="extend refused"))  # type: ignore[arg-type]
    obs(finished("retried", detail="boom", retry_after_ms=900))
    obs(finished("succeeded", detail="written"))
    obs(finished("released", detail="the worker is stopping"))
    obs(finished("cancelled"))
    obs(finished("unsettled", detail="store down"))
    obs(finished("lease_lost", detail="said by its LeaseGone"))
    assert [(x.level, x.message) for x in log.lines] == [
        ("debug", "job started"), ("warning", "lease lost: extend refused"), ("warning", "job retried: boom"),
        ("info", "job succeeded"), ("info", "lease released: the worker is stopping"),
        ("info", "job cancelled"), ("error", "job left to its lease: store down")]
    keys = {"job_id": "j", "queue": "q", "attempt": 2, "lease_token": 7, "worker_id": "w-1"}
    assert log.lines[0].extra == {**keys, "token": 5}
    assert log.lines[1].extra == keys  # the heartbeat knows no fencing token
    assert log.lines[2].extra == {**keys, "token": 5, "retry_after_ms": 900}
    assert log.lines[3].extra == {**keys, "token": 5, "write": "written"}


def info(log: CaptureLog) -> list[str]:
    return [x.message for x in log.lines if x.level != "debug"]


def test_a_job_that_succeeds_writes_one_info_line_with_its_handlers_duration() -> None:
    """Issue 33: one INFO line per plain job (it was two: "job started" as well), carrying what the
    other said and how long the handler ran."""
    log = CaptureLog()
    obs = LogObserver(log, "w-1")
    obs(ev.HandlerStarted(job="j", queue="q", token=5, attempt=2, lease=7))
    obs(ev.HandlerEnded(job="j", queue="q", token=5, outcome="returned", duration_ms=12.345))
    obs(finished("succeeded", detail="written"))
    assert info(log) == ["job succeeded"]
    assert log.lines[-1].extra == {"job_id": "j", "queue": "q", "attempt": 2, "lease_token": 7,
                                   "worker_id": "w-1", "token": 5, "write": "written", "duration_ms": 12.3}
    assert log.lines[0].level == "debug" and log.lines[0].message == "job started"
    assert not obs._running  # forgotten at its verdict


def test_a_job_still_running_at_its_first_renewal_says_so_once() -> None:
    """The jobs an operator looks for (long, stuck, in an invocation that died) keep a line before
    their end: the first renewal of a running handler's lease says "job running", with its keys."""
    log = CaptureLog()
    obs = LogObserver(log, "w-1")
    obs(ev.Renewed(job="j", queue="q", lease=7, outcome="ok", t0=0.0))  # no handler running: nothing
    obs(ev.HandlerStarted(job="j", queue="q", token=5, attempt=2, lease=7))
    obs(ev.Renewed(job="j", queue="q", lease=7, outcome="lost", t0=0.0))  # a failed renewal: not running
    obs(ev.Renewed(job="j", queue="q", lease=7, outcome="ok", t0=0.0))
    obs(ev.Renewed(job="j", queue="q", lease=7, outcome="ok", t0=0.0))
    obs(ev.Renewed(job="k", queue="q", lease=7, outcome="ok", t0=0.0))  # another job's lease
    assert info(log) == ["job running"]
    running = log.lines[-1]
    assert (running.level, running.extra) == ("info", {"job_id": "j", "queue": "q", "attempt": 2,
                                                       "lease_token": 7, "worker_id": "w-1", "token": 5})
    obs(finished("retried", detail="boom"))
    assert info(log) == ["job running", "job retried: boom"] and not obs._running


def test_handlers_without_a_verdict_are_forgotten_oldest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    from sluice.worker.runtime import observers

    monkeypatch.setattr(observers, "RUNNING_KEPT", 3)
    obs = LogObserver(CaptureLog())
    for n in range(5):
        obs(ev.HandlerStarted(job=f"j{n}", queue="q", token=1, attempt=1, lease=n))
    assert [job for job, _ in obs._running] == ["j2", "j3", "j4"]


def test_observe_attaches_both_and_detaches_them() -> None:
    bus, m, log = ev.EventBus(), MemoryMetrics(), CaptureLog()
    detach = observe(bus, Telemetry(m, log))
    bus.emit(finished("succeeded"))
    detach()
    bus.emit(finished("succeeded"))
    assert m.counts[t.JOBS_SUCCEEDED] == 1 and len(log.lines) == 1 and not bus.listening


def test_two_drains_sharing_one_apps_bus_each_count_only_their_own_jobs() -> None:
    """Bound copies share ``app.events``; each drain's telemetry observes its own session."""
    k = kit()
    k.app.register("q", lambda job, ctx: None)
    seen: list[ev.Event] = []
    k.app.events.subscribe(seen.append, ev.Finished)
    other = MemoryMetrics()
    k.queue.add("q", "a")
    k.worker().drain(["q"], 1)
    k.queue.add("q", "b")
    k.app.bind(queue=k.queue, store=k.store, telemetry=Telemetry(other, CaptureLog())).drain(["q"], 1)
    assert k.count(t.JOBS_SUCCEEDED) == 1 and other.counts[t.JOBS_SUCCEEDED] == 1
    assert [e.job for e in seen] == ["a", "b"]  # the app's bus still hears both
    assert len(k.app.events._subs) == 1  # the observers sit on each drain's own bus, not here


def test_a_drain_logs_the_lifecycle_through_the_observer() -> None:
    k = kit()

    @k.app.handler("q")
    def h(job: Job, ctx: JobContext) -> None:
        return None

    k.queue.add("q", "j")
    k.worker().drain(["q"], 1)
    started, succeeded = k.log.having("job started")[0], k.log.having("job succeeded")[0]
    assert started.extra == {"job_id": "j", "queue": "q", "attempt": 1, "lease_token": 1,
                             "worker_id": "w-test", "token": 1}
    assert succeeded.extra["write"] == "written"
