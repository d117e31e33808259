"""The local stack's event bus: routed to the follow queue, or (for chaos) to nothing."""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from sluice.core.config import Settings
from sluice_dev.local.streams import FOLLOW_QUEUE, FOLLOW_RETENTION_S, ensure_bus

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    for key, value in {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x"}.items():
        monkeypatch.setenv(key, value)
    with mock_aws():
        yield Settings(aws_region="us-east-1", events_bus_name="sluice-bus")


def test_without_a_queue_the_bus_exists_and_routes_nowhere(settings: Settings) -> None:
    assert ensure_bus(settings, None) == ""
    events = boto3.client("events", region_name="us-east-1")
    assert "sluice-bus" in {b["Name"] for b in events.list_event_buses()["EventBuses"]}
    assert events.list_rules(EventBusName="sluice-bus")["Rules"] == []
    assert boto3.client("sqs", region_name="us-east-1").list_queues().get("QueueUrls", []) == []


def test_with_the_follow_queue_every_sluice_event_reaches_it(settings: Settings) -> None:
    url = ensure_bus(settings)
    assert url.endswith("/" + FOLLOW_QUEUE)
    events = boto3.client("events", region_name="us-east-1")
    events.put_events(Entries=[{"Source": "sluice.queue.q", "DetailType": "Job Succeeded", "Detail": "{}",
                                "EventBusName": "sluice-bus"}])
    got = boto3.client("sqs", region_name="us-east-1").receive_message(QueueUrl=url)["Messages"]
    assert len(got) == 1


def test_the_follow_queue_keeps_messages_five_minutes_even_if_an_older_sluice_made_it(
        settings: Settings) -> None:
    sqs = boto3.client("sqs", region_name="us-east-1")
    sqs.create_queue(QueueName=FOLLOW_QUEUE)  # as sluice made it before: SQS's default 4 days
    for _ in range(2):  # an existing queue, then a second start
        url = ensure_bus(settings)
        attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["MessageRetentionPeriod"])
        assert attrs["Attributes"]["MessageRetentionPeriod"] == str(FOLLOW_RETENTION_S) == "300"
