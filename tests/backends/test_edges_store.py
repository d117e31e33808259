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
from sluice.core.bus import EventBus, JobEnded
from sluice.core.endings import Settled
from sluice.core.errors import AlreadyFinished, JobCancelled, JobNotFound
from sluice.core.models import Job, JobSpec, JobState, LeasedJob, SettleEntry, WriteOutcome
from sluice.gateway.api import Api, Backends, IdMinting
from sluice.gateway.redrive import redrive_all, redrive_one
from sluice.relay.config import RelayConfig
from sluice.relay.dispatch import Dispatch
from sluice.relay.maintenance import Maintenance
from sluice.relay.queues import QueueStates
from sluice.relay.state import RelayReport
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


def failed_for_good(stack: Stack, job_id: str, status: str, max_attempts: int = 1) -> None:
    """Worker A ran the job and failed it for good: ``status`` (failed or dead) in the jobs table,
    then a permanent fail in Redis, which moves it to the dead set."""
    job = leased(stack, job_id, max_attempts=max_attempts)
    token = stack.store.grant(job_id, Q, "A", job.redrive_gen)
    stack.store.record_failure(job_id, token, "boom", status)
    stack.queue.fail(Q, job_id, job.lease_token, "boom", permanent=True)


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
    failed_for_good(stack, job_id, "failed", max_attempts=5)
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
    failed_for_good(stack, job_id, "dead")
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
    failed_for_good(stack, job_id, "dead")
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

# -- issue 29, items 1 and 8: a redriven job that ends before its grant is recorded; the dead set
# holds only dead jobs. ``maintenance`` is the relay's real maintenance (reap, settle, trim).
# A redrive leaves the item failed/dead until the redriven job's grant. An ending before that grant
# (a cancel while it waits; a lapse of the redriven attempt on its last attempt) used to be refused:
# the cancel answered 409 and the job ran anyway; the lapse left the item with its old status, no
# expires_at, no completion event, and a Redis loss replayed it. A job whose item is final as
# succeeded or cancelled used to stay in the dead set for good.


def maintenance(stack: Stack) -> tuple[Maintenance, list[JobEnded]]:
    """The relay's maintenance over the real engine and store; the endings it emits."""
    bus, config, report = EventBus(), RelayConfig(), RelayReport()
    seen: list[JobEnded] = []
    bus.subscribe(seen.append, JobEnded)
    m = Maintenance(stack.queue, stack.store, config, QueueStates(stack.queue, config, events=bus),
                    Dispatch(None, config, report=report, events=bus), report=report, events=bus)
    return m, seen


def gateway_api(stack: Stack) -> Api:
    return Api(Backends(None, stack.store, stack.queue, EventBus()), IdMinting(b"k" * 32))  # type: ignore[arg-type]


def raw_item(stack: Stack, job_id: str) -> dict[str, object]:
    item = stack.store._db.get_item(TableName=stack.store.table, Key={"job_id": {"S": job_id}},
                                    ConsistentRead=True)["Item"]
    return {k: next(iter(v.values())) for k, v in item.items()}


def dead_then_redriven(stack: Stack, job_id: str) -> None:
    """A job that died on its last attempt (settled ``dead``), then redriven: it waits in ready with
    generation 1 while its item still says dead, as a redrive leaves it until the grant."""
    job = leased(stack, job_id, max_attempts=1)
    stack.store.grant(job_id, Q, "A", job.redrive_gen, lease_token=job.lease_token)
    lapse(stack)
    m, _ = maintenance(stack)
    m.run(0.0)
    assert stack.store.get_job(job_id).status is JobState.DEAD
    assert redrive_one(stack.queue, stack.store, Q, job_id, log=None) == 1
    assert where(stack.queue.client, Q, job_id) == {"ready"}
    record = stack.store.get_job(job_id)
    assert (record.status, record.redrive_gen) == (JobState.DEAD, 1)


# -- item 1 (i): a cancel while the redriven job waits works as for a queued job ------------------------


