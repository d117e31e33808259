"""Lambda time budgeting, releases, concurrency, and adapters failing under the drain loop."""

from __future__ import annotations

import threading

import pytest

from sluice.core.errors import BackendUnavailable, LeaseLost
from sluice.core.models import Job
from sluice.worker.runtime import telemetry as t
from sluice.worker.runtime.budget import UNLIMITED, TimeBudget
from sluice.worker.runtime.context import JobContext
from sluice_dev.fakes import ManualClock, kit


@pytest.mark.parametrize(("remaining", "timeout", "slots", "wanted", "fit"), [
    (5_000, 10_000, 1, 10, 0),  # a 10 s job never fits in 5 s
    (5_000, 1_000, 1, 10, 4),  # 5 s - 0.5 s margin = 4 whole timeouts
    (5_000, 1_000, 2, 10, 8),
    (5_000, 1_000, 2, 3, 3),
    (1_400, 1_000, 4, 10, 0),  # 1.4 s - 0.5 s < one timeout
    (500, 0, 1, 10, 0),  # nothing usable left at all
])
def test_fit_counts_only_jobs_that_can_finish(remaining: int, timeout: int, slots: int, wanted: int,
                                              fit: int) -> None:
    budget = TimeBudget(lambda: remaining, 500)
    assert budget.fit(timeout, slots, wanted) == fit
    assert budget.can_start(timeout) == (remaining >= timeout + 500)


def test_no_deadline_means_no_limit() -> None:
    assert UNLIMITED.fit(10**9, 1, 7) == 7 and UNLIMITED.can_start(10**9)


def test_ten_second_jobs_are_not_leased_with_five_seconds_left() -> None:
    k = kit()
    k.app.register("slow", lambda job, ctx: None, timeout_s=10)
    for i in range(3):
        k.queue.add("slow", f"j{i}")
    summary = k.worker(margin_ms=500).drain(["slow"], 10, remaining_ms=lambda: 5_000)
    assert summary.leased == 0 and summary.stopped == "time" and summary.skipped_for_time == ["slow"]
    assert k.queue.called("lease") == [] and k.queue.stats("slow").ready == 3


def test_time_running_out_mid_batch_releases_what_cannot_start() -> None:
    left = ManualClock(5_000)  # ms left in the invocation

    k = kit()

    @k.app.handler("q", timeout_s=1)
    def h(job: Job, ctx: JobContext) -> str:
        left.advance(-1_200)  # each job (with its overhead) eats 1.2 s of the invocation
        return job.job_id

    for i in range(6):
        k.queue.add("q", f"j{i}")
    summary = k.worker(margin_ms=500, lease_batch=10).drain(["q"], 10, remaining_ms=left)
    assert [c[2] for c in k.queue.called("lease")] == [4]  # (5 s - 0.5 s) // 1 s
    d = summary.as_dict()
    # 5.0, 3.8, 2.6 s left: j0..j2 start; 1.4 s < 1 s + 0.5 s: j3 is released unstarted.
    assert d["succeeded"] == 3 and d["released"] == 1 and d["leased"] == 4 and d["stopped"] == "time"
    assert k.queue.stats("q").leased == 0 and k.queue.stats("q").ready == 3
    assert k.queue.job("q", "j3").attempts == 0  # released: the attempt is given back
    assert [c[1] for c in k.store.called("grant")] == ["j0", "j1", "j2"]
    assert k.count(t.LEASES_RELEASED) == 1


def test_a_stop_request_releases_the_rest_of_the_batch() -> None:
    k = kit()
    stop = threading.Event()

    @k.app.handler("q")
    def h(job: Job, ctx: JobContext) -> str:
        stop.set()
        return "done"

    for i in range(3):
        k.queue.add("q", f"j{i}")
    d = k.worker(lease_batch=3).drain(["q"], 3, stop=stop).as_dict()
    assert (d["succeeded"], d["released"], d["stopped"]) == (1, 2, "stop")
    assert k.queue.stats("q").ready == 2 and k.queue.stats("q").leased == 0


def test_queues_are_drained_round_robin_within_the_batch() -> None:
    k = kit()
    ran: list[str] = []
    for q in ("a", "b"):
        k.app.register(q, lambda job, ctx: ran.append(job.queue))
        for i in range(3):
            k.queue.add(q, f"{q}{i}")
    d = k.worker(lease_batch=1).drain(["a", "b"], 4).as_dict()
    assert ran == ["a", "b", "a", "b"] and d["stopped"] == "batch"


