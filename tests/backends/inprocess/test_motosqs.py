"""The local moto server's cheap SQS clock (``sluice_dev.local.motosqs``)."""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from typing import Any

import boto3
import moto.sqs.models as sqs_models
import pytest
from moto import mock_aws
from moto.core.utils import unix_time as moto_unix_time

from sluice_dev.local import motosqs

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def installed() -> Iterator[None]:
    before = sqs_models.unix_time, sqs_models.unix_time_millis, sqs_models.Queue.add_message
    motosqs.install()
    try:
        yield
    finally:
        sqs_models.unix_time, sqs_models.unix_time_millis, sqs_models.Queue.add_message = before  # type: ignore[method-assign]


def test_the_clock_reads_the_same_time_as_motos_own(installed: None) -> None:
    assert sqs_models.unix_time is not moto_unix_time
    assert abs(sqs_models.unix_time() - moto_unix_time()) < 0.5
    assert abs(sqs_models.unix_time_millis() - moto_unix_time() * 1000) < 500
    when = datetime.datetime(2026, 12, 1, 12, 0, 0)
    assert sqs_models.unix_time(when) == moto_unix_time(when)  # a given time converts as before
    motosqs.install()  # idempotent: not wrapped twice
    assert abs(sqs_models.unix_time() - time.time()) < 0.5


def test_sqs_still_delays_hides_and_delivers(installed: None) -> None:
    with mock_aws():
        sqs: Any = boto3.client("sqs", region_name="us-east-1", aws_access_key_id="x",
                                aws_secret_access_key="x")
        url = sqs.create_queue(QueueName="q")["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody="now")
        sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=60)
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=60)["Messages"]
        assert [m["Body"] for m in got] == ["now"]  # the delayed one is not visible yet
        assert sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages") is None  # hidden
        counts = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        assert counts["ApproximateNumberOfMessagesNotVisible"] == "1"
        assert counts["ApproximateNumberOfMessagesDelayed"] == "1"


def test_a_send_deletes_the_messages_past_the_queues_retention(installed: None) -> None:
    # moto only stops delivering them: an unread queue grew forever, every delivery scanning it
    with mock_aws():
        sqs: Any = boto3.client("sqs", region_name="us-east-1", aws_access_key_id="x",
                                aws_secret_access_key="x")
        url = sqs.create_queue(QueueName="q", Attributes={"MessageRetentionPeriod": "60"})["QueueUrl"]
        for body in ("old", "older", "young"):
            sqs.send_message(QueueUrl=url, MessageBody=body)
        queue = sqs_models.sqs_backends["123456789012"]["us-east-1"].get_queue("q")
        queue._messages[0].sent_timestamp -= 120_000  # sent two minutes ago
        queue._messages[1].sent_timestamp -= 61_000
        sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1, VisibilityTimeout=60)  # "old" in flight
        sqs.send_message(QueueUrl=url, MessageBody="new")
        assert [m.body for m in queue._messages] == ["young", "new"]
        assert not queue.pending_messages  # the received one went too
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
        assert sorted(m["Body"] for m in got) == ["new", "young"]
        sqs.send_message(QueueUrl=url, MessageBody="last")  # nothing old: nothing more goes
        assert len(queue._messages) == 3
