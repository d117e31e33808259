"""Heartbeats: renewals from their own thread, even against a handler that never yields."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sluice.core.bus import EventBus
from sluice.core.errors import BackendUnavailable
from sluice.core.models import Job, LeasedJob
from sluice.worker.runtime import telemetry as t
from sluice.worker.runtime.context import JobContext
from sluice.worker.runtime.heartbeat import Heartbeat
from sluice.worker.runtime.observers import observe
from sluice.worker.runtime.telemetry import Telemetry
from sluice_dev.fakes import CaptureLog, FakeQueue, ManualClock, kit


@contextmanager
def thief(queue: FakeQueue, name: str, armed: threading.Event) -> Iterator[list[LeasedJob]]:
    """A second worker polling every 5 ms once ``armed``: it gets any lease the first one lets lapse."""
    stolen: list[LeasedJob] = []
    stop = threading.Event()

    def poll() -> None:
        armed.wait(10)
        while not stop.is_set():
            stolen.extend(queue.lease(name, 10, 60_000, "thief"))
            stop.wait(0.005)

    th = threading.Thread(target=poll, daemon=True)
    th.start()
    try:
        yield stolen
    finally:
        stop.set()
        th.join()


def spin(seconds: float) -> int:
    """Pure-Python CPU work that holds the GIL except when the interpreter forces a switch."""
    end, n = time.perf_counter() + seconds, 0
    while time.perf_counter() < end:
        for i in range(200):
            n += i * i % 7
    return n


def test_a_cpu_bound_handler_running_five_leases_keeps_its_lease() -> None:
    k = kit()
    # 250 ms, not less: a renewal must come within a lease even when the unit tier shares two loaded
    # cores (at 120 ms it lapsed once beside an install and five other processes)
    lease_ms = 250
    armed = threading.Event()

    @k.app.handler("cpu", timeout_s=10)
    def busy(job: Job, ctx: JobContext) -> dict[str, Any]:
        armed.set()
        spin(5 * lease_ms / 1000)
        return {"lost": ctx.lease_lost.is_set()}

    k.queue.add("cpu", "j")
    with thief(k.queue, "cpu", armed) as stolen:
        summary = k.worker(lease_ms=lease_ms).drain(["cpu"], 1)
    assert summary.as_dict()["succeeded"] == 1
    assert stolen == []
    assert k.store.get_job("j").result == {"lost": False} and k.store.get_job("j").attempts == 1
    assert len(k.queue.called("extend")) >= 4
    assert k.count(t.LEASE_EXTENSIONS) >= 4 and k.count(t.LEASES_LOST) == 0


def test_jobs_waiting_in_a_local_batch_keep_their_leases() -> None:
    k = kit()
    armed = threading.Event()

    @k.app.handler("q", timeout_s=5)
    def slow(job: Job, ctx: JobContext) -> int:
        armed.set()
        time.sleep(0.3)  # longer than the lease: the jobs after it wait past theirs
        return job.attempt

    for i in range(3):
        k.queue.add("q", f"j{i}")
    with thief(k.queue, "q", armed) as stolen:
        # 250 ms, not 80: a fresh-clone CI's unit tier, beside an install, let an 80 ms lease lapse
        summary = k.worker(lease_ms=250, lease_batch=3).drain(["q"], 3)
    assert summary.as_dict()["succeeded"] == 3 and stolen == []
    assert [c[2] for c in k.queue.called("lease")][:1] == [3]


def test_a_lease_lost_while_waiting_in_the_batch_is_never_started() -> None:
    k = kit()
    ran: list[str] = []

    @k.app.handler("q", timeout_s=5)
    def h(job: Job, ctx: JobContext) -> None:
        if job.job_id == "a":
            k.queue.steal("q", "b")
            time.sleep(0.2)
        ran.append(job.job_id)

    k.queue.add("q", "a")
    k.queue.add("q", "b")
    summary = k.worker(lease_ms=60, lease_batch=2).drain(["q"], 2)
    assert ran == ["a"] and summary.as_dict()["lease_lost"] == 1
    assert [c[1] for c in k.store.called("grant")] == ["a"]


def observed(tel: Telemetry) -> EventBus:
    """A bus the telemetry's metrics and logs observe, as a drain's is."""
    bus = EventBus()
    observe(bus, tel)
    return bus


def leased(lease_ms: int = 300) -> LeasedJob:
    return LeasedJob(job_id="j", queue="q", payload=None, lease_token=1, deadline_ms=0, attempt=1,
                     max_attempts=3, lease_ms=lease_ms)


def test_failed_renewals_are_retried_until_the_lease_lapses() -> None:
    queue = FakeQueue()
    queue.add("q", "j")
    queue.lease("q", 1, 300, "w")
    log = CaptureLog()
    tel = Telemetry(kit().metrics, log)
    now = [100.0]
    hb = Heartbeat(queue, clock=lambda: now[0], events=observed(tel))
    tracked = hb.track(leased(), 100.0, tel.job_logger(job_id="j"))
    queue.broken.add("extend", BackendUnavailable("redis down"), times=2)
    now[0] = 100.1
    hb.beat(tracked)
    assert tracked.active and not tracked.state.lease_lost.is_set()
    assert tracked.next_due < 100.1 + tracked.interval_s  # retried sooner than a normal renewal
    now[0] = 100.31  # past the lease: the next failure gives up
    hb.beat(tracked)
    assert tracked.state.lease_lost.is_set() and not tracked.active and len(hb) == 0
    assert log.having("lease lost: lease lapsed while renewals failed")


def test_a_renewal_reports_a_cancel_request() -> None:
    queue = FakeQueue()
    queue.add("q", "j")
    queue.lease("q", 1, 300, "w")
    queue.cancel("q", "j")
    k = kit()
    hb = Heartbeat(queue, events=observed(Telemetry(k.metrics, k.log)))
    tracked = hb.track(leased(), time.monotonic(), Telemetry(k.metrics, k.log).job_logger())
    hb.beat(tracked)
    assert tracked.state.cancel_requested.is_set() and not tracked.state.lease_lost.is_set()
    assert k.count(t.LEASE_EXTENSIONS) == 1


def test_an_untracked_lease_is_neither_renewed_nor_reported_lost() -> None:
    queue = FakeQueue(ManualClock())
    k = kit()
    hb = Heartbeat(queue, events=observed(Telemetry(k.metrics, k.log)))
    tracked = hb.track(leased(), time.monotonic(), Telemetry(k.metrics, k.log).job_logger())
    hb.untrack(tracked)
    hb.beat(tracked)  # the job is unknown to the queue: a renewal would fail
    assert queue.called("extend") == [] and not tracked.state.lease_lost.is_set()
    assert k.log.lines == []


def test_the_thread_renews_on_schedule_and_stops() -> None:
    queue = FakeQueue()
    queue.add("q", "j")
    job = queue.lease("q", 1, 90, "w")[0]
    k = kit()
    hb = Heartbeat(queue, events=observed(Telemetry(k.metrics, k.log)))
    hb.start()
    started = time.monotonic()
    hb.track(job, started, Telemetry(k.metrics, k.log).job_logger())
    # Until 8 renewals, not for a fixed 0.35 s: a loaded machine (a CI's unit tier beside the linters)
    # gave the thread too little of that time to fit 8, and the test failed with nothing wrong.
    while len(queue.called("extend")) < 8 and time.monotonic() - started < 5:
        time.sleep(0.01)
    hb.stop()
    elapsed, beats = time.monotonic() - started, len(queue.called("extend"))
    assert beats >= 8  # again and again ...
    assert beats <= elapsed / 0.030 + 2  # ... every 30 ms (a third of the 90 ms lease), never sooner
    time.sleep(0.1)
    assert len(queue.called("extend")) == beats