def test_cancel_of_a_redriven_job_while_it_waits_cancels_it(stack: Stack, unique: str) -> None:
    job_id = f"rc-{unique}"
    dead_then_redriven(stack, job_id)

    accepted = gateway_api(stack).cancel(job_id)  # was 409 "already dead", and the job then ran anyway

    assert accepted.status == "cancelled"
    record = stack.store.get_job(job_id)
    assert (record.status, record.finished_at_ms is not None) == (JobState.CANCELLED, True)
    item = raw_item(stack, job_id)
    assert item["run_gen"] == "1" and "expires_at" in item  # the redriven generation's ending
    assert where(stack.queue.client, Q, job_id) == set()
    assert not stack.queue.client.exists(QueueKeys(Q).job(job_id))
    assert stack.queue.lease(Q, 1) == []  # nothing runs
    assert stack.store.relay_view([job_id])[0] == {job_id}  # done with: a replay skips it


def test_cancel_of_a_redriven_job_leased_but_not_granted_refuses_its_grant(stack: Stack,
                                                                          unique: str) -> None:
    job_id = f"rg-{unique}"
    dead_then_redriven(stack, job_id)
    [again] = stack.queue.lease(Q, 1)

    assert gateway_api(stack).cancel(job_id).status == "cancelled"

    with pytest.raises(JobCancelled):
        stack.store.grant(job_id, Q, "B", again.redrive_gen, lease_token=again.lease_token)
    assert stack.store.get_job(job_id).status is JobState.CANCELLED


def test_a_redriven_job_that_ran_is_cancelled_as_before(stack: Stack, unique: str) -> None:
    """Once its redriven run is granted and ended, the item is final again: 409."""
    job_id = f"rr-{unique}"
    dead_then_redriven(stack, job_id)
    [again] = stack.queue.lease(Q, 1)
    token = stack.store.grant(job_id, Q, "B", again.redrive_gen, lease_token=again.lease_token)
    stack.store.record_failure(job_id, token, "no", "failed")
    stack.queue.fail(Q, job_id, again.lease_token, "no", permanent=True)
    with pytest.raises(AlreadyFinished):
        gateway_api(stack).cancel(job_id)


# -- item 1 (ii): the redriven attempt lapses before any grant, on its last attempt -------------------


def test_redriven_attempt_that_lapses_before_its_grant_is_settled_dead(stack: Stack, unique: str) -> None:
    job_id = f"rl-{unique}"
    dead_then_redriven(stack, job_id)
    before = stack.store.get_job(job_id)
    [again] = stack.queue.lease(Q, 1)
    assert again.redrive_gen == 1
    time.sleep(0.01)
    lapse(stack)  # the worker died before its grant; the lease lapses on the (only) attempt
    assert where(stack.queue.client, Q, job_id) == {"dead"}

    m, seen = maintenance(stack)
    m.run(0.0)  # used to drop the ending as "moved on"

    record = stack.store.get_job(job_id)
    assert record.status is JobState.DEAD
    assert record.last_error == "lease expired on attempt 1"
    assert record.finished_at_ms is not None and record.finished_at_ms > (before.finished_at_ms or 0)
    item = raw_item(stack, job_id)
    assert item["run_gen"] == "1" and "expires_at" in item
    assert [(e.job, e.state, e.redrive_gen) for e in seen] == [(job_id, "dead", 1)]
    assert stack.store.relay_view([job_id])[0] == {job_id}  # a Redis loss no longer replays it
    # Still the dead job it is, and redrivable again: one redrive, one run.
    assert where(stack.queue.client, Q, job_id) == {"dead"}
    assert redrive_one(stack.queue, stack.store, Q, job_id, log=None) == 1
    [third] = stack.queue.lease(Q, 1)
    assert third.redrive_gen == 2
    assert stack.store.grant(job_id, Q, "C", 2, lease_token=third.lease_token) == before.token + 1


def test_settle_of_the_redriven_attempt_needs_its_own_generation(stack: Stack, unique: str) -> None:
    """An entry of the run before the redrive (generation 0) does not end the waiting job."""
    job_id = f"rs-{unique}"
    dead_then_redriven(stack, job_id)
    from sluice.core.models import SettleEntry

    old = SettleEntry(job_id=job_id, queue=Q, status=JobState.DEAD, ended_at_ms=1, redrive_gen=0)
    assert stack.store.settle_ended(old) is Settled.MOVED_ON
    assert stack.store.get_job(job_id).redrive_gen == 1
    assert "expires_at" not in raw_item(stack, job_id)


