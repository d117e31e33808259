"""The write meter's item sizes come from moto's backend (``motoserver.moto_item_size``)."""

from __future__ import annotations

import boto3
from moto import mock_aws

from sluice_dev.local.motoserver import moto_item_size


def test_an_items_size_is_read_from_the_table_in_any_region() -> None:
    with mock_aws():
        db = boto3.client("dynamodb", region_name="eu-west-1")
        db.create_table(TableName="sized", KeySchema=[{"AttributeName": "job_id", "KeyType": "HASH"}],
                        AttributeDefinitions=[{"AttributeName": "job_id", "AttributeType": "S"}],
                        BillingMode="PAY_PER_REQUEST")
        db.put_item(TableName="sized", Item={"job_id": {"S": "a"}, "x": {"S": "y" * 2_000}})
        assert moto_item_size("sized", {"job_id": {"S": "a"}}) == len("job_id") + 1 + 1 + 2_000
        assert moto_item_size("sized", {"job_id": {"S": "absent"}}) is None
        assert moto_item_size("no-such-table", {"job_id": {"S": "a"}}) is None
