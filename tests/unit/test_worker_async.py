"""``async def`` handlers (issue 31, item 1): awaited on one reused loop, their leases renewed from
the heartbeat's thread even while one blocks the loop, and the context's awaitable forms."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_socket

import sluice
from sluice.core.families import FamilyAccepted, FamilyRequest
from sluice.core.models import Job
from sluice.worker.runtime import aio
from sluice.worker.runtime.context import JobContext
from sluice.worker.runtime.outcomes import Fail, Retry
from sluice_dev.fakes import kit

pytestmark = pytest.mark.timeout(20)


@contextlib.contextmanager
def unix_sockets() -> Iterator[None]:
    """Unix sockets allowed for a moment: an event loop wakes itself through an in-process Unix
    socket pair (its self-pipe), made with the loop; nothing else, no network."""
    pytest_socket.enable_socket()  # each disable wraps the socket class again: unwrap first
    pytest_socket.disable_socket(allow_unix_socket=True)
    try:
        yield
    finally:
        pytest_socket.enable_socket()
        pytest_socket.disable_socket()


@pytest.fixture(scope="module", autouse=True)
def _loop() -> None:
    with unix_sockets():
        aio.loop()


def test_an_async_handlers_result_is_awaited_and_stored_not_the_coroutine() -> None:
    # Before: every attempt failed with "Object of type coroutine is not JSON serializable".
    k = kit()

    @k.app.handler("q")
    async def h(job: Job, ctx: JobContext) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"double": job.payload * 2}

    k.queue.add("q", "j", 21)
    assert k.worker().drain(["q"], 1).as_dict()["succeeded"] == 1
    rec = k.store.get_job("j")
    assert rec.status == "succeeded" and rec.result == {"double": 42} and rec.attempts == 1
    assert "coroutine" not in (rec.last_error or "")


def test_sync_and_async_handlers_in_one_worker_share_one_loop_across_jobs_and_drains() -> None:
    k = kit()
    loops: list[asyncio.AbstractEventLoop] = []
    threads: list[str] = []

    @k.app.handler("a")
    async def a(job: Job, ctx: JobContext) -> str:
        loops.append(asyncio.get_running_loop())
        return "async"

    @k.app.handler("s")
    def s(job: Job, ctx: JobContext) -> str:
        threads.append(threading.current_thread().name)
        return "sync"

    for i in range(3):
        k.queue.add("a", f"a{i}", i)
        k.queue.add("s", f"s{i}", i)
    w = k.worker()
    assert w.drain(["a", "s"], 4).as_dict()["succeeded"] == 4
    assert k.worker().drain(["a", "s"], 10).as_dict()["succeeded"] == 2  # another drain, same loop
    assert {k.store.get_job(f"a{i}").result for i in range(3)} == {"async"}
    assert {k.store.get_job(f"s{i}").result for i in range(3)} == {"sync"}
    assert len(loops) == 3 and all(lp is aio.loop() for lp in loops) and not aio.loop().is_closed()
    assert all(t.startswith("sluice-job-") for t in threads)  # a sync handler keeps its own thread


def test_retry_and_fail_raised_in_a_coroutine_mean_what_they_mean_in_a_function() -> None:
    k = kit()

    @k.app.handler("r")
    async def r(job: Job, ctx: JobContext) -> None:
        raise Retry(after=30)

    @k.app.handler("f")
    async def f(job: Job, ctx: JobContext) -> None:
        raise Fail("no such image")

    @k.app.handler("e")
    async def e(job: Job, ctx: JobContext) -> None:
        raise KeyError("missing")

    for q in ("r", "f", "e"):
        k.queue.add(q, q, max_attempts=3)
    out = k.worker().drain(["r", "f", "e"], 3).as_dict()
    assert (out["retried"], out["failed"]) == (2, 1)
    assert k.store.get_job("f").status == "failed" and k.store.get_job("f").last_error == "no such image"
    assert k.store.get_job("e").last_error == "KeyError: 'missing'"


def test_a_handler_blocking_the_loop_does_not_starve_its_lease() -> None:
    k = kit()
    lease_ms = 60  # renewed every 20 ms

    @k.app.handler("block", timeout_s=10)
    async def block(job: Job, ctx: JobContext) -> dict[str, Any]:
        deadline = time.monotonic() + 5
        while len(k.queue.called("extend")) < 4 and time.monotonic() < deadline:
            time.sleep(0.005)  # blocks the loop: never yields to it
        return {"lost": ctx.lease_lost.is_set(), "token": ctx.token}

    k.queue.add("block", "j", 1)
    assert k.worker(lease_ms=lease_ms).drain(["block"], 1).as_dict()["succeeded"] == 1
    assert len(k.queue.called("extend")) >= 4  # renewed 4 times while the loop was blocked
    assert k.store.get_job("j").result == {"lost": False, "token": 1}


def test_an_async_handler_past_its_hard_timeout_is_cancelled_at_its_next_await() -> None:
    k = kit()
    cancelled = threading.Event()

    @k.app.handler("slow", timeout_s=0.1)
    async def slow(job: Job, ctx: JobContext) -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "too late"

    k.queue.add("slow", "j", max_attempts=3)
    assert k.worker(lease_ms=100).drain(["slow"], 1).as_dict()["retried"] == 1
    assert cancelled.wait(5)
    assert k.store.get_job("j").last_error == "hard timeout: the handler ran longer than 0.1 s"


class Gateway:
    def __init__(self) -> None:
        self.requests: list[FamilyRequest] = []

    def enqueue_children(self, request: FamilyRequest) -> FamilyAccepted:
        self.requests.append(request)
        return FamilyAccepted(job_ids=[f"child-{c.key}" for c in request.jobs],
                              continuation="then" if request.then else None)

    def release(self, continuation: str) -> None:
        raise AssertionError("not called here")


def test_the_context_offers_awaitable_enqueue_and_progress() -> None:
    k = kit()
    gw = Gateway()
    seen: dict[str, Any] = {}

    @k.app.handler("parent")
    async def parent(job: Job, ctx: JobContext) -> dict[str, Any]:
        loop_thread = threading.current_thread().name
        one = await ctx.aenqueue("child", {"n": 1}, key="one", priority=3)
        many = await ctx.aenqueue_many([("child", {"n": 2}, "two")], then=("report", {}))
        await ctx.aprogress(0.5, "half")
        seen["loop_thread"] = loop_thread
        return {"one": one, "many": many.job_ids, "then": many.continuation}

    k.queue.add("parent", "p", 0)
    w = k.app.bind(queue=k.queue, store=k.store, family_gateway=gw,
                   options=k.worker().options, telemetry=k.worker().telemetry)
    assert w.drain(["parent"], 1).as_dict()["succeeded"] == 1
    assert k.store.get_job("p").result == {"one": "child-one", "many": ["child-two"], "then": "then"}
    assert [r.parent_id for r in gw.requests] == ["p", "p"] and gw.requests[0].jobs[0].priority == 3
    assert seen["loop_thread"] == "sluice-loop"
    assert k.store.get_job("p").progress is not None


def test_the_async_example_in_docs_worker_md_runs() -> None:
    text = (Path(__file__).parents[2] / "docs" / "worker.md").read_text()
    example = text.split("### Async handlers", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    k = kit()
    namespace: dict[str, Any] = {"app": k.app, "sluice": sluice}
    exec(compile(example, "docs/worker.md", "exec"), namespace)
    k.queue.add("notify", "n1", {"to": "x"})
    w = k.app.bind(queue=k.queue, store=k.store, family_gateway=Gateway(),
                   options=k.worker().options, telemetry=k.worker().telemetry)
    assert w.drain(["notify"], 1).as_dict()["succeeded"] == 1
    assert k.store.get_job("n1").result == {"sent": True, "audit": "child-audit"}


def test_a_handler_holding_its_loop_past_its_timeout_does_not_take_the_next_jobs_with_it() -> None:
    k = kit()
    release = threading.Event()
    stuck_loops: list[asyncio.AbstractEventLoop] = []

    @k.app.handler("stuck", timeout_s=0.1)
    async def stuck(job: Job, ctx: JobContext) -> str:
        stuck_loops.append(asyncio.get_running_loop())
        release.wait(10)  # never awaits: the cancel at the timeout cannot stop it
        return "too late"

    @k.app.handler("fine", timeout_s=5)
    async def fine(job: Job, ctx: JobContext) -> str:
        await asyncio.sleep(0)
        return "ran"

    k.queue.add("stuck", "s", max_attempts=3)
    k.queue.add("fine", "f")
    w = k.worker(lease_ms=100)
    try:
        assert w.drain(["stuck"], 1).as_dict()["retried"] == 1
        with unix_sockets():  # the next async job starts a new loop
            assert w.drain(["fine"], 1).as_dict()["succeeded"] == 1
        assert aio.loop() is not stuck_loops[0]
    finally:
        release.set()
    deadline = time.monotonic() + 5
    while stuck_loops[0].is_running() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not stuck_loops[0].is_running()  # retired: its thread ends once its handler let go


def test_async_jobs_running_at_once_interleave_on_the_one_loop() -> None:
    k = kit()
    arrived: list[str] = []

    @k.app.handler("pair", timeout_s=5)
    async def pair(job: Job, ctx: JobContext) -> list[str]:
        arrived.append(job.job_id)
        while len(arrived) < 2:  # each waits for the other: only jobs that interleave both finish
            await asyncio.sleep(0.001)
        return sorted(arrived)

    k.queue.add("pair", "a")
    k.queue.add("pair", "b")
    assert k.worker(concurrency=2).drain(["pair"], 2).as_dict()["succeeded"] == 2
    assert k.store.get_job("a").result == k.store.get_job("b").result == ["a", "b"]


def test_a_typed_async_handler_gets_its_validated_model() -> None:
    from pydantic import BaseModel

    class Resize(BaseModel):
        width: int

    k = kit()

    @k.app.handler("resize", model=Resize)
    async def resize(req: Resize, ctx: JobContext) -> int:
        await asyncio.sleep(0)
        return req.width * 2

    k.queue.add("resize", "ok", {"width": 21})
    k.queue.add("resize", "bad", {"width": "wide"})
    out = k.worker().drain(["resize"], 2).as_dict()
    assert (out["succeeded"], out["failed"]) == (1, 1) and k.store.get_job("ok").result == 42
    assert k.store.get_job("bad").status == "failed"  # never ran: the payload does not validate
