"""Each handler outcome ends in its documented state, on the real engine and the real store."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

import sluice
from sluice.core.models import Job, JobSpec
from sluice.worker.registry import Worker
from sluice.worker.runtime import telemetry as t
from sluice.worker.runtime.context import JobContext
from sluice.worker.runtime.options import WorkerOptions
from sluice.worker.runtime.telemetry import MemoryMetrics, Telemetry
from sluice_dev.local.servers import Server
from tests.backends.worker_procs import Stack, make_stack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


@pytest.fixture(scope="module")
def tables_id() -> str:
    import uuid

    return uuid.uuid4().hex[:8]


@pytest.fixture
def stack(redis_url: str, moto_server: Server, tables_id: str) -> Iterator[Stack]:
    s = make_stack(redis_url, moto_server.extra["url"], tables_id)
    yield s
    s.queue.close()


def bound(stack: Stack, app: Worker) -> tuple[Worker, MemoryMetrics]:
    metrics = MemoryMetrics()
    w = app.bind(queue=stack.queue, store=stack.store, options=WorkerOptions(lease_ms=1000),
                 telemetry=Telemetry(metrics), worker_id="states-test")
    return w, metrics


def drain_until_final(w: Worker, stack: Stack, queue: str, job_id: str, seconds: float = 10) -> Any:
    """Drain until the store's status is final (retries wait out their backoff)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        w.drain([queue], 1)
        rec = stack.store.get_job(job_id)
        if rec.status.final:
            return rec
        time.sleep(0.05)
    raise AssertionError(f"{job_id} never reached a final state: {stack.store.get_job(job_id)}")


def add(stack: Stack, queue: str, job_id: str, payload: Any = None, max_attempts: int = 5) -> None:
    assert stack.queue.enqueue(JobSpec(job_id=job_id, queue=queue, payload=payload,
                                       max_attempts=max_attempts))


def dead_ids(stack: Stack, queue: str) -> list[str]:
    return [d.job_id for d in stack.queue.dead_letters(queue)]


def test_success_and_retry_after(stack: Stack, unique: str) -> None:
    app = sluice.Worker()
    calls: list[int] = []

    @app.handler("retrying")
    def h(job: Job, ctx: JobContext) -> dict[str, int]:
        calls.append(ctx.attempt)
        if ctx.attempt == 1:
            raise sluice.Retry(after=0.2, reason="not yet")
        return {"attempt": ctx.attempt, "token": ctx.token}

    w, metrics = bound(stack, app)
    add(stack, "retrying", f"r-{unique}")
    assert w.drain(["retrying"], 1).as_dict()["retried"] == 1
    assert stack.queue.stats("retrying").delayed == 1
    mid = stack.store.get_job(f"r-{unique}")
    assert mid.status == "queued" and mid.last_error == "not yet"
    assert w.drain(["retrying"], 1).leased == 0  # still waiting out its 0.2 s
    rec = drain_until_final(w, stack, "retrying", f"r-{unique}")
    assert rec.status == "succeeded" and rec.result == {"attempt": 2, "token": 2} and calls == [1, 2]
    assert metrics.counts[t.JOBS_RETRIED] == 1 and metrics.counts[t.JOBS_SUCCEEDED] == 1


def test_fail_is_final_at_once(stack: Stack, unique: str) -> None:
    app = sluice.Worker()
    app.register("failing", lambda job, ctx: (_ for _ in ()).throw(sluice.Fail("bad input")))
    w, metrics = bound(stack, app)
    add(stack, "failing", f"f-{unique}")
    rec = drain_until_final(w, stack, "failing", f"f-{unique}")
    assert rec.status == "failed" and rec.last_error == "bad input" and rec.attempts == 1
    assert dead_ids(stack, "failing") == [f"f-{unique}"]
    assert metrics.counts[t.JOBS_FAILED] == 1


def test_exceptions_retry_until_max_attempts_then_dead(stack: Stack, unique: str) -> None:
    app = sluice.Worker()
    seen: list[int] = []

    @app.handler("flaky")
    def h(job: Job, ctx: JobContext) -> None:
        seen.append(ctx.attempt)
        raise ConnectionError("upstream refused")

    w, metrics = bound(stack, app)
    add(stack, "flaky", f"x-{unique}", max_attempts=2)
    rec = drain_until_final(w, stack, "flaky", f"x-{unique}")
    assert rec.status == "dead" and rec.attempts == 2
    assert rec.last_error == "ConnectionError: upstream refused"
    assert seen == [1, 2] and dead_ids(stack, "flaky") == [f"x-{unique}"]
    assert metrics.counts[t.JOBS_RETRIED] == 1 and metrics.counts[t.JOBS_DEAD_LETTERED] == 1


