"""The jobs table's plumbing: request building, conditional updates and reading a record.

One ``ItemTable`` is handed to each part of the store (``jobs.DynamoJobStore`` builds them):
the token authority (``grants.py``), the reads (``reads.py``), the fenced writes of a lease
holder (``leases.py``), the lifecycle writes made outside a lease (``lifecycle.py``) and the
family writes (``families.py``).
Conditional-check failures come back as the item as it was (``ALL_OLD``), never as
exceptions: each caller classifies them. The item codec is ``codec.py``.

Every item written here carries the format of the code that last wrote it (``format_version``,
``sluice.core.formats.ITEM``; none: written before issue 29), set by each update's SET and each put.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from sluice.backends.dynamodb.codec import NAMES, N, S, decode_record
from sluice.backends.dynamodb.errors import (
    conditional,
    is_conditional_failure,
    old_item,
    translate,
    translated,
)
from sluice.backends.dynamodb.results import job_result_key
from sluice.core import formats
from sluice.core.clock import wall_ms
from sluice.core.models import JobRecord
from sluice.core.ports import ResultSink

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

_PLACEHOLDER = re.compile(r"[#:][A-Za-z0-9_]+")
_SET = re.compile(r"(?:^|(?<=\s))SET\s+")  # an update expression's SET clause
FORMAT_SET = "#fv = :fv"  # first in an update's SET (``ItemTable.request``)


class ItemTable:
    """The jobs table ``table`` on ``client``: requests, conditional updates, reads and records.

    ``results``: where large results are kept (read back by ``record``); ``retention_days``:
    how long an ended job's item stays (its ``expires_at``)."""

    def __init__(self, client: DynamoDBClient, table: str, *, results: ResultSink | None = None,
                 retention_days: int = 14, now_ms: Callable[[], int] = wall_ms) -> None:
        self.client, self.table, self.results = client, table, results
        self.retention_s = retention_days * 86_400
        self.now_ms = now_ms

    # -- requests ---------------------------------------------------------------------------

    def request(self, job_id: str, *, update: str | None = None, condition: str | None = None,
                values: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
        """A request with only the placeholders its expressions use (DynamoDB rejects unused ones)."""
        if update and _SET.search(update):
            update = _SET.sub(lambda m: f"{m.group(0)}{FORMAT_SET}, ", update, count=1)
            values = {**(values or {}), ":fv": N(formats.ITEM)}
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

    def update(self, operation: str, request: dict[str, Any]) -> tuple[dict[str, Any] | None, bool]:
        """(attributes returned, True) on success; (old item, False) if the condition failed."""
        try:
            response = self.client.update_item(**request)
        except ClientError as exc:
            if is_conditional_failure(exc):
                old = old_item(exc)
                # ALL_OLD is empty when there is no item; a read confirms it (and covers
                # emulators that omit the item).
                return old if old is not None else self.read(request["Key"]["job_id"]["S"]), False
            raise translate(exc, operation) from exc
        except BotoCoreError as exc:
            raise translate(exc, operation) from exc
        return dict(response.get("Attributes") or {}), True

    def put_new(self, operation: str, item: dict[str, Any]) -> bool:
        """Create ``item`` unless an item with its key exists: True if written, False if not."""
        return conditional(operation, lambda: self.client.put_item(
            TableName=self.table, Item={**item, "format_version": N(formats.ITEM)},
            ConditionExpression="attribute_not_exists(job_id)"))

    def read(self, job_id: str) -> dict[str, Any] | None:
        with translated("get_item"):
            response = self.client.get_item(TableName=self.table, Key={"job_id": S(job_id)},
                                            ConsistentRead=True)
        item = response.get("Item")
        return dict(item) if item else None

    def finish_values(self, now: int) -> dict[str, Any]:
        return {":now": N(now), ":exp": N(now // 1000 + self.retention_s)}

    def record(self, item: dict[str, Any], *, load_result: bool = True) -> JobRecord:
        results = self.results if load_result else None
        if results is None:
            return decode_record(item, None)
        job_id, bucket = str(item.get("job_id", {}).get("S", "")), getattr(results, "bucket", None)

        def load(ref: str) -> bytes:  # the job's own result only, whatever result_ref says
            job_result_key(ref, job_id, bucket if isinstance(bucket, str) else None)
            return results.get(ref)

        return decode_record(item, load)
