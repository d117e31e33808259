"""The moto server's write meter bills write capacity units as DynamoDB does (bench_fanout's WCUs)."""

from __future__ import annotations

import io
import json
from typing import Any

from sluice_dev.local.motoserver import WriteCounter


def _environ(op: str, request: dict[str, Any]) -> dict[str, Any]:
    body = json.dumps(request).encode()
    return {"HTTP_X_AMZ_TARGET": f"DynamoDB_20120810.{op}", "CONTENT_LENGTH": str(len(body)),
            "wsgi.input": io.BytesIO(body)}


def test_units_follow_the_larger_item_size_and_refused_writes_are_billed() -> None:
    sizes: dict[str, int] = {"big": 3_000}
    counter = WriteCounter(lambda table, key: sizes.get(key["job_id"]["S"]))

    def write(op: str, request: dict[str, Any], after: dict[str, int]) -> None:
        written = counter.add(_environ(op, request))
        sizes.update(after)
        counter.billed(written)

    write("PutItem", {"TableName": "jobs", "Item": {"job_id": {"S": "new"}}}, {"new": 200})
    write("UpdateItem", {"TableName": "jobs", "Key": {"job_id": {"S": "new"}}}, {"new": 1_500})
    write("UpdateItem", {"TableName": "jobs", "Key": {"job_id": {"S": "big"}}}, {})  # refused: unchanged
    write("TransactWriteItems", {"TransactItems": [{"Update": {"TableName": "jobs",
                                                               "Key": {"job_id": {"S": "new"}}}}]}, {})
    write("BatchWriteItem", {"RequestItems": {"jobs": [{"PutRequest": {"Item": {"job_id": {"S": "b1"}}}}]}},
          {"b1": 10})
    counter.billed(counter.add(_environ("GetItem", {"TableName": "jobs", "Key": {"job_id": {"S": "big"}}})))
    assert counter.wcu_by_key == {"new": 1 + 2 + 4, "big": 3, "b1": 1}
    assert counter.by_key == {"new": 3, "big": 1, "b1": 1}
    assert counter.by_op == {"PutItem": 1, "UpdateItem": 2, "TransactWriteItems": 1, "BatchWriteItem": 1}
