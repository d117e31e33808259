"""Regression tests for what the chaos suite found (docs/break-it.md, "Findings").

1. A worker frozen between its lease and its grant (or during the grant call) woke up and was
   granted a job that another worker had meanwhile finished and acknowledged: the jobs table
   said "leased" for good. Likewise a re-run after a crash before ack, given up when Redis
   lost the job under it. The store now keeps a succeeded job succeeded through re-runs.
2. After a broker crash, Tansu acknowledged an idempotent producer's retried record with
   offset -1 and never stored it: the gateway answered 202 for a job that was gone.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from sluice.backends.kafka.producer import KafkaJobLog
from sluice.core.errors import BackendUnavailable
from sluice.core.models import JobSpec
from sluice.worker.runtime.heartbeat import Tracked
from sluice.worker.runtime.outcomes import Outcome
from sluice_dev.fakes import kit
from sluice_dev.fakes.worker import Kit


def run_j1(k: Kit, leased_s_ago: float) -> tuple[Outcome, Tracked]:
    """Lease job j1 of queue q (a 1 s lease) and run it as a worker that took it ``leased_s_ago``."""
    worker = k.worker(lease_ms=1000)
    session = worker._open()
    try:
        leased = k.queue.lease("q", 1, 1000, "w-test")[0]
        tracked = session.heartbeat.track(leased, time.monotonic() - leased_s_ago, worker._job_log(leased))
        return session.runner.run(tracked, worker.handlers["q"]), tracked
    finally:
        worker._close(session)


def test_a_lease_that_lapsed_before_the_grant_is_not_granted() -> None:
    k = kit()
    k.app.register("q", lambda job, ctx: "done")
    k.queue.add("q", "j1")
    outcome, tracked = run_j1(k, 5)  # leased, then frozen for 5 s: longer than the lease
    assert outcome is Outcome.LEASE_LOST
    assert k.store.called("grant") == []  # no token minted, so no status taken back to "leased"
    assert tracked.state.lease_lost.is_set() and not tracked.active


def test_a_grant_that_lands_after_the_lease_lapsed_leaves_a_finished_job_succeeded() -> None:
    k = kit()
    k.app.register("q", lambda job, ctx: "mine")
    k.queue.add("q", "j1")
    real_grant = k.store.grant

    def frozen_during_the_grant(job_id: str, queue: str, owner: str, redrive_gen: int = 0, *,
                                lease_token: int | None = None) -> int:
        # meanwhile another worker took the lease, ran the job and wrote "theirs"
        k.queue.steal("q", "j1")
        k.store.items["j1"] = {"queue": "q", "status": "succeeded", "token": 1, "attempts": 1,
                               "cancel_requested": False, "result": "theirs", "result_json": '"theirs"',
                               "result_token": 1}
        time.sleep(0.6)  # a freeze longer than the grant margin: the request goes out after the lapse
        return real_grant(job_id, queue, owner, redrive_gen, lease_token=lease_token)

    k.store.grant = frozen_during_the_grant  # type: ignore[method-assign]
    # 500 ms of lease left: more than the grant margin (333 ms for a 1 s lease), so it grants
    outcome, _ = run_j1(k, 0.5)
    assert outcome is Outcome.LEASE_LOST
    item = k.store.items["j1"]
    assert (item["status"], item["result"]) == ("succeeded", "theirs")  # the grant did not touch it
    assert (item["token"], item["result_token"]) == (2, 1)
    assert k.queue.called("ack") == []  # the Redis lease is not ours: nothing to ack


def test_a_re_run_of_a_finished_job_given_up_when_redis_lost_it_keeps_the_stored_result() -> None:
    # Crash before ack: "first" was written with token 1, the job came back and is run again.
    k = kit()
    k.queue.add("q", "j1")
    k.store.items["j1"] = {"queue": "q", "status": "succeeded", "token": 1, "attempts": 1,
                           "cancel_requested": False, "result": "first", "result_json": '"first"',
                           "result_token": 1}

    def rerun(job: Any, ctx: Any) -> str:
        k.queue.jobs.pop(("q", "j1"))  # Redis restarts empty while the re-run works
        ctx.lease_lost.wait(5)  # the heartbeat finds the job gone
        return "second"

    k.app.register("q", rerun)
    summary = k.worker(lease_ms=300).drain(["q"], 1)
    assert summary.outcomes["lease_lost"] == 1
    item = k.store.items["j1"]
    assert (item["status"], item["result"]) == ("succeeded", "first")  # never "leased" on the way
    assert (item["result_token"], item["token"]) == (1, 2)


def test_a_live_lease_is_still_granted() -> None:
    k = kit()
    k.app.register("q", lambda job, ctx: "done")
    k.queue.add("q", "j1")
    assert k.worker().drain(["q"], 1).outcomes["succeeded"] == 1
    assert len(k.store.called("grant")) == 1


class _Acked:
    def __init__(self, offset: int) -> None:
        self.offset = offset

    def get(self, timeout: float) -> Any:
        return self


class _Producer:
    def __init__(self, offsets: list[int]) -> None:
        self.offsets = offsets
        self.closed = False

    def send(self, topic: str, key: bytes, value: bytes) -> _Acked:
        return _Acked(self.offsets.pop(0))

    def close(self, timeout: float = 0) -> None:
        self.closed = True


def test_an_acknowledgement_without_an_offset_is_an_unknown_outcome() -> None:
    log = KafkaJobLog({}, "jobs")
    broken = _Producer([5, -1])
    log._producer = broken
    specs = [JobSpec(job_id=f"j{i}", queue="q", payload=i) for i in range(2)]
    with pytest.raises(BackendUnavailable):
        log.append(specs)  # the gateway withdraws these jobs and answers 503, not 202
    assert broken.closed and log._producer is None  # the next append starts a fresh producer
    log._producer = _Producer([6, 7])
    log.append(specs)
