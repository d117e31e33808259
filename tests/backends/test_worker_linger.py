"""A draining worker picks up newly pushed jobs without a new dispatch (issue 18): idle.lua, the
wake tokens push.lua leaves, the idle count stats.lua reports, and the worker's linger on them."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from sluice.backends.redis.engine import RedisQueue
from sluice.backends.redis.keys import QueueKeys
from sluice.backends.redis.scripts import source
from sluice.core.errors import InvalidInput
from sluice.core.models import JobSpec
from sluice.worker.registry import DrainSummary, Worker
from sluice.worker.runtime.options import WorkerOptions
from sluice.worker.runtime.telemetry import MemoryMetrics, Telemetry
from sluice_dev.fakes import FakeStore
from tests.backends.test_engine_support import snapshot

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]
K = QueueKeys("q")
TOPIC = "sluice.jobs"




def push(rq: RedisQueue, *offsets: int, partition: int = 0) -> int:
    return rq.push("q", TOPIC, partition, 1,
                   [(o, JobSpec(job_id=f"j{partition}-{o}", queue="q", payload=o)) for o in offsets]).pushed


def test_idle_registers_counts_and_forgets_workers(rq: RedisQueue, redis_client: redis.Redis) -> None:
    assert rq.stats("q").idle_workers == 0
    assert rq.idle("q", "w1", 5_000) == 1
    assert rq.idle("q", "w2", 30) == 2
    assert rq.stats("q").idle_workers == 2
    ttl = redis_client.pttl(K.idle)
    assert 4_000 < ttl <= 5_000  # the key goes with its longest waiter
    time.sleep(0.06)
    assert rq.stats("q").idle_workers == 1  # w2's wait is over: not counted
    assert rq.idle("q", "w3", 1_000) == 2  # and removed by the next call
    assert sorted(redis_client.zrange(K.idle, 0, -1)) == ["w1", "w3"]
    assert rq.idle("q", "w1", 0) == 1
    assert redis_client.zrange(K.idle, 0, -1) == ["w3"]


def test_idle_lua_refuses_bad_input_before_writing(rq: RedisQueue, redis_client: redis.Redis) -> None:
    rq.idle("q", "w1", 5_000)
    before = snapshot(redis_client)
    script = redis_client.register_script(source("idle.lua"))
    for args in (["", 10], ["x" * 257, 10], ["w", -1], ["w", 60_001], ["w", "1.5"], ["w", "x"]):
        with pytest.raises(redis.ResponseError, match="INVALID_INPUT"):
            script(keys=[K.idle], args=args)
    for worker, ms in (("", 10), ("w", -1), ("w", 60_001)):
        with pytest.raises(InvalidInput):
            rq.idle("q", worker, ms)
    assert {k: v[:2] for k, v in snapshot(redis_client).items()} == {k: v[:2] for k, v in before.items()}


def test_one_push_batch_wakes_every_waiting_worker(rq: RedisQueue) -> None:
    """Three workers wait (idle.lua, then BLPOP); one push of five jobs wakes all three at once."""
    woke: list[float] = []

    def wait(worker: str) -> None:
        rq.idle("q", worker, 3_000)
        if rq.wait_for_work("q", 3_000, worker):
            woke.append(time.monotonic())

    waiters = [threading.Thread(target=wait, args=(f"w{w}",)) for w in range(3)]
    for t in waiters:
        t.start()
    deadline = time.monotonic() + 5
    while rq.stats("q").idle_workers < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)  # each is in its BLPOP by now
    pushed_at = time.monotonic()
    assert push(rq, *range(5)) == 5
    for t in waiters:
        t.join(5)
    assert len(woke) == 3 and max(woke) - pushed_at < 1.0


def test_wait_for_work_returns_on_a_push_and_times_out_without_one(rq: RedisQueue) -> None:
    t0 = time.monotonic()
    assert rq.wait_for_work("q", 100) is False
    assert time.monotonic() - t0 >= 0.09
    woke: list[float] = []
    waiter = threading.Thread(target=lambda: woke.append(rq.wait_for_work("q", 3_000) and time.monotonic()))
    waiter.start()
    time.sleep(0.2)
    pushed_at = time.monotonic()
    push(rq, 0)
    waiter.join(5)
    assert woke and woke[0] and woke[0] - pushed_at < 0.5
    with pytest.raises(InvalidInput):
        rq.wait_for_work("q", 0)
    for worker in ("x" * 257, 7):
        with pytest.raises(InvalidInput):
            rq.wait_for_work("q", 10, worker)  # type: ignore[arg-type]


def _worker(rq: RedisQueue, store: FakeStore, linger_ms: int, ran: list[tuple[str, float]],
            worker_id: str = "linger-test") -> Worker:
    app = Worker()
    app.register("q", lambda job, ctx: ran.append((job.job_id, time.monotonic())) or {"ok": True})
    return app.bind(queue=rq, store=store, options=WorkerOptions(lease_ms=5_000, linger_ms=linger_ms),
                    telemetry=Telemetry(MemoryMetrics()), worker_id=worker_id)


def test_a_lingering_drain_runs_jobs_pushed_after_its_queue_went_empty(rq: RedisQueue) -> None:
    """One drain, started on an empty queue: two jobs pushed later, one by one, both run in it,
    each within a moment of its push; the drain is counted idle while it waits, and ends once
    the queue has stayed empty for the linger."""
    ran: list[tuple[str, float]] = []
    worker = _worker(rq, FakeStore(), 1_500, ran)
    out: list[DrainSummary] = []
    drain = threading.Thread(target=lambda: out.append(worker.drain(["q"], 10)))
    started = time.monotonic()
    drain.start()
    pushes = []
    for n in range(2):
        time.sleep(0.4)
        assert rq.stats("q").idle_workers == 1  # the relay would start no worker for this push
        pushes.append(time.monotonic())
        push(rq, n)
        deadline = time.monotonic() + 3
        while len(ran) < n + 1 and time.monotonic() < deadline:
            time.sleep(0.005)
    drain.join(10)
    assert [job for job, _ in ran] == ["j0-0", "j0-1"]
    assert all(at - pushed < 0.5 for (_, at), pushed in zip(ran, pushes, strict=True))
    assert out[0].leased == 2 and out[0].stopped == "empty"
    assert time.monotonic() - pushes[-1] >= 1.4  # it waited the linger after the last job
    assert time.monotonic() - started < 6
    assert rq.stats("q").idle_workers == 0


def test_a_trickle_keeps_one_lingering_worker_not_every_worker_it_finds_waiting(rq: RedisQueue) -> None:
    """Issue 28's 23.6 s: two drains linger on a queue that gets one job every 0.2 s (a rate
    limit of 5 a second). The push wakes the worker that began waiting last, so the other is not
    needed and ends at its linger's end; the trickle keeps one worker, not two. Before, every
    BLPOP took a token in turn: the two workers alternated, each woken every 0.4 s, inside its
    1 s linger, and both drained until the queue stayed empty. On `sluice dev` with 2 worker
    containers, queue A's two lingering workers held both while A drained its 150 jobs at 5 a
    second, and B's invocation waited for a container for 23.6 s."""
    ran: list[tuple[str, float]] = []
    store = FakeStore()
    ended: dict[str, float] = {}
    out: dict[str, DrainSummary] = {}

    def drain(name: str) -> None:
        out[name] = _worker(rq, store, 1_000, ran, worker_id=name).drain(["q"], 10)
        ended[name] = time.monotonic()

    drains = [threading.Thread(target=drain, args=(name,)) for name in ("x", "y")]
    for t in drains:
        t.start()
    deadline = time.monotonic() + 5
    while rq.stats("q").idle_workers < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    for n in range(20):  # 4 s of jobs, 0.2 s apart
        push(rq, n)
        time.sleep(0.2)
    last_push = time.monotonic()
    for t in drains:
        t.join(10)
    assert sorted(job for job, _ in ran) == sorted(f"j0-{n}" for n in range(20))  # each once
    assert sum(s.leased for s in out.values()) == 20
    first = min(ended.values())
    # the worker not needed left about a linger after the trickle began, not after it ended
    assert first - started < 2.0 < last_push - started, (first - started, last_push - started)
    assert all(s.stopped == "empty" for s in out.values())


def test_without_linger_a_drain_of_an_empty_queue_returns_at_once(rq: RedisQueue) -> None:
    ran: list[tuple[str, float]] = []
    t0 = time.monotonic()
    summary = _worker(rq, FakeStore(), 0, ran).drain(["q"], 10)
    assert summary.stopped == "empty" and time.monotonic() - t0 < 0.5
    assert rq.stats("q").idle_workers == 0


def test_a_lingering_drain_goes_past_its_batch_while_jobs_keep_coming(rq: RedisQueue) -> None:
    """batch bounds each lease round of a lingering drain, not the drain: 25 jobs, batch 10."""
    ran: list[tuple[str, float]] = []
    push(rq, *range(25))
    summary = _worker(rq, FakeStore(), 200, ran).drain(["q"], 10)
    assert summary.leased == 25 and len(ran) == 25 and summary.stopped == "empty"


def test_a_drain_of_several_queues_never_lingers(rq: RedisQueue) -> None:
    ran: list[tuple[str, float]] = []
    worker = _worker(rq, FakeStore(), 5_000, ran)
    t0 = time.monotonic()
    summary = worker.drain(["q", "other"], 10)
    assert summary.stopped == "empty" and time.monotonic() - t0 < 1.0
