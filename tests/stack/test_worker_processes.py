"""Real worker processes against real Redis and the moto server: crashes, freezes, long jobs.

Leases are 500 ms (renewed every ~167 ms) so each story takes a second or two.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sluice.core.errors import JobNotFound, LeaseLost, StaleToken
from sluice.core.models import JobSpec, LeasedJob
from sluice_dev.local.servers import Server
from tests.backends.worker_procs import Stack, WorkerProc, make_stack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

LEASE_MS = 500


@pytest.fixture(scope="module")
def tables_id() -> str:
    import uuid

    return uuid.uuid4().hex[:8]


@pytest.fixture
def stack(redis_url: str, moto_server: Server, tables_id: str) -> Iterator[Stack]:
    s = make_stack(redis_url, moto_server.extra["url"], tables_id, lease_ms=LEASE_MS)
    procs: list[WorkerProc] = []
    original = s.start

    def start(name: str, **overrides: Any) -> WorkerProc:
        p = original(name, **overrides)
        procs.append(p)
        return p

    s.start = start  # type: ignore[method-assign]
    yield s
    for p in procs:
        p.kill()
    s.queue.close()


def enqueue(stack: Stack, job_id: str, **payload: Any) -> None:
    stack.queue.enqueue(JobSpec(job_id=job_id, queue="work", payload=payload, max_attempts=5))


def test_crash_mid_job_the_job_is_leased_again_and_completes_once(stack: Stack, unique: str) -> None:
    job_id = f"crash-{unique}"
    enqueue(stack, job_id, n=12, sleep=5)
    a = stack.start("A")
    started = a.wait_for("job started")
    a.signal(signal.SIGKILL)
    a.proc.wait(5)
    b = stack.start("B", sleep_scale=0)  # B does not sleep: it just finishes the job
    b_started = b.wait_for("job started")
    assert b.summary()["summary"]["succeeded"] == 1

    rec = stack.store.get_job(job_id)
    assert rec.status == "succeeded" and rec.result == {"square": 144}
    assert (started["token"], b_started["token"]) == (1, 2) and rec.result_token == 2
    assert rec.attempts == 2 and b_started["attempt"] == 2
    assert b.messages().count("job succeeded") == 1
    assert stack.queue.stats("work").model_dump(include={"ready", "delayed", "leased", "dead"}) == \
        {"ready": 0, "delayed": 0, "leased": 0, "dead": 0}  # acked: gone from Redis


def test_frozen_past_its_lease_the_first_worker_is_fenced_off(stack: Stack, unique: str) -> None:
    job_id = f"freeze-{unique}"
    enqueue(stack, job_id, n=3, sleep=1.0, tag=True)
    a = stack.start("A")
    a_started = a.wait_for("job started")
    a.signal(signal.SIGSTOP)
    time.sleep(2 * LEASE_MS / 1000)  # A's lease expires while it is frozen
    b = stack.start("B", sleep_scale=0)
    b_started = b.wait_for("job started")
    assert b.summary()["summary"]["succeeded"] == 1
    a.signal(signal.SIGCONT)
    a_summary = a.summary()

    assert a_summary["summary"]["lease_lost"] == 1 and a_summary["summary"]["succeeded"] == 0
    assert any(m.startswith("lease lost") for m in a.messages())
    rec = stack.store.get_job(job_id)
    assert rec.status == "succeeded" and rec.result == {"square": 9, "by": "B"}
    assert rec.result_token == b_started["token"] == a_started["token"] + 1
    # Whatever A might still send is refused: the store fences its token, Redis its lease.
    with pytest.raises(StaleToken) as stale:
        stack.store.write_result(job_id, a_started["token"], {"square": 9, "by": "A"})
    assert (stale.value.mine, stale.value.current) == (a_started["token"], b_started["token"])
    with pytest.raises((LeaseLost, JobNotFound)):
        stack.queue.ack("work", job_id, a_started["lease_token"])
    assert stack.store.get_job(job_id).result == {"square": 9, "by": "B"}


def test_frozen_just_before_its_write_the_write_is_rejected(stack: Stack, unique: str) -> None:
    job_id = f"freeze-write-{unique}"
    enqueue(stack, job_id, n=4, tag=True)
    a = stack.start("A", hook="stop-before-write")
    a_started = a.wait_for("job started")
    a.wait_stopped()
    time.sleep(2 * LEASE_MS / 1000)
    b = stack.start("B")
    assert b.summary()["summary"]["succeeded"] == 1
    a.signal(signal.SIGCONT)
    a_summary = a.summary()

    # A wrote with its old token: the store refused it, and A sent no ack after that.
    rejected = a.wait_for("lease lost: fenced write rejected")
    assert f"token {a_started['token']} is stale, current is {a_started['token'] + 1}" in rejected["message"]
    assert a_summary["summary"]["lease_lost"] == 1
    assert a_summary["metrics"]["FencedWritesRejected"] == 1
    rec = stack.store.get_job(job_id)
    assert rec.result == {"square": 16, "by": "B"} and rec.result_token == a_started["token"] + 1
    with pytest.raises((LeaseLost, JobNotFound)):
        stack.queue.ack("work", job_id, a_started["lease_token"])


def test_a_cpu_bound_job_five_leases_long_is_never_redelivered(stack: Stack, unique: str) -> None:
    job_id = f"long-{unique}"
    enqueue(stack, job_id, n=5, spin=5 * LEASE_MS / 1000)
    a = stack.start("A")
    a.wait_for("job started")
    stolen: list[LeasedJob] = []
    stop = threading.Event()

    def second_worker() -> None:  # polls like a competing worker; gets any lapsed lease
        while not stop.is_set():
            stolen.extend(stack.queue.lease("work", 1, 60_000, "thief"))
            stop.wait(0.02)

    th = threading.Thread(target=second_worker)
    th.start()
    try:
        out = a.summary(timeout=20)
    finally:
        stop.set()
        th.join()
    assert stolen == []
    assert out["summary"]["succeeded"] == 1 and out["metrics"]["LeaseExtensions"] >= 4
    rec = stack.store.get_job(job_id)
    assert rec.status == "succeeded" and rec.attempts == 1 and rec.result == {"square": 25}


def test_a_crash_between_write_and_ack_runs_again_with_the_same_result(stack: Stack, unique: str) -> None:
    job_id = f"before-ack-{unique}"
    enqueue(stack, job_id, n=9)
    a = stack.start("A", hook="kill-before-ack")
    a.wait_for("about to die before the ack")
    assert a.proc.wait(10) == -signal.SIGKILL
    first = stack.store.get_job(job_id)
    assert first.status == "succeeded" and first.result == {"square": 81} and first.attempts == 1

    b = stack.start("B")  # leases it once A's lease expires
    assert b.summary()["summary"]["succeeded"] == 1
    rec = stack.store.get_job(job_id)
    assert rec.status == "succeeded" and rec.result == first.result
    assert rec.attempts == 2 and rec.result_token == first.result_token + 1  # type: ignore[operator]
    assert stack.queue.stats("work").leased == 0 and stack.queue.stats("work").ready == 0


@pytest.mark.timeout(90)
def test_a_crash_on_the_last_attempt_ends_dead_in_redis_and_in_the_store(stack: Stack, unique: str,
                                                                        tansu: Any) -> None:
    """The lease of a job on its last attempt expires (its worker was SIGKILLed): Redis
    dead-letters it inside a script, and no worker is left to tell DynamoDB. The relay's
    maintenance settles it, so the user does not read "leased" for ever."""
    from sluice.core.models import JobState
    from tests.backends.relay_proc import build, create_topic

    job_id = f"last-{unique}"
    stack.queue.enqueue(JobSpec(job_id=job_id, queue="work", payload={"n": 3, "sleep": 5}, max_attempts=1))
    a = stack.start("A")
    a.wait_for("job started")
    a.signal(signal.SIGKILL)
    a.proc.wait(5)
    assert stack.store.get_job(job_id).status == JobState.LEASED
    time.sleep(LEASE_MS / 1000 + 0.2)

    topic = f"settle-{unique}"
    create_topic(tansu.extra["bootstrap"], topic, 1)
    relay, source = build(stack.cfg["redis_url"], tansu.extra["bootstrap"], topic, f"g-{unique}",
                          store=stack.store, maintenance_s=0.1)
    try:
        deadline = time.monotonic() + 20
        while relay.report.settled < 1 and time.monotonic() < deadline:
            relay.step()
    finally:
        relay.stop()
        source.close()
    rec = stack.store.get_job(job_id)
    assert (rec.status, rec.last_error, rec.attempts) == (JobState.DEAD, "lease expired on attempt 1", 1)
    assert [d.job_id for d in stack.queue.dead_letters("work")] == [job_id]
    assert stack.queue.unsettled("work") == []  # settled, so forgotten


def test_a_rerun_of_a_succeeded_job_that_fails_leaves_it_succeeded(stack: Stack, unique: str) -> None:
    """A dies between its result write and its ack; the re-run B fails (a flaky dependency,
    say). The job keeps the result A stored and reads "succeeded", and B removes it from
    Redis instead of retrying it."""
    from sluice.core.models import JobState

    job_id = f"rerun-{unique}"
    enqueue(stack, job_id, n=4)
    a = stack.start("A", hook="kill-before-ack")
    a.wait_for("about to die before the ack")
    assert a.proc.wait(10) == -signal.SIGKILL
    b = stack.start("B", fail=True)
    assert b.summary()["summary"]["succeeded"] == 1  # ended as the success it already was
    rec = stack.store.get_job(job_id)
    assert (rec.status, rec.result, rec.attempts, rec.token) == (JobState.SUCCEEDED, {"square": 16}, 2, 2)
    assert rec.result_token == 1 and rec.last_error is None
    assert "re-run of an already succeeded job ended" in " ".join(b.messages())
    stats = stack.queue.stats("work")
    assert (stats.ready, stats.delayed, stats.leased, stats.dead) == (0, 0, 0, 0)