def test_a_queue_without_a_handler_dead_letters_with_the_reason(stack: Stack, unique: str) -> None:
    w, metrics = bound(stack, sluice.Worker())
    add(stack, "nobody", f"n-{unique}")
    rec = drain_until_final(w, stack, "nobody", f"n-{unique}")
    assert rec.status == "dead" and rec.last_error == "no handler registered for queue 'nobody'"
    (dead,) = stack.queue.dead_letters("nobody")
    assert dead.job_id == f"n-{unique}" and dead.last_error == "no handler registered for queue 'nobody'"
    assert metrics.counts[t.JOBS_DEAD_LETTERED] == 1


def test_an_unserialisable_result_is_retried_then_dead(stack: Stack, unique: str) -> None:
    app = sluice.Worker()
    app.register("weird", lambda job, ctx: {"when": object()})
    w, _ = bound(stack, app)
    add(stack, "weird", f"u-{unique}", max_attempts=2)
    rec = drain_until_final(w, stack, "weird", f"u-{unique}")
    assert rec.status == "dead" and rec.result is None and rec.attempts == 2
    assert rec.last_error is not None and rec.last_error.startswith("InvalidInput: the handler's result")


def test_cancel_while_queued_and_while_running(stack: Stack, unique: str) -> None:
    app = sluice.Worker()
    ran: list[str] = []

    @app.handler("cancels")
    def h(job: Job, ctx: JobContext) -> None:
        ran.append(job.job_id)
        stack.store.request_cancel(job.job_id)
        stack.queue.cancel("cancels", job.job_id)
        assert ctx.cancel_requested.wait(5)  # the next heartbeat brings the request
        raise RuntimeError("stopping as asked")

    w, _ = bound(stack, app)
    add(stack, "cancels", f"c1-{unique}")
    stack.store.record_accepted(JobSpec(job_id=f"c2-{unique}", queue="cancels"))
    stack.store.request_cancel(f"c2-{unique}")  # cancelled in the store; Redis still has it
    add(stack, "cancels", f"c2-{unique}")
    assert w.drain(["cancels"], 2).as_dict()["cancelled"] == 2
    assert ran == [f"c1-{unique}"]
    assert stack.store.get_job(f"c1-{unique}").status == "cancelled"
    assert stack.store.get_job(f"c2-{unique}").status == "cancelled"
    stats = stack.queue.stats("cancels")
    assert (stats.ready, stats.leased, stats.delayed) == (0, 0, 0)


def test_a_stopping_worker_releases_its_unstarted_leases(stack: Stack, unique: str) -> None:
    import threading

    app = sluice.Worker()
    stop = threading.Event()

    @app.handler("stopping")
    def h(job: Job, ctx: JobContext) -> str:
        stop.set()  # e.g. SIGTERM arrives while the first job of the batch runs
        return "first"

    metrics = MemoryMetrics()
    w = app.bind(queue=stack.queue, store=stack.store, telemetry=Telemetry(metrics),
                 options=WorkerOptions(lease_ms=1000, lease_batch=3), worker_id="stopping-test")
    for i in range(3):
        add(stack, "stopping", f"s{i}-{unique}")
    out = w.drain(["stopping"], 3, stop=stop).as_dict()
    assert (out["succeeded"], out["released"], out["stopped"]) == (1, 2, "stop")
    stats = stack.queue.stats("stopping")
    assert (stats.leased, stats.ready) == (0, 2)
    again = stack.queue.lease("stopping", 5, 1000, "check")
    assert sorted((j.job_id, j.attempt) for j in again) == [(f"s1-{unique}", 1), (f"s2-{unique}", 1)]
    assert metrics.counts[t.LEASES_RELEASED] == 2


def test_ctx_fenced_table_writes_carry_the_token_and_stale_ones_are_refused(
        stack: Stack, moto_server: Server, unique: str) -> None:
    import boto3

    from sluice.backends.dynamodb import tables

    db = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=moto_server.extra["url"])
    side = f"side-{unique}"
    tables.create_idempotency_table(db, side)  # any table keyed on "id"
    app = sluice.Worker()

    @app.handler("sidefx")
    def h(job: Job, ctx: JobContext) -> str:
        table = ctx.fenced_table(side)
        table.put_item({"id": f"{job.job_id}-a", "token": ctx.token})
        if job.payload == "taken-over":
            stack.store.grant(job.job_id, "sidefx", "another-worker")  # a newer holder exists now
            table.put_item({"id": f"{job.job_id}-b", "token": ctx.token})
        return "done"

    w, metrics = bound(stack, app)
    add(stack, "sidefx", f"ok-{unique}", "fine")
    add(stack, "sidefx", f"late-{unique}", "taken-over")
    out = w.drain(["sidefx"], 2).as_dict()
    assert (out["succeeded"], out["lease_lost"]) == (1, 1)
    ids = {i["id"]["S"] for i in db.scan(TableName=side)["Items"]}
    assert ids == {f"ok-{unique}-a", f"late-{unique}-a"}  # the stale "-b" write never landed
    assert metrics.counts[t.FENCED_WRITES_REJECTED] == 1
    late = stack.store.get_job(f"late-{unique}")
    assert late.status == "leased" and late.token == 2 and late.result is None
