"""The local moto server's EventBridge input transformers parsed once (``sluice_dev.local.motoevents``)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import boto3
import jsonpath_ng.ext as ext
import pytest
from moto import mock_aws

from sluice_dev.local import motoevents

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def installed() -> Iterator[None]:
    before = ext.parse  # installed by conftest.py
    ext.parse = getattr(before, "__wrapped__", before)  # the stock parse (lru_cache keeps it there)
    motoevents.install()
    try:
        yield
    finally:
        ext.parse = before


def test_a_path_is_parsed_once_and_finds_what_a_fresh_parse_finds(installed: None) -> None:
    motoevents.install()  # idempotent: not wrapped twice
    assert getattr(ext.parse.__wrapped__, "__wrapped__", None) is None
    assert ext.parse("$.detail.job_id") is ext.parse("$.detail.job_id")
    event = {"detail": {"job_id": "j1", "state": "succeeded"}}
    assert [m.value for m in ext.parse("$.detail.job_id").find(event)] == ["j1"]
    assert [m.value for m in ext.parse("$.detail.state").find(event)] == ["succeeded"]


def test_each_event_is_transformed_by_its_own_values(installed: None) -> None:
    with mock_aws():
        events = boto3.client("events", region_name="us-east-1")
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="q")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        events.put_rule(Name="r", EventPattern=json.dumps({"source": ["sluice"]}))
        events.put_targets(Rule="r", Targets=[{"Id": "t", "Arn": arn, "InputTransformer": {
            "InputPathsMap": {"job": "$.detail.job_id"}, "InputTemplate": '{"job": "<job>"}'}}])
        for job in ("a", "b"):
            events.put_events(Entries=[{"Source": "sluice", "DetailType": "ended",
                                        "Detail": json.dumps({"job_id": job})}])
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert sorted(json.loads(m["Body"])["job"] for m in got) == ["a", "b"]
