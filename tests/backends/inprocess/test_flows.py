"""Jobs that start jobs: derived child ids, the gateway's family entry, the countdown, continuations.

The jobs table is in-process moto (no sockets); the log and queue are sluice_dev's fakes. The
worker tests run real ``Worker`` drains whose handlers reach the gateway's entry in process, as
the Lambda invoke would (``LambdaFamilyGateway`` over ``Gateway.__call__``), and play the relay's part by
moving appended records into the fake queue.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

import sluice
from sluice.backends.aws.family_gateway import LambdaFamilyGateway
from sluice.backends.dynamodb import tables
from sluice.backends.dynamodb.jobs import DynamoJobStore
from sluice.core import ids
from sluice.core.bus import EventBus, JobEnded
from sluice.core.errors import (
    FamilyConflict,
    InvalidInput,
    LeaseLost,
    ReservedQueue,
    SluiceError,
    TooManyChildren,
)
from sluice.core.families import (
    MAX_CHILDREN,
    ChildRequest,
    Countdown,
    FamilyRequest,
    ThenRequest,
    family_slots,
)
from sluice.core.models import JOB_ID_RE, JobState
from sluice.entry.gateway import Gateway
from sluice.gateway.api import Api, Backends, IdMinting
from sluice.worker.runtime.options import WorkerOptions
from sluice.worker.runtime.telemetry import MemoryMetrics, Telemetry
from sluice_dev.fakes import FakeLog, FakeQueue
from tests.unit.test_gateway_fakes import KEY

PARENT_MS = 1_700_000_000_000


@pytest.fixture(scope="module")
def db() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("dynamodb", region_name="us-east-1")


@pytest.fixture
def store(db: Any) -> Iterator[DynamoJobStore]:
    name = f"jobs-{uuid.uuid4().hex[:8]}"
    tables.create_jobs_table(db, name)
    yield DynamoJobStore(db, name)
    db.delete_table(TableName=name)


class Rig:
    def __init__(self, store: DynamoJobStore) -> None:
        self.store, self.log, self.queue = store, FakeLog(), FakeQueue()
        self.api = Api(Backends(self.log, store, self.queue, EventBus(), families=store.families),
                       IdMinting(KEY), clock=lambda: PARENT_MS + 5_000)
        self.gateway = Gateway(self.api)
        self.keeper = LambdaFamilyGateway(lambda event: self.gateway(event, None))
        self.parent = ids.mint(PARENT_MS, "fanout", KEY)
        self.token = store.grant(self.parent, "fanout", "w1")

    def request(self, n: int = 3, then: bool = False, **kw: Any) -> FamilyRequest:
        jobs = [ChildRequest(queue="work", payload=i, key=f"k{i}") for i in range(n)]
        return FamilyRequest(parent_id=self.parent, token=kw.pop("token", self.token), jobs=jobs,
                             then=ThenRequest(queue="report", payload={"n": n}) if then else None, **kw)

    def appended(self) -> list[str]:
        return [s.job_id for s in self.log.records]


@pytest.fixture
def rig(store: DynamoJobStore) -> Rig:
    return Rig(store)


# -- derived ids ---------------------------------------------------------------------------------


def test_child_ids_are_deterministic_well_formed_and_verify() -> None:
    parent = ids.mint(PARENT_MS, "fanout", KEY)
    child = ids.derive(parent, "work", "resize-0", KEY)
    assert child == ids.derive(parent, "work", "resize-0", KEY)
    assert JOB_ID_RE.fullmatch(child) and child.split(".")[1] == "work"
    assert ids.verify(child, KEY) == ("work", PARENT_MS)  # the parent's time: same retention horizon
    others = {ids.derive(parent, "work", "resize-1", KEY), ids.derive(ids.mint(PARENT_MS, "fanout", KEY),
                                                                      "work", "resize-0", KEY),
              ids.derive(parent, "work", ids.CONTINUATION_PREFIX + "resize-0", KEY)}
    assert child not in others and len(others) == 3


@pytest.mark.parametrize("key", ["", "x" * 65, "has space", "tab\t", "é", None, 7])
def test_a_child_key_empty_too_long_or_not_printable_ascii_is_refused(key: Any) -> None:
    with pytest.raises(ValueError, match="invalid child key"):
        ids.check_child_key(key)
    assert ids.check_child_key("x" * 64)


# -- the gateway's family entry ------------------------------------------------------------------


def test_children_are_appended_with_derived_ids_and_recorded_on_both_sides(rig: Rig) -> None:
    accepted = rig.api.enqueue_children(rig.request(3))
    assert accepted.job_ids == [ids.derive_keyless(rig.parent, "work", f"k{i}") for i in range(3)]  # issue 29
    assert rig.appended() == sorted(accepted.job_ids)  # in slot order (worker.countdown's rounds)
    payloads = {s.job_id: s.payload for s in rig.log.records}
    assert payloads == dict(zip(accepted.job_ids, [0, 1, 2], strict=True))
    view = rig.api.status(rig.parent)
    assert view.children == sorted(accepted.job_ids) and view.parent_id is None
    child = rig.api.status(accepted.job_ids[0])
    assert (child.status, child.parent_id, child.queue) == (JobState.ACCEPTED, rig.parent, "work")


def test_a_rerun_parent_gets_the_same_children_and_nothing_new(rig: Rig) -> None:
    first = rig.api.enqueue_children(rig.request(3))
    rig.store.write_result(first.job_ids[0], rig.store.grant(first.job_ids[0], "work", "w2"), "done")
    token = rig.store.grant(rig.parent, "fanout", "w3")  # the parent runs again (a newer token)
    again = rig.api.enqueue_children(rig.request(3, token=token))
    assert again.job_ids == first.job_ids
    # the finished child is not appended again
    assert rig.appended() == sorted(first.job_ids) + sorted(first.job_ids[1:])
    assert rig.store.get_job(first.job_ids[0]).status is JobState.SUCCEEDED  # left as it was
    assert rig.api.status(rig.parent).children == sorted(first.job_ids)


def test_a_schedule_firings_job_may_start_children_while_it_holds_its_lease(rig: Rig) -> None:
    """Issue 27: a firing's id is keyless (no key verifies it), yet its job is this deployment's: as
    for any parent, its lease under the request's token is what lets it start children."""
    from sluice.core import schedules

    firing = schedules.firing_id("nightly", "fanout", PARENT_MS)
    assert ids.verify(firing, KEY) is None
    token = rig.store.grant(firing, "fanout", "w1")
    request = rig.request(2).model_copy(update={"parent_id": firing, "token": token})
    accepted = rig.api.enqueue_children(request)
    assert rig.appended() == rig.api.status(firing).children == sorted(accepted.job_ids)
    assert all(ids.is_keyless(child) for child in accepted.job_ids)  # as their parent's: no key in them
    # the parent runs again after a key rotation: the same children, nothing new appended
    rotated = Api(Backends(rig.log, rig.store, rig.queue, EventBus(), families=rig.store.families),
                  IdMinting(b"the-key-after-the-rotation-0123", (KEY,)), clock=lambda: PARENT_MS + 9_000)
    token = rig.store.grant(firing, "fanout", "w2")
    again = rotated.enqueue_children(rig.request(2).model_copy(update={"parent_id": firing, "token": token}))
    assert again.job_ids == accepted.job_ids
    assert rig.appended() == sorted(accepted.job_ids) * 2  # again (not final yet); the relay keeps one
    made_up = schedules.firing_id("nightly", "fanout", PARENT_MS + 60_000)  # computable, never leased
    with pytest.raises(LeaseLost):
        rig.api.enqueue_children(rig.request(2).model_copy(update={"parent_id": made_up, "token": 1}))
    assert rig.appended() == sorted(accepted.job_ids) * 2


