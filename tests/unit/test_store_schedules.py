"""The schedule adapters on moto (in-process, no sockets): DynamoDB items and EventBridge Scheduler."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from sluice import schedules
from sluice.errors import ScheduleExists, ScheduleNotFound
from sluice.store import tables
from sluice.store.schedules import DynamoScheduleStore, SchedulerTrigger

ARN = "arn:aws:lambda:us-east-1:123456789012:function:sluice-gateway"
ROLE = "arn:aws:iam::123456789012:role/sluice-scheduler"


@pytest.fixture(scope="module")
def clients() -> Iterator[tuple[Any, Any]]:
    with mock_aws():
        db = boto3.client("dynamodb", region_name="us-east-1")
        tables.create_schedules_table(db, "schedules")
        yield db, boto3.client("scheduler", region_name="us-east-1")


@pytest.fixture
def store(clients: tuple[Any, Any]) -> Iterator[DynamoScheduleStore]:
    s = DynamoScheduleStore(clients[0], "schedules")
    yield s
    for item in s.all():
        s.delete(item.name)


def nightly(name: str = "nightly") -> schedules.Schedule:
    return schedules.Schedule.create(name, "cron(0 3 * * ? *)", "reports", {"r": [1, "x"]}, 1_700_000_000_000)


def test_items_round_trip_and_names_are_unique(store: DynamoScheduleStore) -> None:
    store.create(nightly())
    assert store.get("nightly") == nightly()
    with pytest.raises(ScheduleExists):
        store.create(nightly())
    store.create(nightly("hourly"))
    assert sorted(s.name for s in store.all()) == ["hourly", "nightly"]
    assert store.set_paused("nightly", True).paused is True
    assert store.get("nightly").paused is True
    store.delete("nightly")
    with pytest.raises(ScheduleNotFound):
        store.get("nightly")
    for call in (lambda: store.delete("nightly"), lambda: store.set_paused("nightly", False)):
        with pytest.raises(ScheduleNotFound):
            call()
    assert [s.name for s in store.all()] == ["hourly"]  # a failed set_paused created nothing


def test_the_trigger_creates_pauses_and_deletes_a_scheduler_schedule(clients: tuple[Any, Any]) -> None:
    scheduler = clients[1]
    trigger = SchedulerTrigger(scheduler, ARN, ROLE)
    trigger.create(nightly())
    made = scheduler.get_schedule(Name="nightly", GroupName="default")
    assert made["ScheduleExpression"] == "cron(0 3 * * ? *)" and made["State"] == "ENABLED"
    assert made["Target"]["Arn"] == ARN and made["Target"]["RoleArn"] == ROLE
    assert json.loads(made["Target"]["Input"]) == {"sluice_schedule": "nightly",
                                                   "scheduled_time": "<aws.scheduler.scheduled-time>"}
    trigger.set_paused(schedules.Schedule(**{**nightly().__dict__, "paused": True}))
    assert scheduler.get_schedule(Name="nightly", GroupName="default")["State"] == "DISABLED"
    trigger.delete("nightly")
    trigger.delete("nightly")  # gone already: fine
    with pytest.raises(scheduler.exceptions.ResourceNotFoundException):
        scheduler.get_schedule(Name="nightly", GroupName="default")


def test_the_composition_root_builds_the_store_and_the_trigger_only_when_configured(
        clients: tuple[Any, Any]) -> None:
    from sluice import wiring
    from sluice.config import Settings
    from tests.unit.test_gateway_fakes import Rig

    assert wiring.schedules(Settings(schedules_table="")) is None
    local = wiring.schedules(Settings(schedules_table="schedules", aws_region="us-east-1"))
    assert local is not None
    built = local(Rig().api)
    assert isinstance(built.store, DynamoScheduleStore) and built.trigger is None
    aws = wiring.schedules(Settings(schedules_table="schedules", aws_region="us-east-1",
                                    gateway_function_arn=ARN, scheduler_role_arn=ROLE))
    assert aws is not None and isinstance(aws(Rig().api).trigger, SchedulerTrigger)
