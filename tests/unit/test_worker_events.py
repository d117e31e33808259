"""What the worker reports on its event bus, in order, at the points observers rely on."""

from __future__ import annotations

from typing import Any

from sluice.core import bus as ev
from sluice.core.models import Job
from sluice.worker.runtime.context import JobContext
from sluice.worker.runtime.outcomes import Fail, Retry
from sluice_dev.fakes import Kit, kit


def run(k: Kit, handler: Any) -> list[ev.Event]:
    seen: list[ev.Event] = []
    k.app.register("q", handler)
    k.queue.add("q", "j")
    worker = k.worker()
    worker.events.subscribe(seen.append)
    worker.drain(["q"], 1)
    return seen


def kinds(seen: list[ev.Event]) -> list[str]:
    return [type(e).__name__ for e in seen if not isinstance(e, ev.Renewed)]


def test_a_success_reports_each_step_and_one_job_ended_before_the_ack() -> None:
    k = kit()
    written_at_acking: list[bool] = []
    k.app.events.subscribe(lambda _e: written_at_acking.append(bool(k.store.called("write_result"))),
                           ev.Acking)
    seen = run(k, lambda job, ctx: {"r": 1})
    assert kinds(seen) == ["Leased", "Granted", "HandlerStarted", "HandlerEnded", "ResultWriting",
                           "ResultWritten", "JobEnded", "Acking", "Acked", "Finished", "RoundEnded"]
    granted = next(e for e in seen if isinstance(e, ev.Granted))
    ended = next(e for e in seen if isinstance(e, ev.JobEnded))
    assert (granted.outcome, granted.token, granted.owner) == ("ok", 1, "w-test")
    assert (ended.job, ended.queue, ended.state, ended.source, ended.token, ended.attempts) == \
        ("j", "q", "succeeded", "worker", 1, 1)
    written = next(e for e in seen if isinstance(e, ev.ResultWritten))
    assert (written.outcome, written.result) == ("written", {"r": 1}) and written.t0 <= written.at
    assert written_at_acking == [True]


def test_failed_dead_and_retried_jobs() -> None:
    def fails(job: Job, ctx: JobContext) -> None:
        raise Fail("no")

    seen = run(kit(), fails)
    assert kinds(seen)[-5:] == ["FailureRecorded", "JobEnded", "FailReported", "Finished", "RoundEnded"]
    assert [e.state for e in seen if isinstance(e, ev.JobEnded)] == ["failed"]
    assert [e.outcome for e in seen if isinstance(e, ev.FailReported)] == ["dead"]

    def retries(job: Job, ctx: JobContext) -> None:
        raise Retry(after_s=1)

    seen = run(kit(), retries)
    assert not [e for e in seen if isinstance(e, ev.JobEnded)]  # queued again: not ended
    assert [e.status for e in seen if isinstance(e, ev.FailureRecorded)] == ["queued"]


def test_a_stale_write_is_refused_with_both_tokens_and_nothing_ends_or_acks() -> None:
    k = kit()

    def late(job: Job, ctx: JobContext) -> str:
        k.store.grant(job.job_id, "q", "another-worker")
        return "late"

    seen = run(k, late)
    refused = [e for e in seen if isinstance(e, ev.ResultRefused)]
    assert [(e.outcome, e.token, e.current) for e in refused] == [("rejected", 1, 2)]
    assert kinds(seen)[-4:] == ["ResultRefused", "LeaseGone", "Finished", "RoundEnded"]


def test_a_failing_subscriber_changes_nothing() -> None:
    k = kit()

    def broken(_e: ev.Event) -> None:
        raise RuntimeError("observer bug")

    k.app.events.subscribe(broken)
    k.app.register("q", lambda job, ctx: "ok")
    k.queue.add("q", "j")
    assert k.worker().drain(["q"], 1).as_dict()["succeeded"] == 1
    assert k.store.get_job("j").status == "succeeded"


def test_the_chaos_nemesis_strikes_before_the_write_and_before_the_ack() -> None:
    from sluice_dev.chaos.app import QUEUE, worker_app

    strikes: list[tuple[str, str, int, bool]] = []
    k = kit()

    class Control:
        def strike(self, kind: str, sig: int = 9, **fields: Any) -> None:
            strikes.append((kind, fields["job"], fields["token"], bool(k.store.called("write_result"))))

    class History:
        def emit(self, op: str, **fields: Any) -> None:
            pass

    app = worker_app(lambda: History(), lambda: Control())  # type: ignore[arg-type,return-value]
    k.queue.add(QUEUE, "j", {"work_ms": 0})
    app.bind(queue=k.queue, store=k.store, telemetry=k.worker().telemetry, worker_id="w").drain([QUEUE], 1)
    assert [s for s in strikes if s[0] != "kill_worker_mid_job"] == [
        ("pause_worker_before_write", "j", 1, False), ("kill_worker_before_ack", "j", 1, True)]