# -- key rotation (issue 29, item 7) ---------------------------------------------------------------

K2, K3 = b"the-second-job-id-key-0123456789", b"the-third-job-id-key-01234567890"


def rotated(rig: Rig, key: bytes, previous: tuple[bytes, ...], at_ms: int) -> Api:
    """The gateway after a rotation: ``key`` current, ``previous`` still verifying (one of them)."""
    return Api(Backends(rig.log, rig.store, rig.queue, EventBus(), families=rig.store.families),
               IdMinting(key, previous), clock=lambda: at_ms)


def run_generation(rig: Rig, api: Api, parent: str, n: int = 2) -> tuple[list[str], str]:
    """``parent`` (leased now) starts ``n`` children and a continuation; every child succeeds and the
    countdown releases the continuation: its children and its continuation."""
    token = rig.store.grant(parent, ids.queue_in_id(parent), "w")
    jobs = [ChildRequest(queue="work", payload=i, key=f"k{i}") for i in range(n)]
    family = api.enqueue_children(FamilyRequest(parent_id=parent, token=token, jobs=jobs,
                                                then=ThenRequest(queue="report", payload={"n": n})))
    countdown = Countdown(rig.store.families, api.release_continuation)
    for child in family.job_ids:
        rig.store.write_result(child, rig.store.grant(child, "work", "w"), "done")
        countdown.on_ended(ended(child))
    assert family.continuation is not None and rig.appended()[-1] == family.continuation
    rig.store.write_result(parent, token, "done")
    return family.job_ids, family.continuation


