"""Issue 29, items 2 and 5, on the moto server: a family's children whatever order a re-run lists
them in, children whose append failed and whose parent then ended some other way, and the parent
named by each child's completion event (docs/flows.md, Failure).

Each test writes through the real store (``DynamoJobStore``) and the gateway's use case, and reads
moto's real stream as ``sluice dev``'s poller does (both consumers on each batch).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from sluice.backends.dynamodb.jobs import DynamoJobStore
from sluice.core import ids
from sluice.core.bus import EventBus, JobEnded
from sluice.core.config import Settings
from sluice.core.errors import BackendUnavailable
from sluice.core.families import ChildRequest, Countdown, FamilyRequest
from sluice.core.models import JobState, SettleEntry
from sluice.streams.completion.publish import Publisher
from sluice.streams.countdown import StreamCountdown
from sluice_dev.local.streams import StreamPoller, ensure_bus, stream_consumers
from tests.backends.inprocess.test_flows import Rig
from tests.backends.streams_support import received, stream_poller, stream_settings
from tests.unit.test_gateway_fakes import KEY

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


@pytest.fixture
def s(moto_url: str, unique: str) -> Settings:
    return stream_settings(moto_url, unique)


def _half_failing(rig: Rig, ok: set[str]) -> Callable[[], None]:
    """The children's item writes fail, but for those in ``ok`` (a throttled table, say); returns
    the undo."""
    items = rig.store.families.items
    real = items.update

    def update(operation: str, request: dict[str, Any]) -> tuple[dict[str, Any] | None, bool]:
        if operation == "record_children" and request["Key"]["job_id"]["S"] not in ok:
            raise BackendUnavailable("throttled")
        return real(operation, request)

    items.update = update  # type: ignore[method-assign]

    def undo() -> None:
        del items.update

    return undo


def _poller(s: Settings, rig: Rig) -> tuple[StreamPoller, StreamCountdown]:
    from sluice.entry import root as wiring

    publisher = Publisher(wiring.completion_publisher.__wrapped__(s).sink, s.events_bus_name)
    countdown = StreamCountdown(Countdown(rig.store.families, rig.api.release_continuation))
    return stream_poller(s, lambda b: stream_consumers(b, publisher.publish, countdown.recount)), countdown


def test_a_rerun_listing_the_children_in_another_order_still_releases_the_continuation(
        s: Settings) -> None:
    """The first run's child writes half-fail; the re-run lists the same children reversed. Each
    child keeps one slot of its own, so the last ending takes ``remaining`` to 0."""
    rig = Rig(DynamoJobStore.from_settings(s))
    first = rig.request(3, then=True)
    k0 = ids.derive_keyless(rig.parent, "work", "k0")
    undo = _half_failing(rig, ok={k0})  # only the first listed child's item is written
    with pytest.raises(BackendUnavailable):
        rig.api.enqueue_children(first)
    undo()
    assert rig.appended() == []
    token = rig.store.grant(rig.parent, "fanout", "w2")
    reordered = first.model_copy(update={"jobs": list(reversed(first.jobs)), "token": token})
    family = rig.api.enqueue_children(reordered)
    then = family.continuation or ""
    bus = EventBus()
    Countdown(rig.store.families, rig.api.release_continuation).subscribe(bus)
    for child in family.job_ids:
        rig.store.write_result(child, rig.store.grant(child, "work", "w"), 1)
        bus.emit(JobEnded(job=child, queue="work", state="succeeded", source="worker"))
    assert rig.api.status(then).remaining == 0
    assert rig.appended().count(then) == 1


def _end_parent(rig: Rig, how: str) -> None:
    if how == "fail":  # the handler raised sluice.Fail
        rig.store.record_failure(rig.parent, rig.token, "gave up", "failed")
    elif how == "swallowed":  # the handler caught BackendUnavailable and returned
        rig.store.write_result(rig.parent, rig.token, {"ok": True})
    else:  # its attempts used up: the relay settles what Redis ended
        rig.store.settle_ended(SettleEntry(job_id=rig.parent, queue="fanout", status=JobState.DEAD,
                                           ended_at_ms=1, last_error="attempts used up"))


@pytest.mark.parametrize("how", ["fail", "swallowed", "attempts_used_up"])
def test_children_whose_append_failed_end_dead_when_their_parent_ends_and_the_continuation_runs(
        s: Settings, unique: str, how: str) -> None:
    url = ensure_bus(s, f"follow-{unique}")
    rig = Rig(DynamoJobStore.from_settings(s))
    sent = rig.api.enqueue_children(FamilyRequest(  # an earlier request whose append went through
        parent_id=rig.parent, token=rig.token, jobs=[ChildRequest(queue="work", payload=0, key="sent")]))
    rig.log.fail = BackendUnavailable("kafka down")
    request = rig.request(2, then=True)
    with pytest.raises(BackendUnavailable):
        rig.api.enqueue_children(request)
    rig.log.fail = None
    stuck = [ids.derive_keyless(rig.parent, "work", f"k{i}") for i in range(2)]
    then = ids.derive_keyless(rig.parent, "report", ids.CONTINUATION_PREFIX + "then")
    assert {rig.api.status(c).status for c in stuck} == {JobState.ACCEPTED}
    _end_parent(rig, how)

    poller, _ = _poller(s, rig)
    poller.poll_once()  # the parent's final write: its pending children end dead, and count down
    poller.poll_once()  # ... and their own final writes: their completion events
    for child in stuck:
        view = rig.api.status(child)
        assert view.status is JobState.DEAD, (how, view)
        assert view.last_error is not None and rig.parent in view.last_error
        assert "never appended" in view.last_error
    assert rig.api.status(sent.job_ids[0]).status is JobState.ACCEPTED  # appended: left to run
    assert rig.appended() == [*sorted(sent.job_ids), then]  # the continuation runs, per the family rules
    events = {e["detail"]["job_id"]: e for e in received(s, url)}
    for child in stuck:
        assert events[child]["detail-type"] == "Job Dead"
        assert events[child]["detail"]["parent"] == rig.parent
        assert "never appended" in events[child]["detail"]["last_error"]
    again, _ = _poller(s, rig)  # a poller that lost its checkpoint: every record once more
    again.poll_once()
    assert rig.appended().count(then) == 1
    assert {rig.api.status(c).status for c in stuck} == {JobState.DEAD}


def test_a_childs_completion_event_names_its_parent_and_a_plain_jobs_none(s: Settings, unique: str) -> None:
    url = ensure_bus(s, f"follow-{unique}")
    rig = Rig(DynamoJobStore.from_settings(s))
    (child,) = rig.api.enqueue_children(rig.request(1)).job_ids
    rig.store.write_result(child, rig.store.grant(child, "work", "w"), 1)
    rig.store.write_result(rig.parent, rig.token, 2)  # the parent is a plain job
    poller, _ = _poller(s, rig)
    poller.poll_once()
    events = {e["detail"]["job_id"]: e["detail"] for e in received(s, url)}
    assert events[child]["parent"] == rig.parent
    assert events[rig.parent]["parent"] is None


def test_children_whose_items_were_never_written_are_created_dead_in_their_slots(s: Settings) -> None:
    """The family's record and the continuation's item were written, the children's writes failed
    (one of three went through), and the parent failed: every child ends dead, each in its own
    slot, and the continuation runs once."""
    rig = Rig(DynamoJobStore.from_settings(s))
    k1 = ids.derive_keyless(rig.parent, "work", "k1")
    undo = _half_failing(rig, ok={k1})
    with pytest.raises(BackendUnavailable):
        rig.api.enqueue_children(rig.request(3, then=True))
    undo()
    then = ids.derive_keyless(rig.parent, "report", ids.CONTINUATION_PREFIX + "then")
    assert rig.api.status(then).remaining == 3
    rig.store.record_failure(rig.parent, rig.token, "gave up", "failed")
    poller, countdown = _poller(s, rig)
    seen: list[Any] = []
    countdown.bus.subscribe(seen.append)
    poller.poll_once()
    poller.poll_once()
    children = [ids.derive_keyless(rig.parent, "work", f"k{i}") for i in range(3)]
    views = [rig.api.status(c) for c in children]
    assert [(v.status, v.parent_id, v.continuation, v.queue) for v in views] == \
        [(JobState.DEAD, rig.parent, then, "work")] * 3
    assert rig.api.status(then).remaining == 0 and rig.appended() == [then]
    assert sorted(e.job for e in seen) == sorted(children) and {e.parent for e in seen} == {rig.parent}


def test_a_parent_without_pending_children_reconciles_nothing(s: Settings) -> None:
    rig = Rig(DynamoJobStore.from_settings(s))
    family = rig.api.enqueue_children(rig.request(2))
    item = rig.store.items.read(rig.parent)
    assert item is not None and "pending_children" not in item  # the append confirmed: off the list
    rig.store.record_failure(rig.parent, rig.token, "gave up", "failed")
    poller, _ = _poller(s, rig)
    poller.poll_once()
    assert {rig.api.status(c).status for c in family.job_ids} == {JobState.ACCEPTED}


def test_a_pending_list_a_team_forged_ends_no_job_of_another_parent(s: Settings) -> None:
    """Hostile: the pending list is on the parent's item, which its team's code may write. It names
    another parent's accepted child, a job with no item (another time than the parent's), and that
    job again in a family record the team forged for its own continuation: none is ended."""
    rig = Rig(DynamoJobStore.from_settings(s))
    other = Rig(rig.store)  # another parent (another team's, say), whose child waits accepted
    (theirs,) = other.api.enqueue_children(other.request(1)).job_ids
    stranger = ids.mint(1_700_000_999_000, "work", KEY)  # a caller's job, no item yet (before the relay)
    fake_then = ids.derive_keyless(rig.parent, "report", ids.CONTINUATION_PREFIX + "forged")
    db = rig.store.client
    db.put_item(TableName=rig.store.table, Item={
        "job_id": {"S": f"~family~{fake_then}"}, "parent_id": {"S": rig.parent},
        "waits_for": {"SS": [stranger, theirs]}})
    db.update_item(TableName=rig.store.table, Key={"job_id": {"S": rig.parent}},
                   UpdateExpression="ADD pending_children :p, continuations :c",
                   ExpressionAttributeValues={":p": {"SS": [theirs, stranger]}, ":c": {"SS": [fake_then]}})
    rig.store.record_failure(rig.parent, rig.token, "gave up", "failed")
    poller, countdown = _poller(s, rig)
    seen: list[Any] = []
    countdown.bus.subscribe(seen.append)
    poller.poll_once()
    assert rig.api.status(theirs).status is JobState.ACCEPTED
    assert rig.store.items.read(stranger) is None and seen == []
