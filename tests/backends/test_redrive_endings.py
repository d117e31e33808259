"""Issue 29, items 1 and 8: every ending of a redriven job is recorded, and Redis's dead set holds
only dead jobs.

A redrive leaves the item ``failed``/``dead`` until the redriven job's grant. An ending before
that grant (a cancel while it waits; a lapse of the redriven attempt on its last attempt) used
to be refused by the store: the cancel answered 409 and the job ran anyway; the lapse left the
item with its old status, no ``expires_at``, no completion event, and a Redis loss replayed it.
A job whose item is final as succeeded or cancelled used to stay in the dead set for good.

Each test replays its timeline on a real redis-server and the moto server, with the real engine,
store, redrive path and relay maintenance; a worker's death is played by not making its next call.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from sluice.backends.redis.keys import QueueKeys
from sluice.core.bus import EventBus, JobEnded
from sluice.core.endings import Settled
from sluice.core.errors import AlreadyFinished, JobCancelled
from sluice.core.models import JobSpec, JobState, LeasedJob
from sluice.gateway.api import Api, Backends, IdMinting
from sluice.gateway.redrive import redrive_one
from sluice.relay.config import RelayConfig
from sluice.relay.dispatch import Dispatch
from sluice.relay.maintenance import Maintenance
from sluice.relay.queues import QueueStates
from sluice.relay.state import RelayReport
from sluice_dev.local.servers import Server
from tests.backends.test_engine_support import where
from tests.backends.worker_procs import Stack, make_stack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]
Q = "redriven"
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


def leased(stack: Stack, job_id: str, max_attempts: int = 1) -> LeasedJob:
    assert stack.queue.enqueue(JobSpec(job_id=job_id, queue=Q, payload={"n": 1}, max_attempts=max_attempts,
                                       lease_ms=LEASE_MS))
    [job] = stack.queue.lease(Q, 1)
    assert job.job_id == job_id
    return job


def lapse(stack: Stack) -> None:
    """The holder is dead: its lease runs out and reap reclaims it."""
    time.sleep(LEASE_MS * 2 / 1000)
    stack.queue.reap(Q)


def maintenance(stack: Stack) -> tuple[Maintenance, list[JobEnded]]:
    """The relay's maintenance over the real engine and store; the endings it emits."""
    bus, config, report = EventBus(), RelayConfig(), RelayReport()
    seen: list[JobEnded] = []
    bus.subscribe(seen.append, JobEnded)
    m = Maintenance(stack.queue, stack.store, config, QueueStates(stack.queue, config, events=bus),
                    Dispatch(None, config, report=report, events=bus), report=report, events=bus)
    return m, seen


def api(stack: Stack) -> Api:
    return Api(Backends(None, stack.store, stack.queue, EventBus()), IdMinting(b"k" * 32))  # type: ignore[arg-type]


def raw_item(stack: Stack, job_id: str) -> dict[str, object]:
    item = stack.store._db.get_item(TableName=stack.store.table, Key={"job_id": {"S": job_id}},
                                    ConsistentRead=True)["Item"]
    return {k: next(iter(v.values())) for k, v in item.items()}


def dead_then_redriven(stack: Stack, job_id: str) -> None:
    """A job that died on its last attempt (settled ``dead``), then redriven: it waits in ready with
    generation 1 while its item still says dead, as a redrive leaves it until the grant."""
    job = leased(stack, job_id)
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

    accepted = api(stack).cancel(job_id)  # was 409 "already dead", and the job then ran anyway

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

    assert api(stack).cancel(job_id).status == "cancelled"

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
        api(stack).cancel(job_id)


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
    job = leased(stack, job_id)
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
    assert api(stack).cancel(job_id).status == "cancel_requested"
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
    assert api(stack).cancel(job_id).status == "cancelled"
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
    job = leased(stack, job_id)
    token = stack.store.grant(job_id, Q, "A", job.redrive_gen, lease_token=job.lease_token)
    stack.store.record_failure(job_id, token, "bad input", "failed")
    lapse(stack)
    m, _ = maintenance(stack)
    m.run(0.0)
    assert where(stack.queue.client, Q, job_id) == {"dead"}
    assert stack.store.get_job(job_id).status is JobState.FAILED
    assert redrive_one(stack.queue, stack.store, Q, job_id, log=None) == 1
