"""The jobs table's items: request building, conditional updates and reading a record.

Shared by the token authority and the fenced writes (``jobs.py``) and by the writes made
outside a lease (``endings.py``). Conditional-check failures come back as the item as it
was (``ALL_OLD``), never as exceptions: each caller classifies them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from sluice.errors import InvalidInput
from sluice.models import JobRecord, JobState
from sluice.ports import ResultSink
from sluice.store.errors import is_conditional_failure, old_item, translate, translated
from sluice.store.fenced import item_int, item_str

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

# Every attribute goes through a placeholder: status, token, queue and result are
# reserved words or close to it, and one table of aliases keeps expressions legible.
NAMES = {
    "#id": "job_id", "#q": "queue", "#st": "status", "#att": "attempts", "#tok": "token",
    "#own": "lease_owner", "#cr": "created_at_ms", "#up": "updated_at_ms", "#fin": "finished_at_ms",
    "#err": "last_error", "#res": "result", "#ref": "result_ref", "#rt": "result_token",
    "#dig": "result_digest", "#cx": "cancel_requested", "#exp": "expires_at",
    "#rg": "redrive_gen", "#run": "run_gen", "#end": "ended_token",
}
_PLACEHOLDER = re.compile(r"[#:][A-Za-z0-9_]+")
MAX_ERROR_CHARS = 4_000  # keeps a huge traceback from pushing the item towards 400 KB


def S(value: str) -> dict[str, str]:  # DynamoDB's own type letters
    return {"S": value}


def N(value: int) -> dict[str, str]:
    return {"N": str(value)}


def _created(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(f"invalid enqueue time {value!r}: a non-negative integer (ms)")
    return value


def _generation(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 2**53 - 1:
        raise InvalidInput(f"invalid redrive generation {value!r}: an integer >= 0")
    return value


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

    def _read(self, job_id: str) -> dict[str, Any] | None:
        with translated("get_item"):
            response = self._db.get_item(TableName=self.table, Key={"job_id": S(job_id)}, ConsistentRead=True)
        item = response.get("Item")
        return dict(item) if item else None

    def _finish_values(self, now: int) -> dict[str, Any]:
        return {":now": N(now), ":exp": N(now // 1000 + self.retention_s)}

    def _record(self, item: dict[str, Any], *, load_result: bool = True) -> JobRecord:
        result: Any = None
        if (text := item_str(item, "result")) is not None:
            result = json.loads(text)
        ref = item_str(item, "result_ref")
        if ref is not None and load_result and self._results is not None:
            result = json.loads(self._results.get(ref))
        finished = item_int(item, "finished_at_ms", -1)
        return JobRecord(
            job_id=item_str(item, "job_id") or "", queue=item_str(item, "queue") or "",
            status=JobState(item_str(item, "status") or ""), attempts=item_int(item, "attempts"),
            token=item_int(item, "token"), lease_owner=item_str(item, "lease_owner"),
            created_at_ms=item_int(item, "created_at_ms"), updated_at_ms=item_int(item, "updated_at_ms"),
            finished_at_ms=finished if finished >= 0 else None, last_error=item_str(item, "last_error"),
            result=result, result_ref=ref,
            result_token=item_int(item, "result_token", -1) if "result_token" in item else None,
            cancel_requested=bool(item.get("cancel_requested", {}).get("BOOL", False)),
            redrive_gen=item_int(item, "redrive_gen"))

