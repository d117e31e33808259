"""Fencing beyond the jobs table: a handler's own DynamoDB writes, and HTTP calls.

A worker that lost its lease without noticing (GC pause, frozen VM) must not
change anything, not only our result. ``FencedTable`` makes every put, update and
delete a two-item ``TransactWriteItems``: a ``ConditionCheck`` that the job's item
in the jobs table still carries the caller's token with status ``leased`` (or
``succeeded``: the current holder of a re-run after a crash before ack), plus the
write itself. DynamoDB applies both or neither, so a write from a stale token is
refused even when the newer holder has not written anything yet. A plain
conditional write cannot do this: its condition may only read the item it writes.

The same module holds what every fenced refusal shares: one metric and one log
line carrying both tokens (``Fence.stale``), and the classification of the
jobs item returned with a failed condition (``classify``).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from sluice.backends.aws.metrics import NullMetrics
from sluice.backends.dynamodb.codec import item_int, item_str
from sluice.backends.dynamodb.errors import WriteConditionFailed, error_code, translate
from sluice.core.bus import EventBus, FencedWrite, timed
from sluice.core.errors import (
    BackendUnavailable,
    InvalidInput,
    JobCancelled,
    LeaseLost,
    SluiceError,
    StaleToken,
    StoreError,
)
from sluice.core.fencing import IDEMPOTENCY_HEADER as IDEMPOTENCY_HEADER  # importable from here, as before
from sluice.core.fencing import TOKEN_HEADER as TOKEN_HEADER
from sluice.core.fencing import fence_headers
from sluice.core.models import JobState, validate_job_id, validate_token
from sluice.core.ports import Metrics

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

log = logging.getLogger("sluice.backends.dynamodb")

REJECTED_METRIC = "FencedWriteRejected"
# Cancellation reasons that mean "not now" (DynamoDB's codes inside TransactionCanceledException).
RETRYABLE_REASONS = frozenset({"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded",
                               "RequestLimitExceeded", "TransactionInProgress"})


class Fence:
    """Turns a refusal into a typed error, counted and logged with both tokens."""

    def __init__(self, metrics: Metrics | None = None) -> None:
        self.metrics: Metrics = metrics or NullMetrics()

    def stale(self, operation: str, job_id: str, mine: int, current: int) -> StaleToken:
        try:
            self.metrics.count(REJECTED_METRIC, 1, operation=operation)
        except Exception:  # a metrics outage must not turn a refusal into a crash
            log.exception("could not count fenced rejection")
        log.warning("fenced write rejected: token %d is stale, current is %d (%s %s)", mine, current,
                    operation, job_id,
                    extra={"job_id": job_id, "operation": operation, "token": mine, "current_token": current})
        return StaleToken(mine=mine, current=current, job_id=job_id, operation=operation)


def classify(fence: Fence, operation: str, job_id: str, mine: int, old: Mapping[str, Any] | None,
             otherwise: Callable[[str], SluiceError]) -> SluiceError:
    """Why a write fenced on ``token = mine AND status = leased`` was refused.

    ``old`` is the jobs item as DynamoDB saw it (ALL_OLD). A newer token always wins
    the explanation: that is the case fencing exists for and the one we count.
    """
    if old is None:
        return StoreError(f"{operation}: job {job_id} has no item in the jobs table; no token was granted",
                          job_id=job_id, operation=operation)
    current = item_int(old, "token")
    status = item_str(old, "status")
    if current > mine:
        return fence.stale(operation, job_id, mine, current)
    if status == JobState.CANCELLED:
        return JobCancelled(f"job {job_id} was cancelled", job_id=job_id, token=mine)
    if current < mine:
        return StoreError(f"{operation}: token {mine} was never granted for {job_id} (current is {current})",
                          job_id=job_id, mine=mine, current=current)
    return otherwise(f"{operation}: token {mine} of {job_id} is current but the job is {status}")


def fencing_headers(job_id: str, token: int, step: str | None = None) -> dict[str, str]:
    """Headers for an HTTP service that should refuse stale workers too (``sluice.core.fencing``;
    a handler's ``ctx.http`` sends them itself).

    ``Idempotency-Key`` is stable across every attempt of the job (the job id, plus ``step``, the
    call's resource, when a handler makes several distinct calls), so a retry by a newer holder
    dedupes against a call a stale holder already made. ``Sluice-Job-Id`` and
    ``Sluice-Fencing-Token`` let the service refuse any request whose token is lower than the
    highest it has seen for that job (the ``sluice_fence`` middleware).
    """
    return fence_headers(job_id, token, step)


def _plain(value: Any) -> Any:
    """Floats become Decimal, which is what the DynamoDB serializer accepts."""
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


class FencedTable:
    """Writes to ``table_name`` that succeed only while ``token`` is the job's current token.

    Items, keys and ``values`` are plain Python (str, int, float, bool, None, bytes,
    lists, dicts, sets), converted with boto3's serializer. ``condition``, ``names``
    and ``values`` add the caller's own condition; if it is false the write raises
    ``WriteConditionFailed``. A stale token raises ``StaleToken`` (counted and logged),
    a cancelled job ``JobCancelled``, a released or finished lease ``LeaseLost``.
    """

    def __init__(self, client: DynamoDBClient, table_name: str, job_id: str, token: int, *,
                 jobs_table: str = "sluice-jobs", metrics: Metrics | None = None,
                 events: EventBus) -> None:
        if not isinstance(table_name, str) or not table_name:
            raise InvalidInput(f"invalid table name {table_name!r}")
        if table_name == jobs_table:
            # A transaction may not touch one item twice, and the jobs table is ours.
            raise InvalidInput("FencedTable cannot write to the jobs table itself")
        self._client = client
        self.table_name = table_name
        self.job_id = validate_job_id(job_id)
        self.token = validate_token(token)
        self.jobs_table = jobs_table
        self._fence = Fence(metrics)
        self._events = events  # a FencedWrite per write: the worker's drain's bus
        # Imported here, not with the module: the handlers module imports this one (fencing_headers)
        # at a worker's init, and boto3 would double that import; the first job needs it anyway.
        from boto3.dynamodb.types import TypeSerializer

        self._ser = TypeSerializer()
        # The last write whose outcome is unknown (it raised BackendUnavailable) and its request
        # token: the same write sent next is the caller's retry and reuses the token, so DynamoDB
        # applies it once (within its 10-minute idempotency window). Any other write gets a fresh one.
        self._unsure: tuple[str, str] | None = None
        self._lock = threading.Lock()

    def put_item(self, item: Mapping[str, Any], *, condition: str | None = None,
                 names: Mapping[str, str] | None = None, values: Mapping[str, Any] | None = None) -> None:
        self._observed("put", lambda: self._write("Put", "put_item", {
            "TableName": self.table_name, "Item": self._encode(item)}, condition, names, values))

    def update_item(self, key: Mapping[str, Any], update: str, *, condition: str | None = None,
                    names: Mapping[str, str] | None = None, values: Mapping[str, Any] | None = None) -> None:
        self._observed("update", lambda: self._write("Update", "update_item", {
            "TableName": self.table_name, "Key": self._encode(key), "UpdateExpression": update},
            condition, names, values))

    def delete_item(self, key: Mapping[str, Any], *, condition: str | None = None,
                    names: Mapping[str, str] | None = None, values: Mapping[str, Any] | None = None) -> None:
        self._observed("delete", lambda: self._write("Delete", "delete_item", {
            "TableName": self.table_name, "Key": self._encode(key)}, condition, names, values))

    def _observed(self, kind: str, write: Callable[[], None]) -> None:
        timed(self._events, write, FencedWrite,
              {"job": self.job_id, "token": self.token, "table": self.table_name, "kind": kind},
              ok=lambda _r: "written")

    def _encode(self, item: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(item, Mapping) or not item:
            raise InvalidInput("item and key must be non-empty mappings")
        try:
            return {str(k): self._ser.serialize(_plain(v)) for k, v in item.items()}
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"value cannot be stored in DynamoDB: {exc}") from exc

    def _check(self) -> dict[str, Any]:
        return {"ConditionCheck": {
            "TableName": self.jobs_table,
            "Key": {"job_id": {"S": self.job_id}},
            # succeeded: the current holder of a re-run after a crash before ack, until that
            # re-run ends without a result (ended_token, leases.LeaseWrites._end_rerun).
            "ConditionExpression": "#tok = :mine AND (#st = :leased OR (#st = :succeeded AND "
                                   "(attribute_not_exists(#end) OR #end < :mine)))",
            "ExpressionAttributeNames": {"#tok": "token", "#st": "status", "#end": "ended_token"},
            "ExpressionAttributeValues": {":mine": {"N": str(self.token)}, ":leased": {"S": JobState.LEASED},
                                          ":succeeded": {"S": JobState.SUCCEEDED}},
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }}

    def _write(self, kind: str, operation: str, op: dict[str, Any], condition: str | None,
               names: Mapping[str, str] | None, values: Mapping[str, Any] | None) -> None:
        if condition is not None:
            op["ConditionExpression"] = condition
        if names:
            op["ExpressionAttributeNames"] = dict(names)
        if values:
            op["ExpressionAttributeValues"] = self._encode(values)
        items: list[Any] = [self._check(), {kind: op}]
        signature = repr((kind, op))
        request_token = self._request_token(signature)
        try:
            # The request token makes a retry of a transaction that had landed (timeout after
            # commit) a no-op instead of a second application: botocore's own retries, and the
            # caller's retry after BackendUnavailable, which sends the same write again.
            self._client.transact_write_items(TransactItems=items, ClientRequestToken=request_token)
        except ClientError as exc:
            error = self._refusal(operation, exc)
            self._outcome(signature, request_token, known=not isinstance(error, BackendUnavailable))
            raise error from exc
        except BotoCoreError as exc:
            self._outcome(signature, request_token, known=False)
            raise translate(exc, f"fenced.{operation}") from exc
        self._outcome(signature, request_token, known=True)

    def _request_token(self, signature: str) -> str:
        """The token of the same write whose outcome is unknown (a retry), else a fresh one."""
        with self._lock:
            if self._unsure is not None and self._unsure[0] == signature:
                return self._unsure[1]
        return uuid.uuid4().hex

    def _outcome(self, signature: str, request_token: str, *, known: bool) -> None:
        """Remember a write that may have landed (BackendUnavailable); forget it once known."""
        with self._lock:
            if not known:
                self._unsure = (signature, request_token)
            elif self._unsure is not None and self._unsure[1] == request_token:
                self._unsure = None

    def _refusal(self, operation: str, exc: ClientError) -> SluiceError:
        if error_code(exc) != "TransactionCanceledException":
            return translate(exc, f"fenced.{operation}")
        reasons: list[dict[str, Any]] = exc.response.get("CancellationReasons", [])  # type: ignore[assignment]
        codes = [str(r.get("Code", "None")) for r in reasons]
        if codes and codes[0] == "ConditionalCheckFailed":
            return classify(self._fence, f"fenced.{operation}", self.job_id, self.token,
                            reasons[0].get("Item"),
                            lambda msg: LeaseLost(msg, job_id=self.job_id, token=self.token))
        if len(codes) > 1 and codes[1] == "ConditionalCheckFailed":
            return WriteConditionFailed(
                f"{operation} on {self.table_name}: the write's own condition is false",
                table=self.table_name, job_id=self.job_id)
        if RETRYABLE_REASONS.intersection(codes):
            # A conflicting transaction, or throttling reported per item: not now, not wrong.
            return BackendUnavailable(f"{operation}: cancelled for now: {codes}", reasons=codes)
        return StoreError(f"{operation} on {self.table_name} cancelled: {codes}", reasons=codes)


class FencedTables:
    """Hands out ``FencedTable``s fenced on the jobs table ``jobs_table`` (``ctx.fenced_table``)."""

    def __init__(self, client: DynamoDBClient, jobs_table: str, fence: Fence) -> None:
        self._client, self.jobs_table, self._fence = client, jobs_table, fence

    def fenced_table(self, table_name: str, job_id: str, token: int, *,
                     events: EventBus) -> FencedTable:
        """A handler's own table, fenced on this job's token in the jobs table."""
        return FencedTable(self._client, table_name, job_id, token, jobs_table=self.jobs_table,
                           metrics=self._fence.metrics, events=events)