def test_a_workflow_lives_through_two_key_rotations_and_each_generation_starts_its_children(rig: Rig) -> None:
    """Issue 29: children and continuations were derived with the root's key for every generation,
    so after two rotations (the root's key retired) a later generation could not start children:
    its id no longer verified. Now no key goes into a child's id; the lease is what proves a parent."""
    from sluice.core import seal
    from sluice.relay.intake import check_record
    from sluice.relay.ports import SourceRecord
    from sluice.relay.records import decode_sealed

    day = 86_400_000
    epochs = [(rig.api, ids.Verifier(KEY)),
              (rotated(rig, K2, (KEY,), PARENT_MS + 31 * day), ids.Verifier(K2, [KEY])),
              (rotated(rig, K3, (K2,), PARENT_MS + 61 * day), ids.Verifier(K3, [K2]))]
    parent, seen = rig.parent, [rig.parent]
    for api, relay_keys in epochs:
        children, continuation = run_generation(rig, api, parent)
        assert all(ids.is_keyless(j) for j in [*children, continuation])
        for spec in rig.log.records[-3:]:  # what the relay of this epoch reads: pushed, not refused
            assert seal.verify_spec(spec, [api.job_id_key])
            found = decode_sealed(SourceRecord(0, 0, None, spec.model_dump_json().encode()))
            assert not isinstance(found, str)
            assert check_record(*found, relay_keys, api.clock()) is None, spec.job_id
        seen += [*children, continuation]
        parent = continuation
    assert ids.verify(seen[0], K3, [K2]) is None  # the root's key is retired
    assert len(set(seen)) == len(seen) == 10
    assert rig.api.status(seen[-1]).parent_id == seen[-4]  # the last continuation names its parent


def test_a_generation_rerun_across_a_rotation_gets_the_same_children(rig: Rig) -> None:
    first = rig.api.enqueue_children(rig.request(3, then=True))
    token = rig.store.grant(rig.parent, "fanout", "w2")  # re-run after two rotations: its key is gone
    later = rotated(rig, K3, (K2,), PARENT_MS + 61 * 86_400_000)
    again = later.enqueue_children(rig.request(3, then=True, token=token))
    assert (again.job_ids, again.continuation) == (first.job_ids, first.continuation)
    assert rig.api.status(rig.parent).children == sorted(first.job_ids)  # nothing new recorded


def test_a_job_redriven_two_rotations_after_its_key_retired_may_start_children(rig: Rig) -> None:
    """A redrive of a job that old: its record is sealed anew with the current key and pushed; its
    run then starts children, as its lease proves it, although its own id no longer verifies."""
    from sluice.core.models import JobSpec
    from sluice.relay.intake import check_record
    from sluice.relay.ports import SourceRecord
    from sluice.relay.records import decode_sealed

    later = rotated(rig, K3, (K2,), PARENT_MS + 61 * 86_400_000)
    assert later.verifier.verify(rig.parent) is None
    old = JobSpec(job_id=rig.parent, queue="fanout", payload={"n": 2}, enqueued_at_ms=PARENT_MS)
    redriven = later.pipeline.reseal_now(old)  # what the redrive appends (sluice.gateway.redrive)
    found = decode_sealed(SourceRecord(0, 0, None, redriven.model_dump_json().encode()))
    assert not isinstance(found, str)
    assert check_record(*found, ids.Verifier(K3, [K2]), later.clock()) is None  # the relay pushes it
    accepted = later.enqueue_children(rig.request(2))
    assert rig.appended() == sorted(accepted.job_ids)
    assert rig.api.status(rig.parent).children == sorted(accepted.job_ids)


def test_a_parent_that_started_its_children_before_issue_29_gets_those_again_on_a_rerun(rig: Rig) -> None:
    """Upgrade: children derived with the parent's key (the code before issue 29) are found by the
    re-run (a probe of the first child and the continuation) and kept: no second family."""
    from sluice.core.families import NewChild

    keyed = [ids.derive(rig.parent, "work", f"k{i}", KEY) for i in range(3)]
    then = ids.derive(rig.parent, "report", ids.CONTINUATION_PREFIX + "then", KEY)
    families = rig.store.families  # as the old gateway wrote them
    families.adopt(rig.parent, rig.token, keyed, then, MAX_CHILDREN)
    families.record_children(rig.parent, [NewChild(j, "work", PARENT_MS, i) for i, j in enumerate(keyed)],
                             then)
    spec = rig.api.pipeline.spec("report", ThenRequest(queue="report", payload={"n": 3}), PARENT_MS, None,
                                 job_id=then)
    families.start_family(then, "report", rig.parent, keyed, spec.model_dump_json(), PARENT_MS)
    rig.store.write_result(keyed[0], rig.store.grant(keyed[0], "work", "w"), "done")
    token = rig.store.grant(rig.parent, "fanout", "w2")
    again = rig.api.enqueue_children(rig.request(3, then=True, token=token))
    assert (again.job_ids, again.continuation) == (keyed, then)
    assert rig.api.status(rig.parent).children == sorted(keyed)
    assert rig.appended() == sorted(keyed[1:])  # the finished one is counted, not appended again
    assert rig.api.status(then).remaining == 2


