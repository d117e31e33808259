"""The handler API and the documented end state of every kind of handler outcome."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import sluice
from sluice.core import bus as ev
from sluice.core.errors import InvalidInput, InvalidQueueName, SluiceError, StaleToken
from sluice.core.models import Job
from sluice.worker.runtime import telemetry as t
from sluice.worker.runtime.context import JobContext
from sluice_dev.fakes import FakeQueue, ManualClock, ManualMonotonic, kit


def test_handlers_register_by_queue_and_reject_bad_registrations() -> None:
    app = sluice.Worker()

    @app.handler("thumbs", timeout_s=5)
    def thumbs(job: Job, ctx: JobContext) -> int:
        return 1

    assert app.handlers["thumbs"].fn is thumbs
    assert app.handlers["thumbs"].timeout_ms == 5000
    with pytest.raises(InvalidInput, match="already registered"):
        app.register("thumbs", thumbs)
    for bad in ("", "Thumbs", "a:b", "{q}", "a b", "é"):
        with pytest.raises(InvalidQueueName):
            app.register(bad, thumbs)
    for timeout in (0, -1, float("nan"), 13 * 3600, True):
        with pytest.raises(InvalidInput):
            app.register("other", thumbs, timeout_s=timeout)
    with pytest.raises(InvalidInput):
        app.register("other", "not callable")  # type: ignore[arg-type]
    assert set(app.handlers) == {"thumbs"}


def test_unbound_worker_and_bad_drain_arguments_are_typed_errors() -> None:
    app = sluice.Worker()
    with pytest.raises(SluiceError, match="not bound"):
        app.drain(["q"], 1)
    k = kit()
    w = k.worker()
    for queues, batch in (([], 1), (["q"], 0), (["q"], True), (["bad name"], 1)):
        with pytest.raises(InvalidInput):
            w.drain(queues, batch)  # type: ignore[arg-type]
    assert k.queue.calls == []


def test_success_writes_the_result_with_the_granted_token_then_acks() -> None:
    k = kit()
    seen: dict[str, Any] = {}

    @k.app.handler("thumbs")
    def thumbs(job: Job, ctx: JobContext) -> dict[str, Any]:
        seen.update(token=ctx.token, lease_token=ctx.lease_token, attempt=ctx.attempt, job=job)
        ctx.logger.info("making a thumbnail")
        return {"size": job.payload["w"] * 2}

    k.store.items["j1"] = {"queue": "thumbs", "status": "queued", "token": 41, "attempts": 0,
                           "cancel_requested": False}
    k.queue.add("thumbs", "j1", {"w": 21}, enqueued_at_ms=1)
    summary = k.worker().drain(["thumbs"], 5)

    assert summary.as_dict()["succeeded"] == 1 and summary.leased == 1 and summary.stopped == "empty"
    rec = k.store.get_job("j1")
    assert rec.status == "succeeded" and rec.result == {"size": 42} and rec.result_token == 42
    assert seen["token"] == 42 and seen["lease_token"] == 1 and seen["attempt"] == 1
    assert seen["job"].payload == {"w": 21}
    assert k.queue.job("thumbs", "j1").state == "done"
    order = [c[0] for c in k.store.calls + k.queue.calls if c[0] in ("write_result", "ack")]
    assert order == ["write_result", "ack"]
    assert k.count(t.JOBS_SUCCEEDED) == 1
    assert len(k.metrics.observations[t.JOB_DURATION]) == 1
    assert len(k.metrics.observations[t.QUEUE_WAIT]) == 1
    line = k.log.having("making a thumbnail")[0]
    assert line.extra | {"job_id": "j1", "queue": "thumbs", "attempt": 1, "token": 42} == line.extra
    assert k.metrics.flushes == 1


def test_retry_after_requeues_with_that_delay_and_records_queued() -> None:
    clock = ManualClock()
    k = kit(FakeQueue(clock))

    @k.app.handler("q")
    def h(job: Job, ctx: JobContext) -> None:
        raise sluice.Retry(after=2.5, reason="rate limited upstream")

    k.queue.add("q", "j", max_attempts=3)
    assert k.worker().drain(["q"], 1).as_dict()["retried"] == 1
    qj = k.queue.job("q", "j")
    assert qj.state == "delayed" and qj.run_at_ms == clock.ms + 2500
    assert k.store.get_job("j").status == "queued"
    assert k.store.get_job("j").last_error == "rate limited upstream"
    assert k.count(t.JOBS_RETRIED) == 1


def test_retry_on_the_last_attempt_is_dead() -> None:
    k = kit()

    @k.app.handler("q")
    def h(job: Job, ctx: JobContext) -> None:
        raise sluice.Retry(after=0)

    k.queue.add("q", "j", max_attempts=1)
    assert k.worker().drain(["q"], 1).as_dict()["dead"] == 1
    assert k.queue.job("q", "j").state == "dead" and k.store.get_job("j").status == "dead"
    assert k.count(t.JOBS_DEAD_LETTERED) == 1


def test_retry_rejects_absurd_delays() -> None:
    for after in (-1, float("inf"), float("nan"), 8 * 24 * 3600, "5", True):
        with pytest.raises(InvalidInput):
            sluice.Retry(after=after)  # type: ignore[arg-type]


def test_fail_is_permanent_with_status_failed() -> None:
    k = kit()

    @k.app.handler("q")
    def h(job: Job, ctx: JobContext) -> None:
        raise sluice.Fail("input image is corrupt")

    k.queue.add("q", "j", max_attempts=5)
    assert k.worker().drain(["q"], 1).as_dict()["failed"] == 1
    assert k.queue.job("q", "j").state == "dead" and k.queue.job("q", "j").attempts == 1
    rec = k.store.get_job("j")
    assert rec.status == "failed" and rec.last_error == "input image is corrupt"
    assert k.count(t.JOBS_FAILED) == 1


def test_exceptions_back_off_then_dead_letter_at_max_attempts() -> None:
    clock = ManualClock()
    k = kit(FakeQueue(clock))
    runs: list[int] = []

    @k.app.handler("q")
    def h(job: Job, ctx: JobContext) -> None:
        runs.append(ctx.attempt)
        raise KeyError("missing")

    k.queue.add("q", "j", max_attempts=3)
    w = k.worker()
    for _ in range(3):
        w.drain(["q"], 1)
        qj = k.queue.job("q", "j")
        if qj.state == "delayed":  # full jitter: 0 .. base * 2**(attempt-1)
            assert 0 <= qj.run_at_ms - clock.ms <= 1000 * 2 ** (len(runs) - 1)
        clock.advance(60_000)
    assert runs == [1, 2, 3]
    assert k.queue.job("q", "j").state == "dead"
    rec = k.store.get_job("j")
    assert rec.status == "dead" and rec.attempts == 3 and rec.last_error == "KeyError: 'missing'"
    assert k.count(t.JOBS_RETRIED) == 2 and k.count(t.JOBS_DEAD_LETTERED) == 1
    assert w.drain(["q"], 1).leased == 0


def test_a_queue_without_a_handler_is_dead_lettered_with_the_reason() -> None:
    k = kit()
    k.queue.add("orphans", "j", max_attempts=5)
    assert k.worker().drain(["orphans"], 1).as_dict()["dead"] == 1
    assert k.queue.job("orphans", "j").state == "dead"
    rec = k.store.get_job("j")
    assert rec.status == "dead" and rec.last_error == "no handler registered for queue 'orphans'"


@pytest.mark.parametrize("result", [object(), {1, 2}, float("nan"), {"x": float("inf")}, b"bytes"])
def test_an_unserialisable_result_is_a_handler_error(result: Any) -> None:
    k = kit()

    @k.app.handler("q")
    def h(job: Job, ctx: JobContext) -> Any:
        return result

    k.queue.add("q", "j", max_attempts=2)
    assert k.worker().drain(["q"], 1).as_dict()["retried"] == 1
    rec = k.store.get_job("j")
    assert rec.status == "queued" and rec.last_error is not None
    assert rec.last_error.startswith("InvalidInput: the handler's result cannot be stored")
    assert k.store.called("write_result") == [] and k.queue.called("ack") == []


def test_a_job_cancelled_before_it_starts_is_never_run() -> None:
    k = kit()
    ran = []
    k.app.register("q", lambda job, ctx: ran.append(1))
    k.queue.add("q", "j")
    k.queue.jobs[("q", "j")].cancel_requested = True
    assert k.worker().drain(["q"], 1).as_dict()["cancelled"] == 1
    assert ran == [] and k.store.get_job("j").status == "cancelled"
    assert k.queue.job("q", "j").state == "done"


def test_a_job_cancelled_in_the_store_is_dropped_without_running() -> None:
    k = kit()
    ran = []
    k.app.register("q", lambda job, ctx: ran.append(1))
    k.queue.add("q", "j")
    k.store.items["j"] = {"queue": "q", "status": "cancelled", "token": 0, "attempts": 0,
                          "cancel_requested": False}
    assert k.worker().drain(["q"], 1).as_dict()["cancelled"] == 1
    assert ran == [] and k.queue.job("q", "j").state == "done"


def test_cancel_requested_while_running_reaches_the_handler() -> None:
    k = kit()

    @k.app.handler("q")
    def h(job: Job, ctx: JobContext) -> None:
        k.queue.cancel("q", job.job_id)
        assert ctx.cancel_requested.wait(5)
        assert ctx.should_stop()
        raise RuntimeError("stopping as asked")

    k.queue.add("q", "j")
    assert k.worker(lease_ms=90).drain(["q"], 1).as_dict()["cancelled"] == 1
    assert k.store.get_job("j").status == "cancelled"
    assert k.queue.job("q", "j").state == "done"


def test_a_stale_fenced_write_is_rejected_and_nothing_is_acked() -> None:
    k = kit()

    @k.app.handler("q")
    def h(job: Job, ctx: JobContext) -> str:
        k.store.grant(job.job_id, "q", "another-worker")  # e.g. after Redis lost the lease
        return "late"

    k.queue.add("q", "j")
    assert k.worker().drain(["q"], 1).as_dict()["lease_lost"] == 1
    rec = k.store.get_job("j")
    assert rec.status == "leased" and rec.token == 2 and rec.result is None
    assert k.queue.called("ack") == [] and k.queue.called("fail") == []
    assert k.count(t.FENCED_WRITES_REJECTED) == 1 and k.count(t.LEASES_LOST) == 1
    assert k.log.having("lease lost: fenced write rejected: token 1 is stale, current is 2")


def test_a_lease_lost_while_running_sets_the_event_and_nothing_is_written() -> None:
    k = kit()

    @k.app.handler("q")
    def h(job: Job, ctx: JobContext) -> str:
        k.queue.steal("q", job.job_id)
        assert ctx.lease_lost.wait(5)
        return "stale"

    k.queue.add("q", "j")
    assert k.worker(lease_ms=60).drain(["q"], 1).as_dict()["lease_lost"] == 1
    assert k.store.called("write_result") == [] and k.queue.called("ack") == []
    assert k.count(t.LEASES_LOST) == 1
    assert len(k.log.having("lease lost")) == 2  # the heartbeat's, then the discarded result's


def test_a_handlers_own_fenced_write_refused_ends_the_attempt_as_lease_lost() -> None:
    k = kit()

    @k.app.handler("q")
    def h(job: Job, ctx: JobContext) -> str:
        table = ctx.fenced_table("thumbnails")
        table.put_item({"id": "a"})
        k.store.grant(job.job_id, "q", "another-worker")
        table.put_item({"id": "b"})
        return "unreachable"

    k.queue.add("q", "j")
    assert k.worker().drain(["q"], 1).as_dict()["lease_lost"] == 1
    assert k.count(t.FENCED_WRITES_REJECTED) == 1
    assert k.store.called("write_result") == [] and k.queue.called("ack") == []


def test_the_hard_timeout_fails_the_attempt_and_stops_renewing() -> None:
    k = kit()
    release = threading.Event()
    contexts: list[JobContext] = []

    @k.app.handler("q", timeout_s=0.2)
    def h(job: Job, ctx: JobContext) -> str:
        contexts.append(ctx)
        release.wait(10)
        return "too late"

    k.queue.add("q", "j", max_attempts=3)
    assert k.worker(lease_ms=100).drain(["q"], 1).as_dict()["retried"] == 1
    rec = k.store.get_job("j")
    assert rec.status == "queued" and rec.last_error == "hard timeout: the handler ran longer than 0.2 s"
    assert contexts[0].lease_lost.is_set()
    extends = len(k.queue.called("extend"))
    release.set()
    threading.Event().wait(0.3)
    assert len(k.queue.called("extend")) == extends
    assert k.store.called("write_result") == []


def test_fault_points_fire_between_the_handler_the_write_and_the_ack() -> None:
    k = kit()
    k.app.register("q", lambda job, ctx: "ok")
    order: list[str] = []

    def mark(name: str) -> Any:
        def hook(_e: ev.Event) -> None:
            written = bool(k.store.called("write_result"))
            order.append(f"{name}:{'written' if written else 'unwritten'}")
        return hook

    k.queue.add("q", "j")
    k.app.events.subscribe(mark("after"), ev.HandlerEnded)
    k.app.events.subscribe(mark("write"), ev.ResultWriting)
    k.app.events.subscribe(mark("ack"), ev.Acking)
    k.worker().drain(["q"], 1)
    assert order == ["after:unwritten", "write:unwritten", "ack:written"]


def test_a_handler_raising_stale_token_by_hand_is_counted() -> None:
    k = kit()

    @k.app.handler("q")
    def h(job: Job, ctx: JobContext) -> None:
        raise StaleToken(mine=1, current=2)

    k.queue.add("q", "j")
    assert k.worker().drain(["q"], 1).as_dict()["lease_lost"] == 1
    assert k.count(t.FENCED_WRITES_REJECTED) == 1


def test_a_job_with_too_little_lease_left_is_released_without_a_grant() -> None:
    """Issue 13, bug 6: a grant must not land after the lease lapsed and another worker's grant.

    Two jobs in one local batch, one slot, renewals failing (Redis unreachable): while the
    first runs, the second's lease runs down. When its turn comes it still holds the lease,
    but with less than the grant margin left: it goes back unrun, attempt given back, and
    no token is minted for it."""
    k = kit()
    k.queue.broken.add("extend", sluice.core.errors.BackendUnavailable("redis down"), times=1000)
    ran: list[str] = []
    clock = ManualMonotonic()

    @k.app.handler("q")
    def h(job: Job, ctx: JobContext) -> str:
        ran.append(job.job_id)
        if job.job_id == "a":
            clock.advance(4.5)  # b's lease (6 s, unrenewed) keeps about 1.5 s
        return "ok"

    k.queue.add("q", "a")
    k.queue.add("q", "b")
    summary = k.worker(lease_ms=6_000, grant_margin_ms=2_000, lease_batch=2).bind(clock=clock).drain(["q"], 2)

    assert ran == ["a"]
    assert summary.as_dict()["succeeded"] == 1 and summary.as_dict()["released"] == 1
    assert [c[1] for c in k.store.called("grant")] == ["a"]
    b = k.queue.job("q", "b")
    assert b.state == "ready" and b.attempts == 0
    assert k.log.having("lease released: only")


def test_a_grant_refused_to_an_older_lease_runs_nothing_and_gives_the_lease_up() -> None:
    """The job model's grant-after-long-pause: this worker's lease was taken over while it paused
    before its grant, and the newer lease was granted first. Its grant is refused (the item keeps
    the newer lease token): the handler never runs, nothing is written, and it tells Redis nothing
    (the lease is someone else's)."""
    k = kit()
    ran: list[int] = []
    k.app.register("q", lambda job, ctx: ran.append(ctx.token))
    k.queue.add("q", "j")
    k.store.grant("j", "q", "the-new-holder", lease_token=7)  # the fake queue's first lease token is 1
    assert k.worker().drain(["q"], 1).as_dict()["lease_lost"] == 1
    assert ran == []
    rec = k.store.get_job("j")
    assert (rec.status, rec.token, rec.lease_owner) == ("leased", 1, "the-new-holder")
    assert k.store.item("j")["lease_token"] == 7
    assert [c[0] for c in k.queue.calls if c[0] != "lease"] == []
    assert k.count(t.LEASES_LOST) == 1
    assert k.log.having("lease lost: the grant was refused: job j was granted to a newer lease")


def test_a_grant_records_the_lease_token_it_was_fenced_on() -> None:
    k = kit()
    k.app.register("q", lambda job, ctx: "ok")
    k.queue.add("q", "j")
    assert k.worker().drain(["q"], 1).as_dict()["succeeded"] == 1
    assert k.store.item("j")["lease_token"] == 1 == k.queue.job("q", "j").token