def test_jobs_run_concurrently_on_the_slots() -> None:
    k = kit()
    barrier = threading.Barrier(2, timeout=5)

    @k.app.handler("q")
    def h(job: Job, ctx: JobContext) -> int:
        return barrier.wait()  # both must be running at once, or this times out

    k.queue.add("q", "a")
    k.queue.add("q", "b")
    d = k.worker(concurrency=2, lease_batch=2).drain(["q"], 2).as_dict()
    assert d["succeeded"] == 2


def test_a_grant_the_store_cannot_make_releases_the_job() -> None:
    k = kit()
    k.app.register("q", lambda job, ctx: "never")
    k.queue.add("q", "j")
    k.store.broken.add("grant", BackendUnavailable("dynamodb throttled"))
    assert k.worker().drain(["q"], 1).as_dict()["released"] == 1
    assert k.queue.job("q", "j").state == "ready" and k.queue.job("q", "j").attempts == 0


def test_an_unexpected_error_in_the_runtime_never_strands_the_job() -> None:
    k = kit()
    k.app.register("q", lambda job, ctx: "never")
    k.queue.add("q", "j")
    k.store.broken.add("grant", RuntimeError("a bug"))
    assert k.worker().drain(["q"], 1).as_dict()["released"] == 1
    assert k.queue.job("q", "j").state == "ready"
    assert k.log.having("unexpected error while running the job")


def test_a_result_write_is_retried_through_transient_errors() -> None:
    k = kit()
    k.app.register("q", lambda job, ctx: {"ok": True})
    k.queue.add("q", "j")
    k.store.broken.add("write_result", BackendUnavailable("timeout"), times=2)
    assert k.worker().drain(["q"], 1).as_dict()["succeeded"] == 1
    assert len(k.store.called("write_result")) == 1  # the two failures raised before recording


def test_a_result_the_store_cannot_take_leaves_the_job_to_its_lease() -> None:
    k = kit()
    k.app.register("q", lambda job, ctx: {"ok": True})
    k.queue.add("q", "j")
    k.store.broken.add("write_result", BackendUnavailable("timeout"), times=3)
    assert k.worker(lease_ms=50).drain(["q"], 1).as_dict()["unsettled"] == 1
    assert k.queue.called("ack") == [] and k.queue.job("q", "j").state == "leased"
    extends = len(k.queue.called("extend"))
    threading.Event().wait(0.1)
    assert len(k.queue.called("extend")) == extends  # no longer renewed: it will lapse and be retried


def test_an_ack_rejected_after_the_write_still_counts_as_success() -> None:
    k = kit()
    k.app.register("q", lambda job, ctx: 7)
    k.queue.add("q", "j")
    k.queue.broken.add("ack", LeaseLost("taken over"))
    assert k.worker().drain(["q"], 1).as_dict()["succeeded"] == 1
    assert k.store.get_job("j").result == 7
    assert k.log.having("lease lost: ack rejected after the result was written")
    assert k.count(t.LEASES_LOST) == 1


def test_a_lease_call_that_fails_ends_the_drain_with_the_error() -> None:
    k = kit()
    k.app.register("q", lambda job, ctx: 1)
    k.queue.add("q", "j")
    k.queue.broken.add("lease", BackendUnavailable("redis unreachable"))
    d = k.worker().drain(["q"], 5).as_dict()
    assert d["stopped"] == "error" and "redis unreachable" in d["error"] and d["leased"] == 0


def test_run_processes_jobs_until_stopped() -> None:
    k = kit()
    stop = threading.Event()
    done: list[str] = []

    @k.app.handler("q")
    def h(job: Job, ctx: JobContext) -> None:
        done.append(job.job_id)
        if len(done) == 5:
            stop.set()

    for i in range(8):
        k.queue.add("q", f"j{i}")
    total = k.worker(lease_batch=2).run(["q"], stop=stop, idle_s=0.01)
    assert done == [f"j{i}" for i in range(5)] and total.outcomes["succeeded"] == 5
    assert k.queue.stats("q").leased == 0 and k.queue.stats("q").ready == 3


def test_a_crash_inside_the_drain_loop_still_releases_every_held_lease(
        monkeypatch: pytest.MonkeyPatch) -> None:
    k = kit()
    k.app.register("q", lambda job, ctx: "never")
    for i in range(3):
        k.queue.add("q", f"j{i}")
    w = k.worker(lease_batch=3)

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug in the batch runner")

    monkeypatch.setattr(w, "_run_batch", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        w.drain(["q"], 3)
    assert k.queue.stats("q").leased == 0 and k.queue.stats("q").ready == 3
    assert len(k.queue.called("release")) == 3
