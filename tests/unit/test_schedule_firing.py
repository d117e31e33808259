"""A schedule's firing through the gateway's use case: a double firing makes one job (issue 17)."""

from __future__ import annotations

import pytest

from sluice.core import ids, schedules
from sluice.core.errors import InvalidInput, PayloadTooLarge
from sluice.gateway import schedules as api_schedules
from tests.unit.test_gateway_fakes import KEY, Rig
from tests.unit.test_relay import World, run_steps

AT = 1_800_000_000_000  # a scheduled time, on a minute


def nightly(queue: str = "reports", payload: object = None) -> schedules.Schedule:
    return schedules.Schedule.create("nightly", "cron(0 3 * * ? *)", queue, payload or {"r": 1}, 0)


def test_a_double_firing_appends_one_id_and_the_relay_makes_one_job() -> None:
    rig = Rig()
    first = api_schedules.fire(rig.api, nightly(), AT)
    rig.now_ms += 5_000  # the second delivery comes later: the id is the scheduled time's, not the delivery's
    second = api_schedules.fire(rig.api, nightly(), AT)
    assert first.job_id == second.job_id
    assert ids.verify(first.job_id, KEY) == ids.Minted("reports", AT)
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
    assert (api_schedules.fire(rig.api, nightly(), AT).job_id
            != api_schedules.fire(rig.api, nightly(), AT + 86_400_000).job_id)


def test_a_firing_passes_the_enqueue_checks_and_writes_nothing_when_refused() -> None:
    rig = Rig(max_payload_bytes=1024)
    big = schedules.Schedule("nightly", "rate(1 hour)", "reports", {"x": "y" * 2048}, 0)
    with pytest.raises(PayloadTooLarge):
        api_schedules.fire(rig.api, big, AT)
    reserved = schedules.Schedule("nightly", "rate(1 hour)", "sluice-internal", {}, 0)  # an altered item
    with pytest.raises(InvalidInput):
        api_schedules.fire(rig.api, reserved, AT)
    assert rig.log.records == [] and rig.log.pending == []
