"""The jobs table's plumbing: request building, conditional updates and reading a record.

Shared by the token authority (``jobs.py``), the fenced writes of a lease holder
(``leases.py``) and the lifecycle writes made outside a lease (``lifecycle.py``).
Conditional-check failures come back as the item as it was (``ALL_OLD``), never as
exceptions: each caller classifies them. The item codec is ``codec.py``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from sluice.backends.dynamodb.codec import NAMES, N, S, decode_record
from sluice.backends.dynamodb.errors import is_conditional_failure, old_item, translate, translated
from sluice.core.models import JobRecord
from sluice.core.ports import ResultSink

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

_PLACEHOLDER = re.compile(r"[#:][A-Za-z0-9_]+")


class ItemTable:
    """The jobs table's plumbing; ``DynamoJobStore`` sets these attributes."""

    _db: DynamoDBClient
    table: str
    retention_s: int
    _results: ResultSink | None
    _now_ms: Callable[[], int]

    # -- requests ---------------------------------------------------------------------------

    def _request(self, job_id: str, *, update: str | None = None, condition: str | None = None,
                 values: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
        """A request with only the placeholders its expressions use (DynamoDB rejects unused ones)."""
        used = set(_PLACEHOLDER.findall(" ".join(e for e in (update, condition) if e)))
        request: dict[str, Any] = {"TableName": self.table, "Key": {"job_id": S(job_id)}, **extra}
        if update:
            request["UpdateExpression"] = update
        if condition:
            request["ConditionExpression"] = condition
            request["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        names = {k: v for k, v in NAMES.items() if k in used}
        if names:
            request["ExpressionAttributeNames"] = names
        vals = {k: v for k, v in (values or {}).items() if k in used}
        if vals:
            request["ExpressionAttributeValues"] = vals
        return request

    def _update(self, operation: str, request: dict[str, Any]) -> tuple[dict[str, Any] | None, bool]:
        """(attributes returned, True) on success; (old item, False) if the condition failed."""
        try:
            response = self._db.update_item(**request)
        except ClientError as exc:
            if is_conditional_failure(exc):
                old = old_item(exc)
                # ALL_OLD is empty when there is no item; a read confirms it (and covers
                # emulators that omit the item).
                return old if old is not None else self._read(request["Key"]["job_id"]["S"]), False
            raise translate(exc, operation) from exc
        except BotoCoreError as exc:
            raise translate(exc, operation) from exc
        return dict(response.get("Attributes") or {}), True

    def _put_new(self, operation: str, item: dict[str, Any]) -> bool:
        """Create ``item`` unless an item with its key exists: True if written, False if not."""
        try:
            self._db.put_item(TableName=self.table, Item=item,
                              ConditionExpression="attribute_not_exists(job_id)")
        except ClientError as exc:
            if is_conditional_failure(exc):
                return False
            raise translate(exc, operation) from exc
        except BotoCoreError as exc:
            raise translate(exc, operation) from exc
        return True

    def _read(self, job_id: str) -> dict[str, Any] | None:
        with translated("get_item"):
            response = self._db.get_item(TableName=self.table, Key={"job_id": S(job_id)}, ConsistentRead=True)
        item = response.get("Item")
        return dict(item) if item else None

    def _finish_values(self, now: int) -> dict[str, Any]:
        return {":now": N(now), ":exp": N(now // 1000 + self.retention_s)}

    def _record(self, item: dict[str, Any], *, load_result: bool = True) -> JobRecord:
        return decode_record(item, self._results.get if load_result and self._results is not None else None)
