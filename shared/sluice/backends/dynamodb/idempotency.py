"""The idempotency table: one item per Idempotency-Key, written once (``sluice.gateway.keyed.KeyStore``).

Layout (partition key ``id``, TTL attribute ``expiration``, as Powertools' DynamoDB layer laid it out,
so the records it wrote before issue 33 are read, and answered, during their 24 hours):

- ``id``: ``sluice.core.idempotency.record_key``; ``expiration``: epoch seconds;
- ``v`` = 2, ``validation`` (the request's fingerprint), ``at`` (acceptance ms), ``kid``, ``seed``,
  ``until`` (the writer's deadline, ms); ``claimed`` once a repeat took the jobs over;
- ``status`` = ``INPROGRESS`` with no ``in_progress_expiration``: a gateway of before (a rollback)
  reading the record answers 409 rather than making a second set of jobs, or 422 for another request.

A Powertools record (no ``v``) is read as ``Stored``: ``COMPLETED`` with its answer in ``data``, or
``INPROGRESS`` until ``in_progress_expiration``, after which ``take`` overwrites it as Powertools did.
"""

from __future__ import annotations

import json
from typing import Any, Final

from botocore.exceptions import BotoCoreError, ClientError

from sluice.backends.dynamodb.client import OnTable
from sluice.backends.dynamodb.errors import conditional, is_conditional_failure, translate
from sluice.core.errors import StoreError
from sluice.core.idempotency import RECORD_FORMAT, KeyRecord, Stored, record_key

IN_PROGRESS: Final = "INPROGRESS"
COMPLETED: Final = "COMPLETED"
_TAKE_CONDITION: Final = ("attribute_not_exists(#id) OR #expiry < :now OR "
                          "(#status = :inprogress AND attribute_exists(#ipe) AND #ipe < :now_ms)")
_TAKE_NAMES: Final = {"#id": "id", "#expiry": "expiration", "#status": "status",
                      "#ipe": "in_progress_expiration"}
_SAME: Final = "#at = :at AND #seed = :seed"  # the record this request wrote or read, not a later one
_NAMES: Final = {"#at": "at", "#seed": "seed", "#claimed": "claimed"}


class DynamoKeyStore(OnTable):
    """``KeyStore`` over the idempotency table: 1 WRU a keyed request (the item is about 300 bytes)."""

    setting = "idempotency_table"

    def take(self, key: str, record: KeyRecord, *, expires_at_s: int,
             now_ms: int) -> KeyRecord | Stored | None:
        for _ in range(2):  # a live record that expires between the put and the read is taken again
            try:
                self.client.put_item(
                    TableName=self.table_name, Item=_item(key, record, expires_at_s),  # 1 WRU
                    ConditionExpression=_TAKE_CONDITION,
                    ExpressionAttributeNames=_TAKE_NAMES,
                    ExpressionAttributeValues={
                        ":now": {"N": str(now_ms // 1000)}, ":now_ms": {"N": str(now_ms)},
                        ":inprogress": {"S": IN_PROGRESS}},
                    ReturnValuesOnConditionCheckFailure="ALL_OLD")
                return None
            except (ClientError, BotoCoreError) as exc:
                if not isinstance(exc, ClientError) or not is_conditional_failure(exc):
                    raise translate(exc, "take an Idempotency-Key") from exc
                returned: dict[str, Any] | None = exc.response.get("Item")  # type: ignore[assignment]
                old = returned or self._read(key)
            if old:
                return parse(old)
        raise StoreError(f"the Idempotency-Key record {record_key(key)} changed under two writes in a row")

    def claim(self, key: str, record: KeyRecord) -> bool:
        return conditional("claim an Idempotency-Key", lambda: self.client.update_item(
            TableName=self.table_name, Key={"id": {"S": record_key(key)}},
            UpdateExpression="SET #claimed = :t", ConditionExpression=_SAME, ExpressionAttributeNames=_NAMES,
            ExpressionAttributeValues={**_values(record), ":t": {"BOOL": True}}))

    def release(self, key: str, record: KeyRecord) -> bool:
        return conditional("release an Idempotency-Key", lambda: self.client.delete_item(
            TableName=self.table_name, Key={"id": {"S": record_key(key)}},
            ConditionExpression=f"{_SAME} AND attribute_not_exists(#claimed)",
            ExpressionAttributeNames=_NAMES, ExpressionAttributeValues=_values(record)))

    def _read(self, key: str) -> dict[str, Any] | None:
        try:
            found = self.client.get_item(TableName=self.table_name, Key={"id": {"S": record_key(key)}},
                                         ConsistentRead=True)
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, "read an Idempotency-Key") from exc
        item: dict[str, Any] | None = found.get("Item")
        return item


def _values(record: KeyRecord) -> dict[str, Any]:
    return {":at": {"N": str(record.accepted_at_ms)}, ":seed": {"S": record.seed}}


def _item(key: str, record: KeyRecord, expires_at_s: int) -> dict[str, Any]:
    return {"id": {"S": record_key(key)}, "expiration": {"N": str(expires_at_s)},
            "status": {"S": IN_PROGRESS},
            "v": {"N": str(RECORD_FORMAT)}, "validation": {"S": record.fingerprint},
            "at": {"N": str(record.accepted_at_ms)}, "kid": {"S": record.key_id}, "seed": {"S": record.seed},
            "until": {"N": str(record.until_ms)}}


def parse(item: dict[str, Any]) -> KeyRecord | Stored:
    """The record ``item`` holds; a malformed one is a ``StoreError`` (only gateways write the table)."""
    try:
        if "v" not in item:
            return _powertools(item)
        return KeyRecord(item["validation"]["S"], int(item["at"]["N"]), item["kid"]["S"], item["seed"]["S"],
                         int(item["until"]["N"]), bool(item.get("claimed", {}).get("BOOL", False)))
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(f"a malformed Idempotency-Key record {item.get('id')}: {exc!r}") from exc


def _powertools(item: dict[str, Any]) -> Stored:
    fingerprint = item.get("validation", {}).get("S")
    if item["status"]["S"] == COMPLETED:
        response = json.loads(item["data"]["S"])
        if not isinstance(response, dict):
            raise ValueError("its answer is not an object")
        return Stored(fingerprint, response, None)
    until = item.get("in_progress_expiration", {}).get("N")
    return Stored(fingerprint, None, None if until is None else int(until))