def test_only_the_current_holder_of_the_parent_may_start_children(rig: Rig) -> None:
    for token in (rig.token + 1, rig.token - 1 or 99):
        with pytest.raises(LeaseLost):
            rig.api.enqueue_children(rig.request(2, token=token))
    stranger = ids.mint(PARENT_MS, "fanout", b"another-key-of-32-bytes-000000000")
    with pytest.raises(SluiceError):  # not an id this deployment issued
        rig.api.enqueue_children(rig.request(2).model_copy(update={"parent_id": stranger}))
    rig.store.write_result(rig.parent, rig.token, 1)  # no longer leased
    with pytest.raises(LeaseLost):
        rig.api.enqueue_children(rig.request(2))
    assert rig.appended() == [] and rig.api.status(rig.parent).children == []


@pytest.mark.parametrize(("change", "error", "match"), [
    ({"key": ""}, InvalidInput, "invalid child key"),
    ({"key": "k" * 65}, InvalidInput, "invalid child key"),
    ({"key": "k1"}, InvalidInput, "used twice"),
    ({"queue": "sluice-relay"}, ReservedQueue, "reserved"),
    ({"payload": "x" * 300_000}, InvalidInput, "payload is"),
])
def test_a_bad_child_refuses_the_whole_request_and_writes_nothing(rig: Rig, change: dict[str, Any],
                                                                  error: type[Exception], match: str) -> None:
    request = rig.request(3, then=True)
    jobs = [*request.jobs[:2], request.jobs[2].model_copy(update=change)]
    with pytest.raises(error, match=match):
        rig.api.enqueue_children(request.model_copy(update={"jobs": jobs}))
    assert rig.appended() == []
    assert rig.api.status(rig.parent).children == []
    assert rig.store.final_job_ids([]) == set()


def test_then_without_children_and_an_empty_request_are_refused(rig: Rig) -> None:
    with pytest.raises(InvalidInput, match="then= needs at least one child"):
        rig.api.enqueue_children(rig.request(0, then=True))
    with pytest.raises(InvalidInput, match="no children"):
        rig.api.enqueue_children(rig.request(0))
    assert rig.appended() == []


def test_ten_thousand_children_are_refused_clearly_and_the_limit_holds_across_requests(rig: Rig) -> None:
    with pytest.raises(TooManyChildren, match=f"at most {MAX_CHILDREN}"):
        rig.api.enqueue_children(rig.request(10_000, then=True))
    assert rig.appended() == [] and rig.api.status(rig.parent).children == []
    rig.api.enqueue_children(rig.request(600))
    more = [ChildRequest(queue="work", payload=i, key=f"more{i}") for i in range(600)]
    with pytest.raises(TooManyChildren, match="would have 1200 children; the limit is 1000"):
        rig.api.enqueue_children(FamilyRequest(parent_id=rig.parent, token=rig.token, jobs=more))
    assert len(rig.appended()) == 600 and len(rig.api.status(rig.parent).children) == 600
    rig.api.enqueue_children(rig.request(600))  # the same 600 again (a re-run) still fits


def test_the_internal_entry_round_trips_errors_as_the_same_exceptions(rig: Rig) -> None:
    with pytest.raises(TooManyChildren):
        rig.keeper.enqueue_children(rig.request(1001))
    with pytest.raises(LeaseLost):
        rig.keeper.enqueue_children(rig.request(1, token=rig.token + 5))
    answer = rig.gateway({"sluice_internal": "enqueue_children", "parent_id": rig.parent}, None)
    assert answer["statusCode"] == 400 and answer["error"]["code"] == "INVALID_INPUT"
    assert sorted(rig.keeper.enqueue_children(rig.request(2)).job_ids) == rig.appended()


def test_an_api_gateway_event_never_reaches_the_internal_entry(rig: Rig) -> None:
    event = {"httpMethod": "POST", "path": "/v1/queues/q/jobs", "sluice_internal": "release",
             "headers": {"content-type": "application/json"}, "body": '{"payload": 1}'}
    answer = rig.gateway(event, None)
    assert answer["statusCode"] == 202 and "error" not in answer  # an ordinary enqueue


