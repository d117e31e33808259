"""The continuations' countdown on moto's real stream, through the local poller as ``sluice dev``
runs it: both consumers (completion events and the countdown) on each batch, a release refused
(the checkpoint stays), retried on the next round, and a poller that lost its checkpoint (a crash)
delivering everything again: the continuation is appended once (docs/flows.md, Failure)."""

from __future__ import annotations

from typing import Any

import pytest

from sluice.backends.dynamodb.jobs import DynamoJobStore
from sluice.core.config import Settings
from sluice.core.errors import BackendUnavailable
from sluice.core.families import Countdown
from sluice.streams.completion.publish import Publisher
from sluice.streams.countdown import StreamCountdown
from sluice_dev.local.streams import StreamPoller, ensure_bus, stream_consumers
from tests.backends.inprocess.test_flows import Rig
from tests.backends.streams_support import received, stream_poller, stream_settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


@pytest.fixture
def s(moto_url: str, unique: str) -> Settings:
    return stream_settings(moto_url, unique)


def test_children_whose_process_died_before_their_countdown_release_the_continuation_once(
        s: Settings, unique: str) -> None:
    from sluice.entry import root as wiring

    url = ensure_bus(s, f"follow-{unique}")
    rig = Rig(DynamoJobStore.from_settings(s))
    family = rig.api.enqueue_children(rig.request(2, then=True))
    then = family.continuation or ""
    for child, state in zip(family.job_ids, ("failed", "dead"), strict=True):
        rig.store.record_failure(child, rig.store.grant(child, "work", "w"), "boom", state)
    assert rig.api.status(then).remaining == 2  # no JobEnded reached a countdown: both "died"

    gateway_up = False

    def release(continuation: str) -> None:
        if not gateway_up:
            raise BackendUnavailable("the gateway function is unavailable")
        rig.api.release_continuation(continuation)

    publisher = Publisher(wiring.completion_publisher.__wrapped__(s).sink, s.events_bus_name)
    countdown = StreamCountdown(Countdown(rig.store.families, release, sleep=lambda _s: None))

    def poller() -> StreamPoller:
        return stream_poller(s, lambda batch: stream_consumers(batch, publisher.publish, countdown.recount))

    first = poller()
    first.poll_once()  # counted to 0; the release refused: the last child's record is kept
    assert rig.api.status(then).remaining == 0 and then not in rig.appended()
    gateway_up = True
    first.poll_once()
    assert rig.appended().count(then) == 1
    poller().poll_once()  # a poller that lost its checkpoint: every record again
    first.poll_once()
    assert rig.appended().count(then) == 1 and rig.api.status(then).remaining == 0
    events: list[Any] = received(s, url)
    assert {e["detail"]["job_id"] for e in events} == set(family.job_ids)  # events flowed alongside


def test_a_continuation_spec_altered_in_the_jobs_table_is_refused_at_its_release(
        s: Settings, unique: str) -> None:
    """Issue 27: the continuation's record waits under ``~family~<id>``, which a continuation team's
    LeadingKeys reach. It is sealed with the whole record, and checked where it is read back: an
    altered spec (another payload, priority 9) is refused with a clear error and nothing is appended;
    the untouched one is released, sealed anew."""
    from sluice.core import seal
    from sluice.core.errors import RecordTampered
    from sluice.core.models import JobSpec
    from sluice.entry import root as wiring

    rig = Rig(DynamoJobStore.from_settings(s))
    family = rig.api.enqueue_children(rig.request(1, then=True))
    then = family.continuation or ""
    (child,) = family.job_ids
    rig.store.record_failure(child, rig.store.grant(child, "work", "w"), "boom", "failed")
    rig.store.families.count_down(then, 0)
    db = wiring.boto_client("dynamodb", s)
    key = {"job_id": {"S": f"~family~{then}"}}
    stored = db.get_item(TableName=s.jobs_table, Key=key)["Item"]["continuation_spec"]["S"]
    original = JobSpec.model_validate_json(stored)
    assert seal.verify_spec(original, [rig.api.job_id_key])
    for change in ({"payload": {"n": "mallory"}}, {"priority": 9}, {"seal": None}):
        forged = original.model_copy(update=change).model_dump_json()
        db.update_item(TableName=s.jobs_table, Key=key, UpdateExpression="SET continuation_spec = :s",
                       ExpressionAttributeValues={":s": {"S": forged}})
        with pytest.raises(RecordTampered, match="does not match its seal"):
            rig.api.release_continuation(then)
        assert then not in rig.appended()
    db.update_item(TableName=s.jobs_table, Key=key, UpdateExpression="SET continuation_spec = :s",
                   ExpressionAttributeValues={":s": {"S": stored}})
    assert rig.api.release_continuation(then)
    (released,) = [r for r in rig.log.records if r.job_id == then]
    assert seal.verify_spec(released, [rig.api.job_id_key]) and released.payload == original.payload


def test_a_workflow_across_two_key_rotations_is_counted_released_and_started_at_every_generation(
        s: Settings) -> None:
    """Issue 29, item 7: every generation of a workflow was derived with its root's key, so once that
    key retired (two 30-day rotations) a continuation could no longer start its children. Here each
    generation runs under the gateway of its epoch (the root's key current, then previous, then gone),
    its children end, the stream's countdown on the moto server releases its continuation through that
    gateway, and the continuation starts the next generation."""
    from sluice.core import ids
    from sluice.core.families import ChildRequest, FamilyRequest, ThenRequest
    from tests.backends.inprocess.test_flows import K2, K3, KEY, PARENT_MS, rotated

    rig, day = Rig(DynamoJobStore.from_settings(s)), 86_400_000
    epochs = [rig.api, rotated(rig, K2, (KEY,), PARENT_MS + 31 * day),
              rotated(rig, K3, (K2,), PARENT_MS + 61 * day)]
    current: list[StreamCountdown] = []
    poller = stream_poller(s, lambda batch: stream_consumers(batch, current[-1].recount))
    parent, made = rig.parent, [rig.parent]
    for api in epochs:
        current.append(StreamCountdown(Countdown(rig.store.families, api.release_continuation,
                                                 sleep=lambda _s: None)))
        token = rig.store.grant(parent, ids.queue_in_id(parent), "w")
        jobs = [ChildRequest(queue="work", payload=i, key=f"k{i}") for i in range(2)]
        family = api.enqueue_children(FamilyRequest(parent_id=parent, token=token, jobs=jobs,
                                                    then=ThenRequest(queue="report", payload={"n": 2})))
        rig.store.write_result(parent, token, "done")
        for child in family.job_ids:
            rig.store.write_result(child, rig.store.grant(child, "work", "w"), "done")
        poller.poll_once()  # the children's final records: counted down, the continuation released
        then = family.continuation or ""
        assert rig.appended().count(then) == 1 and rig.api.status(then).remaining == 0
        made += [*family.job_ids, then]
        parent = then
    assert epochs[-1].verifier.verify(made[0]) is None  # the root's key retired two rotations ago
    assert len(set(made)) == 10 and rig.api.status(made[-1]).parent_id == made[-4]
