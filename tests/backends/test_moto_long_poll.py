"""The local moto server waits out SQS long polls outside its one-request-at-a-time lock."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import boto3
import pytest
from botocore.config import Config

pytestmark = pytest.mark.timeout(60)


def _client(service: str, url: str) -> Any:
    config = Config(read_timeout=30, retries={"max_attempts": 1})
    return boto3.client(service, endpoint_url=url, region_name="us-east-1", aws_access_key_id="x",
                        aws_secret_access_key="x", config=config)


def _poll_in_background(url: str, queue_url: str, wait_s: int) -> tuple[threading.Thread, list[Any]]:
    got: list[Any] = []
    sqs = _client("sqs", url)
    poll = threading.Thread(target=lambda: got.append(sqs.receive_message(
        QueueUrl=queue_url, WaitTimeSeconds=wait_s, MaxNumberOfMessages=10)), daemon=True)
    poll.start()
    return poll, got


def test_a_long_poll_on_an_empty_queue_holds_up_no_other_request(moto_url: str) -> None:
    sqs, db = _client("sqs", moto_url), _client("dynamodb", moto_url)
    queue_url = sqs.create_queue(QueueName=f"empty-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    poll, got = _poll_in_background(moto_url, queue_url, wait_s=8)
    for _ in range(5):  # each answered while the poll still waits (moto slept holding the lock)
        db.list_tables()
        sqs.list_queues()
    assert poll.is_alive(), "the other requests waited for the long poll"
    poll.join(30)
    assert got and not got[0].get("Messages")  # it still waited its time and came back empty


def test_a_long_poll_returns_a_message_sent_while_it_waits(moto_url: str) -> None:
    sqs = _client("sqs", moto_url)
    queue_url = sqs.create_queue(QueueName=f"wait-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    poll, got = _poll_in_background(moto_url, queue_url, wait_s=15)
    sqs.send_message(QueueUrl=queue_url, MessageBody="hello")  # needs the lock the poll would hold
    poll.join(30)
    assert not poll.is_alive()
    assert [m["Body"] for m in got[0]["Messages"]] == ["hello"]


def test_a_long_poll_moto_refuses_is_refused_as_before(moto_url: str) -> None:
    sqs = _client("sqs", moto_url)
    queue_url = sqs.create_queue(QueueName=f"bad-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    with pytest.raises(sqs.exceptions.ClientError) as caught:
        sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=21)
    assert "WaitTimeSeconds" in str(caught.value) or "InvalidParameterValue" in str(caught.value)
