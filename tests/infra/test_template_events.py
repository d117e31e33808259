"""Completion events in template.yaml: the stream, the bus, the mapping's retries, least privilege."""

from __future__ import annotations

import json
from typing import Any

from tests.infra import cfn

T = cfn.template()
RES = T["Resources"]


def props(name: str) -> dict[str, Any]:
    return RES[name]["Properties"]  # type: ignore[no-any-return]


def test_the_jobs_table_streams_both_images_to_the_events_function() -> None:
    assert props("JobsTable")["StreamSpecification"] == {"StreamViewType": "NEW_AND_OLD_IMAGES"}
    esm = props("EventsStream")
    assert esm["EventSourceArn"] == {"Fn::GetAtt": ["JobsTable", "StreamArn"]}
    assert esm["FunctionName"] == {"Ref": "EventsFunction"}
    assert esm["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert esm["StartingPosition"] == "TRIM_HORIZON" and esm["BisectBatchOnFunctionError"] is True
    dlq = {"Fn::GetAtt": ["EventsDeadLetterQueue", "Arn"]}
    assert esm["DestinationConfig"]["OnFailure"]["Destination"] == dlq
    (f,) = esm["FilterCriteria"]["Filters"]
    assert json.loads(f["Pattern"])["dynamodb"]["NewImage"]["status"]["S"] == [
        "succeeded", "failed", "dead", "cancelled"]


def test_the_events_function_may_put_only_to_its_bus_and_read_only_the_stream() -> None:
    p = props("EventsFunction")
    assert p["CodeUri"] == "functions/events/"
    assert p["Environment"]["Variables"]["SLUICE_EVENTS_BUS_NAME"] == {"Ref": "EventBus"}
    by_action = {a: s["Resource"] for pol in p["Policies"] for s in pol["Statement"] for a in s["Action"]}
    assert by_action["events:PutEvents"] == {"Fn::GetAtt": ["EventBus", "Arn"]}
    for action in ("dynamodb:GetRecords", "dynamodb:GetShardIterator", "dynamodb:DescribeStream"):
        assert by_action[action] == {"Fn::GetAtt": ["JobsTable", "StreamArn"]}
    assert by_action["s3:PutObject"] == {"Fn::Sub": "${ResultsBucket.Arn}/results/*"}
    assert by_action["sqs:SendMessage"] == {"Fn::GetAtt": ["EventsDeadLetterQueue", "Arn"]}
    assert set(by_action) == {"events:PutEvents", "dynamodb:GetRecords", "dynamodb:GetShardIterator",
                              "dynamodb:DescribeStream", "dynamodb:ListStreams", "s3:PutObject",
                              "sqs:SendMessage"}
    assert "Events" not in p  # no SAM event: it would attach a managed policy on Resource "*"


def test_the_countdown_function_reads_the_stream_for_childrens_final_writes_only() -> None:
    """docs/flows.md, Failure: the durable countdown, a sibling of the events function; and a
    parent's final writes that left children pending (issue 29: it ends them dead)."""
    esm = props("CountdownStream")
    assert esm["EventSourceArn"] == {"Fn::GetAtt": ["JobsTable", "StreamArn"]}
    assert esm["FunctionName"] == {"Ref": "CountdownFunction"}
    assert esm["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert esm["StartingPosition"] == "TRIM_HORIZON" and esm["BisectBatchOnFunctionError"] is True
    assert esm["DestinationConfig"]["OnFailure"]["Destination"] == {
        "Fn::GetAtt": ["CountdownDeadLetterQueue", "Arn"]}
    (child, parent) = esm["FilterCriteria"]["Filters"]
    final = {"status": {"S": ["succeeded", "failed", "dead", "cancelled"]}}
    assert json.loads(child["Pattern"])["dynamodb"]["NewImage"] == {
        **final, "continuation": {"S": [{"exists": True}]}}
    assert json.loads(parent["Pattern"])["dynamodb"]["NewImage"] == {
        **final, "pending_children": {"SS": [{"exists": True}]}}
    readers = [n for n, r in RES.items() if r["Type"] == "AWS::Lambda::EventSourceMapping"
               and r["Properties"]["EventSourceArn"] == {"Fn::GetAtt": ["JobsTable", "StreamArn"]}]
    assert sorted(readers) == ["CountdownStream", "EventsStream"]  # DynamoDB: two readers a shard


def test_the_countdown_function_may_count_down_and_invoke_the_internal_function_only() -> None:
    p = props("CountdownFunction")
    assert p["CodeUri"] == "functions/countdown/"
    assert p["Environment"]["Variables"]["SLUICE_INTERNAL_FUNCTION_NAME"] == {"Ref": "InternalFunction"}
    policies = p["Policies"]
    assert {"LambdaInvokePolicy": {"FunctionName": {"Ref": "InternalFunction"}}} in policies
    by_action = {a: s["Resource"] for pol in policies for s in pol.get("Statement", []) for a in s["Action"]}
    assert by_action == {
        "dynamodb:GetItem": {"Fn::GetAtt": ["JobsTable", "Arn"]},
        "dynamodb:UpdateItem": {"Fn::GetAtt": ["JobsTable", "Arn"]},
        **{a: {"Fn::GetAtt": ["JobsTable", "StreamArn"]} for a in (
            "dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator",
            "dynamodb:ListStreams")},
        "sqs:SendMessage": {"Fn::GetAtt": ["CountdownDeadLetterQueue", "Arn"]}}
    assert len(policies) == 2 and "Events" not in p