# -- item 8: the dead set holds only dead jobs ---------------------------------------------------------


def test_a_succeeded_job_that_lapsed_on_its_last_attempt_leaves_the_dead_set(stack: Stack,
                                                                               unique: str) -> None:
    job_id = f"ds-{unique}"
    job = leased(stack, job_id, max_attempts=1)
    token = stack.store.grant(job_id, Q, "A", job.redrive_gen, lease_token=job.lease_token)
    stack.store.write_result(job_id, token, {"ok": True})  # A crashes before its ack
    lapse(stack)
    assert where(stack.queue.client, Q, job_id) == {"dead"}

    m, _ = maintenance(stack)
    m.run(0.0)

    assert where(stack.queue.client, Q, job_id) == set()
    assert not stack.queue.client.exists(QueueKeys(Q).job(job_id))
    assert stack.queue.client.zcard(QueueKeys(Q).settle) == 0
    assert stack.queue.stats(Q).dead == 0 and stack.queue.stats(Q).used_bytes == 0
    assert stack.store.get_job(job_id).status is JobState.SUCCEEDED


def test_a_cancel_requested_failure_leaves_no_dead_job(stack: Stack, unique: str) -> None:
    job_id = f"dc-{unique}"
    job = leased(stack, job_id, max_attempts=5)
    token = stack.store.grant(job_id, Q, "A", job.redrive_gen, lease_token=job.lease_token)
    assert gateway_api(stack).cancel(job_id).status == "cancel_requested"
    # The worker did not see the request yet: it records a retry, and Redis turns it into the cancel.
    stack.store.record_failure(job_id, token, "boom", "queued")
    assert stack.queue.fail(Q, job_id, job.lease_token, "boom") == "cancelled"
    assert where(stack.queue.client, Q, job_id) == set()
    assert not stack.queue.client.exists(QueueKeys(Q).job(job_id))

    m, _ = maintenance(stack)
    m.run(0.0)

    assert stack.store.get_job(job_id).status is JobState.CANCELLED
    assert stack.queue.stats(Q).dead == 0 and stack.queue.stats(Q).used_bytes == 0
    assert stack.queue.client.zcard(QueueKeys(Q).settle) == 0


def test_a_cancel_of_a_job_redis_dead_lettered_meanwhile_leaves_no_dead_job(stack: Stack,
                                                                              unique: str) -> None:
    """The store said queued (a worker recorded a retry), Redis had dead-lettered it (attempts used
    up): the cancel wins in the store, and the dead job leaves Redis with it."""
    job_id = f"dq-{unique}"
    job = leased(stack, job_id, max_attempts=1)
    token = stack.store.grant(job_id, Q, "A", job.redrive_gen, lease_token=job.lease_token)
    stack.store.record_failure(job_id, token, "boom", "queued")
    assert stack.queue.fail(Q, job_id, job.lease_token, "boom") == "dead"
    assert gateway_api(stack).cancel(job_id).status == "cancelled"
    assert where(stack.queue.client, Q, job_id) == set()

    m, _ = maintenance(stack)
    m.run(0.0)

    assert stack.store.get_job(job_id).status is JobState.CANCELLED
    assert stack.queue.stats(Q).dead == 0 and stack.queue.stats(Q).used_bytes == 0
    assert stack.queue.client.zcard(QueueKeys(Q).settle) == 0


def test_a_failed_job_stays_in_the_dead_set(stack: Stack, unique: str) -> None:
    """The control: a job whose own worker wrote ``failed`` and died before telling Redis lapses on its
    last attempt; it is a dead job, and stays one (redrivable)."""
    job_id = f"df-{unique}"
    job = leased(stack, job_id, max_attempts=1)
    token = stack.store.grant(job_id, Q, "A", job.redrive_gen, lease_token=job.lease_token)
    stack.store.record_failure(job_id, token, "bad input", "failed")
    lapse(stack)
    m, _ = maintenance(stack)
    m.run(0.0)
    assert where(stack.queue.client, Q, job_id) == {"dead"}
    assert stack.store.get_job(job_id).status is JobState.FAILED
    assert redrive_one(stack.queue, stack.store, Q, job_id, log=None) == 1
