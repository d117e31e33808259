"""FencedTable, fencing headers and botocore error translation, on in-process moto."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError
from moto import mock_aws

from sluice.backends.dynamodb import tables
from sluice.backends.dynamodb.errors import WriteConditionFailed, translate, translated
from sluice.backends.dynamodb.fenced import FencedTable, fencing_headers
from sluice.backends.dynamodb.jobs import DynamoJobStore
from sluice.core.bus import EventBus
from sluice.core.errors import (
    BackendUnavailable,
    InvalidInput,
    JobCancelled,
    LeaseLost,
    StaleToken,
    StoreError,
)


class CountingMetrics:
    def __init__(self) -> None:
        self.names: list[str] = []

    def count(self, name: str, value: float = 1, **dimensions: str) -> None:
        self.names.append(f"{name}:{dimensions.get('operation')}")


@pytest.fixture(scope="module")
def db() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("dynamodb", region_name="us-east-1")


@pytest.fixture
def env(db: Any) -> Iterator[tuple[DynamoJobStore, str, CountingMetrics]]:
    suffix = uuid.uuid4().hex[:8]
    jobs, side = f"jobs-{suffix}", f"side-{suffix}"
    tables.create_jobs_table(db, jobs)
    db.create_table(TableName=side, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                    AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                    BillingMode="PAY_PER_REQUEST")
    metrics = CountingMetrics()
    yield DynamoJobStore(db, jobs, metrics=metrics), side, metrics
    db.delete_table(TableName=jobs)
    db.delete_table(TableName=side)


def side_items(db: Any, side: str) -> dict[str, dict[str, Any]]:
    return {i["pk"]["S"]: i for i in db.scan(TableName=side)["Items"]}


def test_current_token_writes_stale_token_is_refused(
        db: Any, env: tuple[DynamoJobStore, str, CountingMetrics]) -> None:
    store, side, metrics = env
    a = store.grant("j1", "q", "A")
    fa = store.fenced_table(side, "j1", a, events=EventBus())
    fa.put_item({"pk": "x", "n": 1, "f": 1.5, "tags": ["a"]})
    fa.update_item({"pk": "x"}, "SET n = n + :one", values={":one": 1})
    fa.put_item({"pk": "gone"})
    fa.delete_item({"pk": "gone"})
    assert side_items(db, side)["x"]["n"] == {"N": "2"} and "gone" not in side_items(db, side)

    b = store.grant("j1", "q", "B")  # B has not written anything yet: A is still refused
    for attempt in (lambda: fa.put_item({"pk": "x", "n": 99}),
                    lambda: fa.update_item({"pk": "x"}, "SET n = :v", values={":v": 99}),
                    lambda: fa.delete_item({"pk": "x"})):
        with pytest.raises(StaleToken) as info:
            attempt()
        assert (info.value.mine, info.value.current) == (a, b)
    assert side_items(db, side)["x"]["n"] == {"N": "2"}
    assert metrics.names == ["FencedWriteRejected:fenced.put_item", "FencedWriteRejected:fenced.update_item",
                             "FencedWriteRejected:fenced.delete_item"]
    store.fenced_table(side, "j1", b, events=EventBus()).update_item({"pk": "x"}, "SET n = :v",
                                                        values={":v": 3})
    assert side_items(db, side)["x"]["n"] == {"N": "3"}


def test_own_condition_released_cancelled_and_unknown(
        db: Any, env: tuple[DynamoJobStore, str, CountingMetrics]) -> None:
    store, side, _ = env
    t = store.grant("j1", "q", "A")
    f = store.fenced_table(side, "j1", t, events=EventBus())
    f.put_item({"pk": "x"}, condition="attribute_not_exists(pk)")
    with pytest.raises(WriteConditionFailed):
        f.put_item({"pk": "x", "v": 2}, condition="attribute_not_exists(pk)")
    with pytest.raises(WriteConditionFailed):
        f.delete_item({"pk": "x"}, condition="#v = :v", names={"#v": "v"}, values={":v": 7})
    store.release("j1", t)
    with pytest.raises(LeaseLost) as lost:
        f.put_item({"pk": "y"})
    assert not isinstance(lost.value, StaleToken)
    t2 = store.grant("j1", "q", "B")
    store.request_cancel("j1")
    store.record_failure("j1", t2, "cancelled", "cancelled")
    with pytest.raises(JobCancelled):
        store.fenced_table(side, "j1", t2, events=EventBus()).put_item({"pk": "z"})
    with pytest.raises(StoreError):
        store.fenced_table(side, "never-granted", 1, events=EventBus()).put_item({"pk": "w"})
    assert set(side_items(db, side)) == {"x"}


def test_fenced_table_rejects_bad_input_before_writing(
        db: Any, env: tuple[DynamoJobStore, str, CountingMetrics]) -> None:
    store, side, _ = env
    t = store.grant("j1", "q", "A")
    for job_id, token in (("", t), ("a\nb", t), ("j1", 0), ("j1", -3), ("j1", True), ("j1", "1")):
        with pytest.raises(InvalidInput):
            store.fenced_table(side, job_id, token, events=EventBus())  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        store.fenced_table(store.table, "j1", t, events=EventBus())
    f = store.fenced_table(side, "j1", t, events=EventBus())
    for bad in ({}, {"pk": object()}, {"pk": "x", "c": 1j}):
        with pytest.raises(InvalidInput):
            f.put_item(bad)
    assert side_items(db, side) == {}


def test_fenced_table_direct_construction(db: Any, env: tuple[DynamoJobStore, str, CountingMetrics]) -> None:
    store, side, _ = env
    t = store.grant("j1", "q", "A")
    FencedTable(db, side, "j1", t, jobs_table=store.table, events=EventBus()).put_item({"pk": "p"})
    with pytest.raises(StoreError):  # wrong jobs table: the check cannot pass
        FencedTable(db, side, "j1", t, jobs_table="no-such-table", events=EventBus()).put_item({"pk": "q"})
    assert set(side_items(db, side)) == {"p"}


def test_fencing_headers() -> None:
    assert fencing_headers("job-1", 34) == {"Sluice-Fencing-Token": "34", "Idempotency-Key": "job-1",
                                            "Sluice-Job-Id": "job-1"}  # the job's fence key (issue 31)
    assert fencing_headers("job-1", 35, step="charge") == {
        "Sluice-Fencing-Token": "35", "Idempotency-Key": "job-1:charge", "Sluice-Job-Id": "job-1",
        "Sluice-Fence-Resource": "charge"}
    for bad in ((" ", 1, None), ("j", 0, None), ("j", True, None), ("j", 1, ""), ("j", 1, "a\r\nb"),
                ("j", 1, "x" * 65), ("j", 1, "é")):
        with pytest.raises(InvalidInput):
            fencing_headers(*bad)  # type: ignore[arg-type]


def _client_error(code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "m"}}, "UpdateItem")


@pytest.mark.parametrize(("exc", "expected"), [
    (_client_error("ProvisionedThroughputExceededException"), BackendUnavailable),
    (_client_error("ThrottlingException"), BackendUnavailable),
    (_client_error("InternalServerError"), BackendUnavailable),
    (_client_error("ResourceNotFoundException"), StoreError),
    (_client_error("ValidationException"), StoreError),
    (EndpointConnectionError(endpoint_url="http://x"), BackendUnavailable),
    (ReadTimeoutError(endpoint_url="http://x"), BackendUnavailable),
    (RuntimeError("odd"), StoreError),
])
def test_translate(exc: Exception, expected: type[Exception]) -> None:
    err = translate(exc, "op")
    assert type(err) is expected and "op" in str(err)


def test_translated_context_manager() -> None:
    with pytest.raises(BackendUnavailable), translated("op"):
        raise _client_error("ThrottlingException")
    with pytest.raises(KeyError), translated("op"):  # not botocore: untouched
        raise KeyError("k")
