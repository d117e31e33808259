"""A fence's records in DynamoDB: one item per key, advanced by one conditional UpdateItem.

The table is the service's: a string partition key ``fence`` and, for the records to expire, TTL on
``expires_at`` (``create_table`` makes one so, for tests and local stacks; in AWS it belongs in the
service's template). The update sets the token only if none is recorded or the recorded one is not
newer (``attribute_not_exists(#t) OR #t <= :t``): atomic, and durable before it answers. Numbers are
exact to 38 digits, so every token up to 2^63-1 compares exactly. Takes a botocore DynamoDB client
(boto3's ``client("dynamodb")`` is one), so the fence needs no boto3.
"""

from __future__ import annotations

import time
from typing import Any

from sluice.core.errors import BackendUnavailable, InvalidInput
from sluice.core.fencing import validate_fence_token
from sluice_fence.verifier import Advance

DEFAULT_TTL_S = 15 * 86_400  # a job's life bound (14 days) and a day


class DynamoFenceStore:
    """``FenceStore`` on a DynamoDB table (``table``) through a botocore ``client``."""

    def __init__(self, client: Any, table: str, *, ttl_s: int = DEFAULT_TTL_S) -> None:
        if not isinstance(table, str) or not table:
            raise InvalidInput(f"invalid table name {table!r}")
        if isinstance(ttl_s, bool) or not isinstance(ttl_s, int) or not 0 < ttl_s <= 31_536_000:
            raise InvalidInput(f"ttl_s must be in 1..31536000, got {ttl_s!r}")
        self.client, self.table, self.ttl_s = client, table, ttl_s

    def create_table(self) -> None:
        """The table as the store expects it (on demand, TTL on ``expires_at``); for tests and
        local stacks. Waits until it is active."""
        self.client.create_table(TableName=self.table, BillingMode="PAY_PER_REQUEST",
                                 AttributeDefinitions=[{"AttributeName": "fence", "AttributeType": "S"}],
                                 KeySchema=[{"AttributeName": "fence", "KeyType": "HASH"}])
        self.client.get_waiter("table_exists").wait(TableName=self.table)
        self.client.update_time_to_live(TableName=self.table, TimeToLiveSpecification={
            "Enabled": True, "AttributeName": "expires_at"})

    def advance(self, key: str, token: int) -> Advance:
        from botocore.exceptions import BotoCoreError, ClientError

        validate_fence_token(token)
        try:
            old = self.client.update_item(
                TableName=self.table, Key={"fence": {"S": key}},
                UpdateExpression="SET #t = :t, #e = :e",
                ConditionExpression="attribute_not_exists(#t) OR #t <= :t",
                ExpressionAttributeNames={"#t": "token", "#e": "expires_at"},
                ExpressionAttributeValues={":t": {"N": str(token)},
                                           ":e": {"N": str(int(time.time()) + self.ttl_s)}},
                ReturnValues="ALL_OLD", ReturnValuesOnConditionCheckFailure="ALL_OLD",
            ).get("Attributes")
        except ClientError as exc:
            error = exc.response.get("Error", {})
            if error.get("Code") == "ConditionalCheckFailedException":
                found: Any = exc.response.get("Item")
                item = found or self._read(key)
                return Advance("stale", int(item["token"]["N"]))
            raise BackendUnavailable(f"fence store: {error.get('Code')}: {error.get('Message')}") from exc
        except BotoCoreError as exc:
            raise BackendUnavailable(f"fence store: {exc}") from exc
        if old is not None and int(old["token"]["N"]) == token:
            return Advance("same", token)
        return Advance("new", token)

    def _read(self, key: str) -> dict[str, Any]:
        """The recorded item, strongly read (a condition failure that did not return it)."""
        item: dict[str, Any] = self.client.get_item(TableName=self.table, Key={"fence": {"S": key}},
                                                    ConsistentRead=True)["Item"]
        return item