# -- continuations ---------------------------------------------------------------------------------


def ended(job: str, state: str = "succeeded", source: str = "worker") -> JobEnded:
    return JobEnded(job=job, queue="work", state=state, source=source)


def test_the_continuation_is_released_once_after_every_child_ended_and_counts_each_once(rig: Rig) -> None:
    family = rig.api.enqueue_children(rig.request(3, then=True))
    then = family.continuation
    assert then == ids.derive_keyless(rig.parent, "report", ids.CONTINUATION_PREFIX + "then")
    assert rig.appended() == sorted(family.job_ids)  # the continuation waits in the jobs table
    bus = EventBus()
    Countdown(rig.store.families, rig.api.release_continuation).subscribe(bus)
    a, b, c = family.job_ids
    for event in (ended(a), ended(a, source="settle"), ended(b, "failed")):
        bus.emit(event)
    assert rig.appended() == sorted(family.job_ids)
    assert rig.api.status(then).remaining == 1 and rig.api.status(then).waits_for == sorted(family.job_ids)
    bus.emit(ended(c, "dead", "settle"))
    assert rig.appended() == [*sorted(family.job_ids), then]
    [spec] = [s for s in rig.log.records if s.job_id == then]
    assert (spec.queue, spec.payload) == ("report", {"n": 3})
    bus.emit(ended(c, "dead"))  # ended again (a redrive, another emitter): nothing more
    bus.emit(ended(b, "succeeded"))
    assert rig.api.release_continuation(then) is False
    assert rig.appended().count(then) == 1
    assert rig.api.status(rig.parent).continuations == [then]


def test_a_rerun_parent_does_not_reset_the_count(rig: Rig) -> None:
    family = rig.api.enqueue_children(rig.request(3, then=True))
    countdown = Countdown(rig.store.families, rig.api.release_continuation)
    countdown.on_ended(ended(family.job_ids[0]))
    token = rig.store.grant(rig.parent, "fanout", "w9")
    rig.api.enqueue_children(rig.request(3, then=True, token=token))
    assert rig.api.status(family.continuation or "").remaining == 2


def test_a_rerun_with_other_children_for_the_same_continuation_is_refused(rig: Rig) -> None:
    rig.api.enqueue_children(rig.request(3, then=True))
    before = list(rig.appended())
    with pytest.raises(FamilyConflict):
        rig.api.enqueue_children(rig.request(4, then=True))
    assert rig.appended() == before


def test_a_child_key_already_used_in_another_family_is_refused_before_any_write(rig: Rig) -> None:
    rig.api.enqueue_children(rig.request(2, then=True))
    before = list(rig.appended())
    other = rig.request(2).model_copy(update={"then": ThenRequest(queue="report", payload=0, key="other")})
    with pytest.raises(FamilyConflict, match="already belongs to"):
        rig.api.enqueue_children(other)
    assert rig.appended() == before and len(rig.api.status(rig.parent).continuations) == 1


def test_the_continuations_item_stays_small_however_many_children_count_down(rig: Rig) -> None:
    family = rig.api.enqueue_children(rig.request(300, then=True))
    countdown = Countdown(rig.store.families, rig.api.release_continuation)
    for child in family.job_ids:
        countdown.on_ended(ended(child))
    item = rig.store.items.read(family.continuation or "")
    assert item is not None and len(str(item)) < 6_000  # 300 slots, not 300 ids of 100 bytes (30 KB)
    assert rig.appended().count(family.continuation) == 1


def test_a_family_with_a_cancelled_child_still_runs_its_continuation(rig: Rig) -> None:
    family = rig.api.enqueue_children(rig.request(2, then=True))
    rig.api.cancel(family.job_ids[0])  # the gateway's cancel emits JobEnded; the api counts it
    assert rig.api.status(family.job_ids[0]).status is JobState.CANCELLED
    Countdown(rig.store.families, rig.api.release_continuation).on_ended(ended(family.job_ids[1]))
    assert rig.appended()[-1] == family.continuation


def test_a_rerun_after_every_child_ended_releases_the_continuation(rig: Rig) -> None:
    """The children's JobEnded were lost (say the family was started, then the append failed and the
    children were cancelled meanwhile): a re-run counts the children it finds final."""
    family = rig.api.enqueue_children(rig.request(2, then=True))
    for child in family.job_ids:
        rig.store.write_result(child, rig.store.grant(child, "work", "w"), 1)
    token = rig.store.grant(rig.parent, "fanout", "w2")
    rig.api.enqueue_children(rig.request(2, then=True, token=token))
    assert rig.appended() == [*sorted(family.job_ids), family.continuation]


