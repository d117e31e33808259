"""A schedule's firing through the gateway's use case: a double firing makes one job (issue 17)."""

from __future__ import annotations

import pytest

from sluice.core import ids, schedules
from sluice.core.errors import InvalidInput, PayloadTooLarge
from sluice.gateway import schedules as api_schedules
from tests.unit.test_gateway_fakes import KEY, Rig
from tests.unit.test_relay import World, run_steps

AT = 1_799_982_000_000  # a scheduled time, on a minute: 2027-01-15T03:00Z, when nightly() fires


def nightly(queue: str = "reports", payload: object = None) -> schedules.Schedule:
    return schedules.Schedule.create("nightly", "cron(0 3 * * ? *)", queue, payload or {"r": 1}, 0)


def test_a_double_firing_appends_one_id_and_the_relay_makes_one_job() -> None:
    rig = Rig()
    rig.now_ms = AT  # delivered at its time
    first = api_schedules.fire(rig.api, nightly(), AT)
    rig.now_ms += 5_000  # the second delivery comes later: the id is the scheduled time's, not the delivery's
    second = api_schedules.fire(rig.api, nightly(), AT)
    assert first.job_id == second.job_id
    assert first.job_id == schedules.firing_id("nightly", "reports", AT)
    assert ids.verify(first.job_id, KEY) is None
    assert [s.job_id for s in rig.log.records] == [first.job_id] * 2
    assert rig.log.records[0].payload == {"r": 1}

    world = World(partitions=1)
    for spec in rig.log.records:
        world.source.append_spec(0, spec)
    relay = world.relay(batch=10)
    run_steps(relay, 5)
    relay.stop()
    assert world.in_redis("reports") == [first.job_id]
    assert len(world.engine.enqueued) == 1


def test_the_next_firing_is_another_job() -> None:
    rig = Rig()
    rig.now_ms = AT
    first = api_schedules.fire(rig.api, nightly(), AT).job_id
    rig.now_ms = AT + 86_400_000
    assert first != api_schedules.fire(rig.api, nightly(), AT + 86_400_000).job_id


def test_a_firing_passes_the_enqueue_checks_and_writes_nothing_when_refused() -> None:
    rig = Rig(max_payload_bytes=1024)
    rig.now_ms = AT
    big = schedules.Schedule("nightly", "rate(1 hour)", "reports", {"x": "y" * 2048}, 0)
    with pytest.raises(PayloadTooLarge):
        api_schedules.fire(rig.api, big, AT)
    reserved = schedules.Schedule("nightly", "rate(1 hour)", "sluice-internal", {}, 0)  # an altered item
    with pytest.raises(InvalidInput):
        api_schedules.fire(rig.api, reserved, AT)
    assert rig.log.records == [] and rig.log.pending == []


def test_the_same_firing_before_and_after_a_key_rotation_is_one_id_and_one_job() -> None:
    """Issue 27: a firing's id comes from the schedule and its time, not from the current key, so a
    rotation between two deliveries of one firing (Scheduler retries) makes one job; the relay trusts
    both records through their seals, made with the key current at each delivery."""
    from sluice.core import seal
    from sluice.core.bus import EventBus
    from sluice.gateway.api import Api, Backends
    from sluice.gateway.pipeline import IdMinting, Intake

    rig = Rig()
    rig.now_ms = AT
    before = api_schedules.fire(rig.api, nightly(), AT)
    new_key = b"the-key-after-the-rotation-0123"
    rotated = Api(Backends(rig.log, rig.store, rig.queue, events=EventBus()),  # type: ignore[arg-type]
                  IdMinting(new_key, (KEY,)), intake=Intake(), clock=lambda: AT + 60_000)
    after = api_schedules.fire(rotated, nightly(), AT)
    assert before.job_id == after.job_id
    first, second = rig.log.records
    assert seal.verify_spec(first, [KEY]) and seal.verify_spec(second, [new_key])

    world = World(partitions=1)
    world.clock.t = AT / 1000 + 60
    for spec in rig.log.records:
        world.source.append_spec(0, spec)
    relay = world.relay(batch=10, job_ids=ids.Verifier(new_key, [KEY]))
    run_steps(relay, 5)
    relay.stop()
    assert world.in_redis("reports") == [before.job_id] and world.source.dead == []


@pytest.mark.parametrize(("expression", "delivered", "why"), [
    ("cron(0 3 * * ? *)", AT + 3_600_000, "produces no firing"),  # 04:00: a nightly at 03:00 does not
    ("cron(0 3 * * ? *)", AT + 90_000, "produces no firing"),
    ("rate(1 hour)", AT + 30 * 60_000, "produces no firing"),  # half past, from a start on the hour
    ("cron(0 3 * * ? *)", AT - 86_400_000 * 2, "h after it"),  # two days late: a replay
    ("cron(0 3 * * ? *)", AT + 86_400_000, "before its time"),  # tomorrow's, delivered today
])
def test_a_firing_at_a_time_the_expression_does_not_produce_is_refused_and_writes_nothing(
        expression: str, delivered: int, why: str) -> None:
    from sluice.core.errors import FiringRefused

    rig = Rig()
    rig.now_ms = AT
    schedule = schedules.Schedule("nightly", expression, "reports", {"r": 1}, 0)
    with pytest.raises(FiringRefused, match=why) as caught:
        api_schedules.fire(rig.api, schedule, delivered)
    assert caught.value.code == "FIRING_REFUSED"
    assert rig.log.records == [] and rig.log.pending == [] and rig.store.items == {}


def test_a_firing_before_its_schedule_existed_is_refused_and_a_late_second_is_the_same_job() -> None:
    from sluice.core.errors import FiringRefused

    rig = Rig()
    rig.now_ms = AT
    created_later = schedules.Schedule("nightly", "cron(0 3 * * ? *)", "reports", {}, AT + 1)
    with pytest.raises(FiringRefused, match="before the schedule was created"):
        api_schedules.fire(rig.api, created_later, AT)
    on_time = api_schedules.fire(rig.api, nightly(), AT)
    rig.now_ms = AT + 3_000
    late = api_schedules.fire(rig.api, nightly(), AT + 1_000)  # Scheduler's time, a second off
    assert on_time.job_id == late.job_id
