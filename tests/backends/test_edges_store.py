"""Issue 13, bugs 1, 2, 4 and 5: where Redis (who may run) and DynamoDB (whose writes count)
disagree after a crash, an operator's redrive or a retention expiry.

Each test replays one of the issue's timelines, deterministically, on a real redis-server and
the moto server, with the real engine, store, redrive path and worker runtime; a worker's
death is played by not making its next call. ``relay_settles`` is the relay's maintenance
step (``relay.maintenance.Maintenance._settle``): read the settle set, write each ending, forget it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

import sluice
import sluice.core.errors
from sluice.backends.redis.keys import QueueKeys
from sluice.core.bus import EventBus
from sluice.core.endings import Settled
from sluice.core.errors import AlreadyFinished, JobNotFound
from sluice.core.models import Job, JobSpec, JobState, LeasedJob, SettleEntry, WriteOutcome
from sluice.gateway.api import Api, Backends, IdMinting
from sluice.gateway.redrive import redrive_all, redrive_one
from sluice.worker.registry import Worker
from sluice.worker.runtime.context import JobContext
from sluice.worker.runtime.options import WorkerOptions
from sluice_dev.local.servers import Server
from tests.backends.test_engine_support import where
from tests.backends.worker_procs import Stack, make_stack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]
Q = "edges"
LEASE_MS = 60


@pytest.fixture(scope="module")
def tables_id() -> str:
    import uuid

    return uuid.uuid4().hex[:8]


@pytest.fixture
def stack(redis_url: str, moto_server: Server, tables_id: str) -> Iterator[Stack]:
    s = make_stack(redis_url, moto_server.extra["url"], tables_id, queue=Q)
    yield s
    s.queue.close()


def leased(stack: Stack, job_id: str, max_attempts: int = 3) -> LeasedJob:
    assert stack.queue.enqueue(JobSpec(job_id=job_id, queue=Q, payload={"n": 1}, max_attempts=max_attempts,
                                       lease_ms=LEASE_MS))
    [job] = stack.queue.lease(Q, 1)
    assert job.job_id == job_id
    return job


def lapse(stack: Stack) -> None:
    """The holder is dead: its lease runs out and reap reclaims it."""
    time.sleep(LEASE_MS * 2 / 1000)
    stack.queue.reap(Q)


def relay_settles(stack: Stack, ended: list[SettleEntry] | None = None) -> list[Settled]:
    ended = stack.queue.unsettled(Q) if ended is None else ended
    written = [stack.store.settle_ended(e) for e in ended]
    stack.queue.settled(Q, ended, [e for e, w in zip(ended, written, strict=True) if w is Settled.FINAL])
    return written


def counting_worker(stack: Stack, calls: list[int]) -> Worker:
    app = sluice.Worker()

    @app.handler(Q)
    def handler(job: Job, ctx: JobContext) -> dict[str, int]:
        calls.append(ctx.token)
        return {"token": ctx.token}

    return app.bind(queue=stack.queue, store=stack.store, options=WorkerOptions(lease_ms=5_000),
                    worker_id="edges-test")


def settle_members(stack: Stack) -> list[str]:
    return [m.decode() if isinstance(m, bytes) else str(m)
            for m in stack.queue.client.zrange(QueueKeys(Q).settle, 0, -1)]


# -- bug 1: a cancel after a crash must end the job, not leave it leased for ever ---------------------


def test_cancel_of_a_job_reclaimed_after_its_worker_died_ends_it_cancelled(stack: Stack, unique: str) -> None:
    job_id = f"c1-{unique}"
    job = leased(stack, job_id)
    stack.store.grant(job_id, Q, "A", job.redrive_gen)  # item: leased; then A dies
    lapse(stack)
    assert where(stack.queue.client, Q, job_id) == {"ready"}
    api = Api(Backends(None, stack.store, stack.queue, EventBus()), IdMinting(b"k" * 32))  # type: ignore[arg-type]

    accepted = api.cancel(job_id)

    assert accepted.status == "cancelled"
    assert stack.store.get_job(job_id).status is JobState.CANCELLED
    assert where(stack.queue.client, Q, job_id) == set()
    # The removal was recorded for the relay too; the store already says cancelled, so it is a no-op.
    assert settle_members(stack) == [f"cancelled:0:{job_id}"]
    assert relay_settles(stack) == [Settled.FINAL]
    assert settle_members(stack) == []


def test_a_removal_the_gateway_could_not_record_is_settled_by_the_relay(stack: Stack, unique: str) -> None:
    job_id = f"c2-{unique}"
    job = leased(stack, job_id)
    stack.store.grant(job_id, Q, "A", job.redrive_gen)
    lapse(stack)
    assert stack.store.request_cancel(job_id).cancel_requested
    assert stack.queue.cancel(Q, job_id, settle=True) == "removed"
    # ... and the gateway dies before it ends the item.
    assert stack.store.get_job(job_id).status is JobState.LEASED
    assert relay_settles(stack) == [Settled.WRITTEN]
    record = stack.store.get_job(job_id)
    assert (record.status, record.finished_at_ms is not None) == (JobState.CANCELLED, True)


def test_cancel_of_a_job_already_dead_lettered_in_redis_is_409(stack: Stack, unique: str) -> None:
    job_id = f"c3-{unique}"
    job = leased(stack, job_id, max_attempts=1)
    stack.store.grant(job_id, Q, "A", job.redrive_gen)
    lapse(stack)  # its last attempt: dead in Redis, the item still says leased until the relay runs
    api = Api(Backends(None, stack.store, stack.queue, EventBus()), IdMinting(b"k" * 32))  # type: ignore[arg-type]
    with pytest.raises(AlreadyFinished, match="dead"):
        api.cancel(job_id)
    assert relay_settles(stack) == [Settled.WRITTEN]
    assert stack.store.get_job(job_id).status is JobState.DEAD


def test_a_live_lease_still_honours_the_cancel(stack: Stack, unique: str) -> None:
    job_id = f"c4-{unique}"
    job = leased(stack, job_id)
    stack.store.grant(job_id, Q, "A", job.redrive_gen)
    api = Api(Backends(None, stack.store, stack.queue, EventBus()), IdMinting(b"k" * 32))  # type: ignore[arg-type]
    assert api.cancel(job_id).status == "cancel_requested"
    assert stack.queue.extend(Q, job_id, job.lease_token, 1_000).cancel_requested
    assert settle_members(stack) == []


# -- bug 2: the relay's settle write must not land on a newer attempt after a redrive ----------------


def test_settle_entry_read_before_a_redrive_cannot_end_the_redriven_run(stack: Stack, unique: str) -> None:
    job_id = f"s1-{unique}"
    job = leased(stack, job_id, max_attempts=1)
    first = stack.store.grant(job_id, Q, "A", job.redrive_gen)
    lapse(stack)  # expired on its last attempt: dead in Redis, a settle entry for the relay
    read = stack.queue.unsettled(Q)  # the relay reads it ...
    assert [e.member for e in read] == [f"dead:0:{job_id}"]

    assert redrive_one(stack.queue, stack.store, Q, job_id, log=None) == 1  # ... an operator redrives ...
    [again] = stack.queue.lease(Q, 1)
    second = stack.store.grant(job_id, Q, "B", again.redrive_gen)  # ... and a worker is granted it
    assert (again.redrive_gen, second) == (1, first + 1)

    assert relay_settles(stack, read) == [Settled.MOVED_ON]  # the relay's late write is fenced
    assert stack.store.get_job(job_id).status is JobState.LEASED
    assert stack.store.write_result(job_id, second, "done") is WriteOutcome.WRITTEN
    assert stack.store.get_job(job_id).status is JobState.SUCCEEDED


def test_settle_landing_between_redrive_and_grant_does_not_stop_the_redriven_run(stack: Stack,
                                                                                 unique: str) -> None:
    job_id = f"s2-{unique}"
    job = leased(stack, job_id, max_attempts=1)
    stack.store.grant(job_id, Q, "A", job.redrive_gen)
    lapse(stack)
    read = stack.queue.unsettled(Q)
    redrive_one(stack.queue, stack.store, Q, job_id, log=None)
    # The redrive minted a newer generation after the relay read the entry: the settle is refused
    # (it used to land, leaving the waiting job's item dead, expiring, and counted as ended, until
    # the next grant; the job model found that).
    assert relay_settles(stack, read) == [Settled.MOVED_ON]
    assert stack.store.get_job(job_id).status is JobState.LEASED
    [again] = stack.queue.lease(Q, 1)
    token = stack.store.grant(job_id, Q, "B", again.redrive_gen)
    assert stack.store.write_result(job_id, token, "done") is WriteOutcome.WRITTEN


# -- bug 4: a failed job must not run again after a lapse; only a redrive re-opens it ----------------


def test_failed_job_whose_worker_died_before_telling_redis_does_not_run_again(stack: Stack,
                                                                             unique: str) -> None:
    job_id = f"f1-{unique}"
    job = leased(stack, job_id, max_attempts=5)
    token = stack.store.grant(job_id, Q, "A", job.redrive_gen)
    stack.store.record_failure(job_id, token, "bad input", "failed")  # A's verdict; A dies before queue.fail
    lapse(stack)
    assert where(stack.queue.client, Q, job_id) == {"ready"}  # back for attempt 2
    calls: list[int] = []
    w = counting_worker(stack, calls)

    summary = w.drain([Q], 1).as_dict()

    assert calls == []  # not run again
    assert summary["dead"] == 1
    assert where(stack.queue.client, Q, job_id) == {"dead"}  # Redis now agrees, and stops offering it
    record = stack.store.get_job(job_id)
    assert (record.status, record.token, record.last_error) == (JobState.FAILED, token, "bad input")
    assert w.drain([Q], 1).as_dict()["leased"] == 0  # no loop
    assert settle_members(stack) == []

    # Only an explicit redrive runs it again, once.
    assert redrive_one(stack.queue, stack.store, Q, job_id, log=None) == 1
    w.drain([Q], 1)
    assert calls == [token + 1]
    record = stack.store.get_job(job_id)
    assert (record.status, record.redrive_gen) == (JobState.SUCCEEDED, 1)


def test_redriven_run_that_fails_again_is_final_again(stack: Stack, unique: str) -> None:
    job_id = f"f2-{unique}"
    job = leased(stack, job_id, max_attempts=5)
    t1 = stack.store.grant(job_id, Q, "A", job.redrive_gen)
    stack.store.record_failure(job_id, t1, "bad", "failed")
    stack.queue.fail(Q, job_id, job.lease_token, "bad", permanent=True)
    redrive_one(stack.queue, stack.store, Q, job_id, log=None)
    [again] = stack.queue.lease(Q, 1, 50)
    t2 = stack.store.grant(job_id, Q, "B", again.redrive_gen)
    stack.store.record_failure(job_id, t2, "bad again", "failed")  # B dies before queue.fail
    time.sleep(0.1)
    stack.queue.reap(Q)
    [third] = stack.queue.lease(Q, 1)
    assert third.redrive_gen == 1  # still the generation B ran under
    with pytest.raises(AlreadyFinished):
        stack.store.grant(job_id, Q, "C", third.redrive_gen)


# -- bug 5: the fencing token never goes backwards, whatever expires ---------------------------------


def expire(stack: Stack, job_id: str) -> None:
    """TTL deletes the item of a final job retention_days after it ended (moto never does)."""
    stack.store._db.delete_item(TableName=stack.store.table, Key={"job_id": {"S": job_id}})


def test_redrive_of_a_job_whose_record_expired_is_refused(stack: Stack, unique: str) -> None:
    job_id = f"t1-{unique}"
    job = leased(stack, job_id, max_attempts=1)
    token = stack.store.grant(job_id, Q, "A", job.redrive_gen)
    stack.store.record_failure(job_id, token, "boom", "dead")
    stack.queue.fail(Q, job_id, job.lease_token, "boom", permanent=True)
    expire(stack, job_id)  # 14 days later; Redis's dead set keeps the job

    with pytest.raises(JobNotFound, match="fencing tokens already used"):
        redrive_one(stack.queue, stack.store, Q, job_id, log=None)

    assert where(stack.queue.client, Q, job_id) == {"dead"}  # left as it was
    assert stack.queue.lease(Q, 1) == []
    report = redrive_all(stack.queue, stack.store, Q, log=None)
    assert report.moved == 0 and list(report.refused) == [job_id]


def test_redriven_job_whose_record_expired_before_its_grant_is_not_restarted_at_token_1(
        stack: Stack, unique: str) -> None:
    job_id = f"t2-{unique}"
    job = leased(stack, job_id, max_attempts=1)
    token = stack.store.grant(job_id, Q, "A", job.redrive_gen)
    stack.store.record_failure(job_id, token, "boom", "dead")
    stack.queue.fail(Q, job_id, job.lease_token, "boom", permanent=True)
    redrive_one(stack.queue, stack.store, Q, job_id, log=None)
    expire(stack, job_id)  # however it went: the redriven job reaches its grant with no item
    calls: list[int] = []
    w = counting_worker(stack, calls)
    w.drain([Q], 1)
    assert calls == []
    with pytest.raises(JobNotFound):
        stack.store.get_job(job_id)  # no item was created with token 1
    assert where(stack.queue.client, Q, job_id) == {"dead"}


def test_grant_refuses_a_redriven_generation_the_item_never_issued(stack: Stack, unique: str) -> None:
    job_id = f"t3-{unique}"
    job = leased(stack, job_id)
    token = stack.store.grant(job_id, Q, "A", job.redrive_gen)
    stack.store.record_failure(job_id, token, "boom", "failed")
    with pytest.raises(AlreadyFinished):
        stack.store.grant(job_id, Q, "B", 7)


# -- minor: the abandoned thread of a re-run that passed its hard timeout cannot write -----------------


def test_abandoned_thread_of_a_timed_out_rerun_of_a_succeeded_job_cannot_write(stack: Stack,
                                                                                unique: str) -> None:
    side = f"side-{unique}"
    db = stack.store._db
    db.create_table(TableName=side, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                    AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                    BillingMode="PAY_PER_REQUEST")
    job_id = f"r1-{unique}"
    job = leased(stack, job_id)
    first = stack.store.grant(job_id, Q, "A", job.redrive_gen)
    stack.store.write_result(job_id, first, {"ok": True})  # A dies before its ack
    lapse(stack)
    late: list[str] = []
    done = threading.Event()
    app = sluice.Worker()

    @app.handler(Q, timeout_s=0.2)
    def slow(job: Job, ctx: JobContext) -> None:
        time.sleep(0.5)  # past the hard timeout: the runtime has given up on this thread
        try:
            ctx.fenced_table(side).put_item({"pk": "late"})
            late.append("written")
        except sluice.core.errors.SluiceError as exc:
            late.append(type(exc).__name__)
        done.set()

    w = app.bind(queue=stack.queue, store=stack.store, options=WorkerOptions(lease_ms=5_000),
                 worker_id="edges-rerun")
    assert w.drain([Q], 1).as_dict()["succeeded"] == 1  # the re-run ended; the stored result stands
    assert done.wait(5)
    assert late == ["LeaseLost"]
    assert db.scan(TableName=side)["Items"] == []
    record = stack.store.get_job(job_id)
    assert (record.status, record.result, record.token) == (JobState.SUCCEEDED, {"ok": True}, first + 1)