# -- end to end through a worker ----------------------------------------------------------------------


def relay(rig: Rig, queue: FakeQueue, done: set[str]) -> int:
    """Play the relay: appended records not seen yet go into Redis (duplicates are skipped there)."""
    moved = 0
    for spec in rig.log.records:
        if spec.job_id not in done and spec.job_id not in rig.store.final_job_ids([spec.job_id]):
            moved += queue.enqueue(spec)
        done.add(spec.job_id)
    return moved


def test_a_parent_fans_out_and_its_continuation_sums_the_childrens_results(rig: Rig) -> None:
    app = sluice.Worker()
    runs: dict[str, int] = {}

    @app.handler("fanout")
    def fanout(job: sluice.Job, ctx: sluice.JobContext) -> Any:
        runs["fanout"] = runs.get("fanout", 0) + 1
        family = ctx.enqueue_many([("work", i, f"n{i}") for i in range(5)], then=("report", {"of": 5}))
        return {"children": len(family.job_ids)}

    @app.handler("work")
    def work(job: sluice.Job, ctx: sluice.JobContext) -> Any:
        if job.payload == 3:
            raise sluice.Fail("three is unlucky")
        return job.payload * 10

    @app.handler("report")
    def report(job: sluice.Job, ctx: sluice.JobContext) -> Any:
        kids = ctx.children()
        return {"sum": sum(k.result or 0 for k in kids), "states": sorted(str(k.status) for k in kids)}

    queue = FakeQueue()
    parent = rig.parent = ids.mint(PARENT_MS, "fanout", KEY)
    queue.add("fanout", parent, None)
    worker = app.bind(queue=queue, store=rig.store, families=rig.store.families, family_gateway=rig.keeper,
                      options=WorkerOptions(),
                      telemetry=Telemetry(metrics=MemoryMetrics()), worker_id="w")
    seen: set[str] = set()
    for _ in range(4):
        worker.drain(["fanout", "work", "report"], 20)
        relay(rig, queue, seen)
    assert runs == {"fanout": 1}
    [then] = rig.api.status(parent).continuations
    record = rig.store.get_job(then)
    assert record.status is JobState.SUCCEEDED
    assert record.result == {"sum": 0 + 10 + 20 + 40, "states": ["failed"] + ["succeeded"] * 4}
    assert rig.appended().count(then) == 1


def test_enqueue_without_a_gateway_is_a_clear_error(rig: Rig) -> None:
    app = sluice.Worker()
    errors: list[str] = []

    @app.handler("fanout")
    def fanout(job: sluice.Job, ctx: sluice.JobContext) -> Any:
        try:
            ctx.enqueue("work", 1, key="a")
        except SluiceError as exc:
            errors.append(str(exc))
        return None

    queue = FakeQueue()
    queue.add("fanout", ids.mint(PARENT_MS, "fanout", KEY))
    app.bind(queue=queue, store=rig.store, telemetry=Telemetry(metrics=MemoryMetrics()),
             worker_id="w").drain(["fanout"], 1)
    assert errors and "no internal function" in errors[0]


