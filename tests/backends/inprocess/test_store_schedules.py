"""The schedule adapters on moto (in-process, no sockets): DynamoDB items and EventBridge Scheduler."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from sluice.backends.dynamodb import tables
from sluice.backends.dynamodb.schedules import DynamoScheduleStore, SchedulerTrigger
from sluice.core import schedules
from sluice.core.errors import ScheduleExists, ScheduleNotFound

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
    for item in s.every():
        s.delete(item.queue, item.name)


def nightly(name: str = "nightly", queue: str = "reports") -> schedules.Schedule:
    return schedules.Schedule.create(name, "cron(0 3 * * ? *)", queue, {"r": [1, "x"]}, 1_700_000_000_000)


def test_items_round_trip_and_names_are_unique_per_queue(store: DynamoScheduleStore) -> None:
    store.create(nightly())
    assert store.get("reports", "nightly") == nightly()
    with pytest.raises(ScheduleExists):
        store.create(nightly())
    store.create(nightly("hourly"))
    store.create(nightly(queue="emails"))  # the same name in another queue is another schedule
    assert sorted(s.name for s in store.all("reports")) == ["hourly", "nightly"]
    assert [s.queue for s in store.all("emails")] == ["emails"]
    assert len(store.every()) == 3
    assert store.set_paused("reports", "nightly", True).paused is True
    assert store.get("reports", "nightly").paused is True and store.get("emails", "nightly").paused is False
    store.delete("reports", "nightly")
    with pytest.raises(ScheduleNotFound):
        store.get("reports", "nightly")
    for call in (lambda: store.delete("reports", "nightly"),
                 lambda: store.set_paused("reports", "nightly", False),
                 lambda: store.set_paused("other", "hourly", True)):
        with pytest.raises(ScheduleNotFound):
            call()
    assert [s.name for s in store.all("reports")] == ["hourly"]  # a failed set_paused created nothing
    assert store.all("other") == [] and store.get("emails", "nightly") == nightly(queue="emails")


def test_the_trigger_creates_pauses_and_deletes_a_scheduler_schedule(clients: tuple[Any, Any]) -> None:
    scheduler = clients[1]
    trigger = SchedulerTrigger(scheduler, ARN, ROLE)
    trigger.create(nightly())
    made = scheduler.get_schedule(Name="reports.nightly", GroupName="default")
    assert made["ScheduleExpression"] == "cron(0 3 * * ? *)" and made["State"] == "ENABLED"
    assert made["Target"]["Arn"] == ARN and made["Target"]["RoleArn"] == ROLE
    assert json.loads(made["Target"]["Input"]) == {"sluice_schedule": "nightly", "queue": "reports",
                                                   "scheduled_time": "<aws.scheduler.scheduled-time>"}
    trigger.set_paused(schedules.Schedule(**{**nightly().__dict__, "paused": True}))
    assert scheduler.get_schedule(Name="reports.nightly", GroupName="default")["State"] == "DISABLED"
    trigger.delete("reports", "nightly")
    trigger.delete("reports", "nightly")  # gone already: fine
    with pytest.raises(scheduler.exceptions.ResourceNotFoundException):
        scheduler.get_schedule(Name="reports.nightly", GroupName="default")


def test_the_schedulers_target_retries_for_a_day_then_dead_letters_the_firing(
        clients: tuple[Any, Any]) -> None:
    """Issue 29: without a retry policy and a dead-letter queue, a firing refused for a day (a 429
    while the queue is held) was lost silently. Both are on the target, on create and on every update
    (an update restates the whole schedule)."""
    scheduler, dlq = clients[1], "arn:aws:sqs:us-east-1:123456789012:sluice-firings-dlq"
    trigger = SchedulerTrigger(scheduler, ARN, ROLE, dead_letter_arn=dlq)
    trigger.create(nightly("retried"))
    for _ in range(2):
        target = scheduler.get_schedule(Name="reports.retried", GroupName="default")["Target"]
        assert target["RetryPolicy"] == {"MaximumEventAgeInSeconds": 86_400, "MaximumRetryAttempts": 185}
        assert target["DeadLetterConfig"] == {"Arn": dlq}
        trigger.set_paused(schedules.Schedule(**{**nightly("retried").__dict__, "paused": True}))
    trigger.delete("reports", "retried")


def test_scheduler_names_are_per_queue_and_fit_schedulers_limit() -> None:
    assert schedules.scheduler_name("reports", "nightly") == "reports.nightly"
    long_q, long_n = "q" * 64, "n" * 64
    made = {schedules.scheduler_name(long_q, long_n), schedules.scheduler_name(long_q, long_n[:-1] + "m"),
            schedules.scheduler_name(long_q[:-1] + "r", long_n)}
    assert len(made) == 3 and all(len(n) <= 64 and re.fullmatch(r"[0-9A-Za-z_.-]+", n) for n in made)


def test_the_composition_root_builds_the_store_and_the_trigger_only_when_configured(
        clients: tuple[Any, Any]) -> None:
    from sluice.core.config import Settings
    from sluice.entry import root as wiring
    from tests.unit.test_gateway_fakes import Rig

    assert wiring.schedules(Settings(schedules_table="")) is None
    local = wiring.schedules(Settings(schedules_table="schedules", aws_region="us-east-1"))
    assert local is not None
    built = local(Rig().api)
    assert isinstance(built.store, DynamoScheduleStore) and built.trigger is None
    aws = wiring.schedules(Settings(schedules_table="schedules", aws_region="us-east-1",
                                    gateway_function_arn=ARN, scheduler_role_arn=ROLE,
                                    firings_dead_letter_arn="arn:aws:sqs:us-east-1:123456789012:dlq"))
    assert aws is not None and isinstance(trigger := aws(Rig().api).trigger, SchedulerTrigger)
    assert trigger.dead_letter_arn == "arn:aws:sqs:us-east-1:123456789012:dlq"
