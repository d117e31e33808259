"""The worker Lambda's handler on real Redis and DynamoDB, with a fake LambdaContext.

This module is also the handlers module the Lambda loads (Settings.handlers_module).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import sluice
from sluice.core.errors import JobNotFound
from sluice.core.models import Job, JobSpec, JobState
from sluice.worker.runtime.context import JobContext
from sluice_dev.fakes import FakeLambdaContext
from sluice_dev.local.servers import Server
from tests.backends.worker_lambda_support import lambda_stack, load_function
from tests.backends.worker_procs import Stack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

app = sluice.Worker()


@app.handler("tenseconds", timeout_s=10)
def ten_seconds(job: Job, ctx: JobContext) -> None:
    raise AssertionError("a 10 s job must never be leased with 5 s left")


@app.handler("mixed", timeout_s=1)
def mixed(job: Job, ctx: JobContext) -> str:
    time.sleep(job.payload["sleep"])  # 2 s ones overrun their 1 s timeout
    return job.job_id


@app.handler("quick", timeout_s=1)
def quick(job: Job, ctx: JobContext) -> int:
    return int(job.payload) * 2


@pytest.fixture
def stack(redis_url: str, moto_server: Server, unique: str,
          monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    with lambda_stack(redis_url, moto_server.extra["url"], unique, monkeypatch, handlers_module=__name__,
                      SLUICE_DEFAULT_LEASE_SECONDS="2") as s:
        yield s


def add(stack: Stack, queue: str, job_id: str, payload: Any) -> None:
    stack.queue.enqueue(JobSpec(job_id=job_id, queue=queue, payload=payload))


def no_leases_left(stack: Stack, *queues: str) -> None:
    for q in queues:
        assert stack.queue.stats(q).leased == 0, f"a lease on {q} was left to expire"


def test_the_dispatch_event_runs_jobs_to_completion(stack: Stack, unique: str,
                                                     event_json: Callable[[str], Any]) -> None:
    for i in range(3):
        add(stack, "quick", f"q{i}-{unique}", i + 1)
    event = {**event_json("worker_dispatch.json"), "queues": ["quick"]}
    out = load_function().handler(event, FakeLambdaContext(20_000))
    assert out["succeeded"] == 3 and out["stopped"] == "empty"
    assert [stack.store.get_job(f"q{i}-{unique}").result for i in range(3)] == [2, 4, 6]
    no_leases_left(stack, "quick")


def test_ten_second_jobs_are_not_leased_with_five_seconds_left(stack: Stack, unique: str) -> None:
    for i in range(3):
        add(stack, "tenseconds", f"t{i}-{unique}", None)
    started = time.monotonic()
    out = load_function().handler({"queues": ["tenseconds"], "batch": 10, "source": "schedule"},
                                  FakeLambdaContext(5_000))
    assert time.monotonic() - started < 1.0
    assert out["leased"] == 0 and out["stopped"] == "time" and out["skipped_for_time"] == ["tenseconds"]
    stats = stack.queue.stats("tenseconds")
    assert stats.ready == 3 and stats.leased == 0


def test_a_mix_stops_leasing_in_time_and_leaves_no_lease_behind(stack: Stack, unique: str) -> None:
    # Jobs that overrun their 1 s timeout, then quick ones, and a 10 s job; 5 s budget, 1 s margin.
    for i in range(4):
        add(stack, "mixed", f"m{i}-{unique}", {"sleep": 2.0})
    for i in range(4, 10):
        add(stack, "mixed", f"m{i}-{unique}", {"sleep": 0.0})
    add(stack, "tenseconds", f"t-{unique}", None)
    ctx = FakeLambdaContext(5_000)
    out = load_function().handler({"queues": ["tenseconds", "mixed"], "batch": 20}, ctx)

    assert ctx.get_remaining_time_in_millis() > 700, out  # returned with time to spare
    # At most (5 s - 1 s margin) // 1 s jobs fit; each overrun is stopped at its timeout.
    assert 3 <= out["leased"] <= 4 and out["retried"] + out["released"] == out["leased"], out
    assert out["stopped"] == "time" and "tenseconds" in out["skipped_for_time"]
    no_leases_left(stack, "mixed", "tenseconds")
    assert stack.queue.stats("mixed").ready + stack.queue.stats("mixed").delayed == 10
    for i in range(10):  # nothing is left "leased" in the store either
        with contextlib.suppress(JobNotFound):  # never granted
            assert stack.store.get_job(f"m{i}-{unique}").status == JobState.QUEUED
    assert stack.queue.stats("tenseconds").ready == 1


class ShrinkingContext(FakeLambdaContext):
    """A LambdaContext whose time left drops by ``cost_ms`` for every job the handler runs."""

    def __init__(self, budget_ms: int, cost_ms: int) -> None:
        super().__init__(budget_ms)
        self.left, self.cost_ms = budget_ms, cost_ms

    def spend(self) -> None:
        self.left -= self.cost_ms

    def get_remaining_time_in_millis(self) -> int:
        return self.left


current: list[ShrinkingContext] = []


@app.handler("costly", timeout_s=1)
def costly(job: Job, ctx: JobContext) -> str:
    current[0].spend()
    return job.job_id


def test_leases_it_will_not_finish_are_released_before_returning(stack: Stack, unique: str) -> None:
    for i in range(6):
        add(stack, "costly", f"c{i}-{unique}", None)
    ctx = ShrinkingContext(5_000, cost_ms=1_200)
    current[:] = [ctx]
    out = load_function().handler({"queues": ["costly"], "batch": 10}, ctx)
    # 4 leased ((5 s - 1 s) // 1 s); 5.0, 3.8, 2.6 s left: three run; 1.4 s < 1 s + 1 s margin.
    assert (out["leased"], out["succeeded"], out["released"], out["stopped"]) == (4, 3, 1, "time"), out
    no_leases_left(stack, "costly")
    assert stack.queue.stats("costly").ready == 3
    assert [stack.store.get_job(f"c{i}-{unique}").result for i in range(3)] == \
        [f"c{i}-{unique}" for i in range(3)]
    again = stack.queue.lease("costly", 10, 1_000, "check")  # the released one kept its attempt
    assert {j.job_id: j.attempt for j in again}[f"c3-{unique}"] == 1