def test_sluice_status_shows_parent_children_and_continuation(rig: Rig,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    from sluice_dev.cli.jobs import _echo_job

    family = rig.api.enqueue_children(rig.request(7, then=True))
    _echo_job(rig.api.status(rig.parent), as_json=False)
    out = capsys.readouterr().out
    assert f"children: 7: {' '.join(sorted(family.job_ids)[:5])} (+2 more)" in out
    assert f"continuation: {family.continuation}" in out
    _echo_job(rig.api.status(family.job_ids[0]), as_json=False)
    out = capsys.readouterr().out
    assert f"parent: {rig.parent}" in out and f"counts down: {family.continuation}" in out
    _echo_job(rig.api.status(family.continuation or ""), as_json=False)
    out = capsys.readouterr().out
    assert f"parent: {rig.parent}" in out and "waits for: 7 children, 7 not ended yet" in out


def test_the_worker_learns_a_jobs_continuation_from_its_grant_not_from_another_read(rig: Rig) -> None:
    family = rig.api.enqueue_children(rig.request(2, then=True))
    child, other = family.job_ids
    plain = ids.mint(PARENT_MS, "work", KEY)
    rig.store.grant(child, "work", "w")
    rig.store.grant(plain, "work", "w")
    reads: list[str] = []
    real = rig.store._db.get_item

    def counted(**kw: Any) -> Any:
        reads.append(kw["Key"]["job_id"]["S"])
        return real(**kw)

    rig.store._db.get_item = counted  # type: ignore[method-assign]
    # its slot: its rank among the family's child ids (``family_slots``), not its place in the request
    slot = family_slots(family.job_ids)[child]
    assert rig.store.families.continuation_of(child) == (family.continuation, slot)
    assert rig.store.families.continuation_of(plain) is None
    assert reads == []
    assert rig.store.families.continuation_of(other) == (family.continuation, 1 - slot)  # never granted: read
    assert rig.store.families.continuation_of(child) == (family.continuation, slot)  # asked again: read
    assert reads == [other, child]


def test_a_failed_release_is_retried_and_a_later_ending_or_a_rerun_releases_it(rig: Rig) -> None:
    from sluice.core.errors import BackendUnavailable

    family = rig.api.enqueue_children(rig.request(2, then=True))
    calls: list[str] = []

    def flaky(then: str) -> None:
        calls.append(then)
        if len(calls) <= 4:  # the first countdown's three tries, and one more
            raise BackendUnavailable("the gateway function is unavailable")
        rig.api.release_continuation(then)

    countdown = Countdown(rig.store.families, flaky, sleep=lambda _s: None)
    a, b = family.job_ids
    countdown.on_ended(ended(a))
    countdown.on_ended(ended(b))  # the last child: three tries, all refused
    assert len(calls) == 3 and family.continuation not in rig.appended()
    assert rig.store.families.unreleased(family.continuation or "")
    countdown.on_ended(ended(b, source="settle"))  # the same child ends again: released now
    assert calls == [family.continuation] * 5 and rig.appended().count(family.continuation) == 1
    assert not rig.store.families.unreleased(family.continuation or "")


def test_a_rerun_parent_releases_a_continuation_whose_release_was_lost(rig: Rig) -> None:
    family = rig.api.enqueue_children(rig.request(2, then=True))
    for child in family.job_ids:
        rig.store.write_result(child, rig.store.grant(child, "work", "w"), 1)
        Countdown(rig.store.families, lambda _then: None).on_ended(ended(child))  # counted, release lost
    assert rig.store.families.unreleased(family.continuation or "")
    token = rig.store.grant(rig.parent, "fanout", "w2")
    rig.api.enqueue_children(rig.request(2, then=True, token=token))
    assert rig.appended().count(family.continuation) == 1


def test_a_child_whose_first_run_died_before_its_countdown_is_counted_by_its_rerun(rig: Rig) -> None:
    from sluice.core.bus import ResultWritten

    family = rig.api.enqueue_children(rig.request(1, then=True))
    bus = EventBus()
    Countdown(rig.store.families, rig.api.release_continuation).subscribe(bus)
    bus.emit(ResultWritten(outcome="written", t0=0.0, job=family.job_ids[0], token=1))  # JobEnded: lost
    assert family.continuation not in rig.appended()
    bus.emit(ResultWritten(outcome="already_written", t0=0.0, job=family.job_ids[0], token=2))  # re-run
    assert rig.appended().count(family.continuation) == 1


def test_too_many_or_too_large_children_are_refused_in_the_worker_before_anything_is_sent(rig: Rig) -> None:
    app = sluice.Worker()
    errors: list[str] = []
    sent: list[Any] = []

    @app.handler("fanout")
    def fanout(job: sluice.Job, ctx: sluice.JobContext) -> Any:
        for jobs in ([("work", i, f"k{i}") for i in range(1001)],
                     [("work", "x" * 200_000, f"big{i}") for i in range(31)],
                     [("work", 1, "")]):
            try:
                ctx.enqueue_many(jobs)
            except SluiceError as exc:
                errors.append(f"{exc.code}: {exc}")
        return None

    class Spy:
        def enqueue_children(self, request: Any) -> Any:
            sent.append(request)
            return rig.keeper.enqueue_children(request)

        def release(self, continuation: str) -> None:
            rig.keeper.release(continuation)

    queue = FakeQueue()
    queue.add("fanout", ids.mint(PARENT_MS, "fanout", KEY))
    app.bind(queue=queue, store=rig.store, families=rig.store.families, family_gateway=Spy(),
             telemetry=Telemetry(metrics=MemoryMetrics()), worker_id="w").drain(["fanout"], 1)
    assert [e.split(":")[0] for e in errors] == ["TOO_MANY_CHILDREN", "PAYLOAD_TOO_LARGE", "INVALID_INPUT"]
    assert "split them over several enqueue_many calls" in errors[1]
    assert "invalid child key" in errors[2]  # checked by the gateway
    assert len(sent) == 1 and rig.appended() == []


def test_a_continuation_released_by_anyone_before_its_children_ended_appends_nothing(rig: Rig) -> None:
    """The release entry takes only a continuation's id (the relay's call). A caller with the
    invoke permission releasing another family's continuation early, or an id that names no
    continuation, gets an error and nothing reaches Kafka."""
    family = rig.api.enqueue_children(rig.request(2, then=True))
    then = family.continuation or ""
    before = rig.appended()
    with pytest.raises(InvalidInput, match="still waits for 2 children"):
        rig.api.release_continuation(then)
    answer = rig.gateway({"sluice_internal": "release", "continuation": then}, None)
    assert answer["statusCode"] == 400 and answer["error"]["code"] == "INVALID_INPUT"
    stranger = ids.mint(PARENT_MS, "report", KEY)  # verifies, but no family has it as continuation
    answer = rig.gateway({"sluice_internal": "release", "continuation": stranger}, None)
    assert (answer["statusCode"], answer["error"]["code"]) == (404, "NOT_FOUND"), answer
    for bad in ("../x", "", "x" * 200):
        answer = rig.gateway({"sluice_internal": "release", "continuation": bad}, None)
        assert answer["statusCode"] == 400, (bad, answer)
    assert rig.appended() == before and then not in before


def test_a_childs_route_and_schema_refusals_reach_the_handler_as_their_own_exceptions() -> None:
    """A child on an unrouted queue, or with a payload its typed queue refuses: the gateway answers
    NO_ROUTE / PAYLOAD_INVALID, which reached the handler as a bare SluiceError, so it could not
    tell them from any other failure (walk-through: `except PayloadInvalid` never matched)."""
    from sluice.core.errors import NoRoute, PayloadInvalid

    for code, cls in (("NO_ROUTE", NoRoute), ("PAYLOAD_INVALID", PayloadInvalid)):
        answer = {"statusCode": 400, "error": {"code": code, "message": "no"}}
        keeper = LambdaFamilyGateway(lambda event, answer=answer: answer)
        with pytest.raises(cls):
            keeper.release("x")


def test_the_chaos_harness_names_a_family_as_the_gateway_derives_it(rig: Rig) -> None:
    """The chaos workload writes a family's ids in its history before it asks the gateway, and stops
    the run if the gateway answers others (``sluice_dev.chaos.families.start``): since issue 29 both
    derive them keyless."""
    from types import SimpleNamespace

    from sluice_dev.chaos import families as chaos

    emitted: list[tuple[str, dict[str, Any]]] = []

    def enqueue_many(jobs: list[dict[str, Any]], then: dict[str, Any]) -> Any:
        return rig.api.enqueue_children(FamilyRequest(
            parent_id=rig.parent, token=rig.token, jobs=[ChildRequest(**j) for j in jobs],
            then=ThenRequest(**then)))

    job = SimpleNamespace(job_id=rig.parent, payload={"i": 19, "family": 3})
    chaos.start(job, SimpleNamespace(enqueue_many=enqueue_many), "fanout", lambda: KEY,
                lambda kind, **fields: emitted.append((kind, fields)))
    assert [kind for kind, _ in emitted] == ["family", "family_accepted"]
    assert rig.appended() == sorted(emitted[0][1]["children"])


def test_the_relays_status_write_leaves_a_familys_jobs_and_those_past_accepted(rig: Rig) -> None:
    """Issue 30: a child's ``queued`` cost one more write per child. The relay's read (``relay_view``)
    finds the gateway's item naming the child's parent, and ``mark_queued`` then leaves it
    ``accepted`` until its grant; an item already past ``accepted`` (whose write the condition
    would refuse, billed all the same) is left too; a plain job's is written as before."""
    family = rig.api.enqueue_children(rig.request(2, then=True))
    child, other = family.job_ids
    rig.store.grant(other, "work", "w1")  # leased: mark_queued's condition would refuse it
    plain = ids.mint(PARENT_MS, "work", KEY)
    writes: list[str] = []
    rig.store._db.meta.events.register("before-parameter-build.dynamodb.UpdateItem",
                                       lambda params, **_: writes.append(params["Key"]["job_id"]["S"]))
    jobs = [child, other, family.continuation or "", plain]
    final, _ = rig.store.relay_view(jobs)
    assert not final
    rig.store.mark_queued([(j, j.split(".")[1], PARENT_MS) for j in jobs])
    assert writes == [plain]
    assert rig.store.get_job(plain).status == "queued" and rig.store.get_job(child).status == "accepted"
    token = rig.store.grant(child, "work", "w2")  # its grant moves it on as ever
    assert token >= 1 and rig.store.get_job(child).status == "leased"

    writes.clear()  # once taken, forgotten: a status write without the read is made as before
    rig.store.mark_queued([(child, "work", PARENT_MS)])
    assert writes == [child]
