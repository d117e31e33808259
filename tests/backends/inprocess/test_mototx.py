"""The local moto server's per-item transaction rollback (``sluice_dev.local.mototx``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import moto.dynamodb.models as models
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from sluice_dev.local import mototx

pytestmark = pytest.mark.timeout(60)

STREAM = {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}


@pytest.fixture
def ddb() -> Iterator[Any]:
    original = models.DynamoDBBackend.transact_write_items
    mototx.install()
    try:
        with mock_aws():
            client = boto3.client("dynamodb", region_name="us-east-1",
                                  aws_access_key_id="x", aws_secret_access_key="x")
            client.create_table(TableName="jobs", KeySchema=[{"AttributeName": "job_id", "KeyType": "HASH"}],
                                AttributeDefinitions=[{"AttributeName": "job_id", "AttributeType": "S"}],
                                BillingMode="PAY_PER_REQUEST", StreamSpecification=STREAM)
            client.create_table(TableName="pairs", BillingMode="PAY_PER_REQUEST",
                                KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"},
                                           {"AttributeName": "sk", "KeyType": "RANGE"}],
                                AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                                                      {"AttributeName": "sk", "AttributeType": "S"}])
            for job, token in (("a", "1"), ("b", "5")):
                client.put_item(TableName="jobs", Item={"job_id": {"S": job}, "token": {"N": token}})
            client.put_item(TableName="pairs", Item={"pk": {"S": "p"}, "sk": {"S": "1"}, "v": {"N": "1"}})
            yield client
    finally:
        models.DynamoDBBackend.transact_write_items = original  # type: ignore[method-assign]


def _backend() -> Any:
    return models.dynamodb_backends["123456789012"]["us-east-1"]


def _scan(client: Any, table: str) -> list[dict[str, Any]]:
    return sorted(client.scan(TableName=table)["Items"], key=repr)


def _stream_length() -> int:
    return len(_backend().tables["jobs"].stream_shard.items)


def _set(table: str, key: dict[str, Any], value: str) -> dict[str, Any]:
    return {"Update": {"TableName": table, "Key": key, "UpdateExpression": "SET v = :v",
                       "ExpressionAttributeValues": {":v": {"S": value}}}}


def _fails_last() -> dict[str, Any]:
    return {"ConditionCheck": {"TableName": "jobs", "Key": {"job_id": {"S": "b"}},
                               "ConditionExpression": "#t = :t", "ExpressionAttributeNames": {"#t": "token"},
                               "ExpressionAttributeValues": {":t": {"N": "4"}}}}


def test_a_cancelled_transaction_leaves_every_item_and_the_stream_as_they_were(ddb: Any) -> None:
    jobs, pairs, records = _scan(ddb, "jobs"), _scan(ddb, "pairs"), _stream_length()
    table = _backend().tables["jobs"]
    with pytest.raises(ClientError) as caught:
        ddb.transact_write_items(TransactItems=[
            _set("jobs", {"job_id": {"S": "a"}}, "changed"),                        # an update in place
            {"Put": {"TableName": "jobs", "Item": {"job_id": {"S": "new"}}}},     # a new item
            {"Delete": {"TableName": "pairs", "Key": {"pk": {"S": "p"}, "sk": {"S": "1"}}}},
            {"Put": {"TableName": "pairs", "Item": {"pk": {"S": "q"}, "sk": {"S": "2"}}}},
            _fails_last(),
        ])
    assert caught.value.response["Error"]["Code"] == "TransactionCanceledException"
    assert _scan(ddb, "jobs") == jobs
    assert _scan(ddb, "pairs") == pairs
    assert _stream_length() == records  # no stream record for writes that never happened
    assert _backend().tables["jobs"] is table  # rolled back in place: the table was never copied


def test_a_refused_transaction_rolls_back_too(ddb: Any) -> None:
    jobs = _scan(ddb, "jobs")
    with pytest.raises(ClientError) as caught:  # two operations on one item: a ValidationException
        ddb.transact_write_items(TransactItems=[_set("jobs", {"job_id": {"S": "a"}}, "x"),
                                                _set("jobs", {"job_id": {"S": "a"}}, "y")])
    assert caught.value.response["Error"]["Code"] == "ValidationException"
    assert _scan(ddb, "jobs") == jobs


def test_a_transaction_that_succeeds_still_applies_every_write(ddb: Any) -> None:
    records = _stream_length()
    ddb.transact_write_items(TransactItems=[
        _set("jobs", {"job_id": {"S": "a"}}, "done"),
        {"Put": {"TableName": "jobs", "Item": {"job_id": {"S": "c"}}}},
        {"Delete": {"TableName": "pairs", "Key": {"pk": {"S": "p"}, "sk": {"S": "1"}}}},
    ])
    got = {item["job_id"]["S"]: item for item in _scan(ddb, "jobs")}
    assert got["a"]["v"] == {"S": "done"} and "c" in got
    assert _scan(ddb, "pairs") == []
    assert _stream_length() == records + 2


def test_install_is_idempotent(ddb: Any) -> None:
    installed = models.DynamoDBBackend.transact_write_items
    mototx.install()
    assert models.DynamoDBBackend.transact_write_items is installed
