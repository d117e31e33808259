"""Issue 13 on the store alone (in-process moto): the redrive generation, the fenced settle
write, the ended re-run token, and FencedTable's retries (throttling, idempotent retry)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, ReadTimeoutError
from moto import mock_aws

from sluice.backends.dynamodb import tables
from sluice.backends.dynamodb.fenced import FencedTable
from sluice.backends.dynamodb.jobs import DynamoJobStore
from sluice.core.bus import EventBus
from sluice.core.endings import Settled
from sluice.core.errors import AlreadyFinished, BackendUnavailable, InvalidInput, JobNotFound, LeaseLost
from sluice.core.models import JobState, SettleEntry, WriteOutcome


@pytest.fixture(scope="module")
def db() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("dynamodb", region_name="us-east-1")


@pytest.fixture
def env(db: Any) -> Iterator[tuple[DynamoJobStore, str]]:
    suffix = uuid.uuid4().hex[:8]
    jobs, side = f"jobs-{suffix}", f"side-{suffix}"
    tables.create_jobs_table(db, jobs)
    db.create_table(TableName=side, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                    AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                    BillingMode="PAY_PER_REQUEST")
    yield DynamoJobStore(db, jobs), side
    db.delete_table(TableName=jobs)
    db.delete_table(TableName=side)


@pytest.fixture
def store(env: tuple[DynamoJobStore, str]) -> DynamoJobStore:
    return env[0]


def ended(job_id: str, gen: int | None) -> SettleEntry:
    return SettleEntry(job_id=job_id, queue="q", status=JobState.DEAD, ended_at_ms=1, redrive_gen=gen)


# -- bug 4: a final item is left only for a newer redrive generation -----------------------------------


@pytest.mark.parametrize("final", ["failed", "dead"])
def test_grant_leaves_a_final_item_only_for_a_newer_redrive_generation(store: DynamoJobStore,
                                                                       final: str) -> None:
    t1 = store.grant("j", "q", "A")
    store.record_failure("j", t1, "no", final)
    with pytest.raises(AlreadyFinished) as info:
        store.grant("j", "q", "B")  # the lease lapsed after the verdict: not a redrive
    assert info.value.details["status"] == final
    with pytest.raises(AlreadyFinished):
        store.grant("j", "q", "B", 1)  # a generation the item never issued
    gen = store.redrive("j")
    assert gen == 1 and store.get_job("j").status.value == final  # the status stays until the grant
    t2 = store.grant("j", "q", "B", gen)
    assert t2 == t1 + 1 and store.get_job("j").status is JobState.LEASED
    store.record_failure("j", t2, "no again", final)
    with pytest.raises(AlreadyFinished):
        store.grant("j", "q", "C", gen)  # that generation has run
    assert store.grant("j", "q", "C", store.redrive("j")) == t2 + 1


def test_grant_of_an_open_item_ignores_the_generation(store: DynamoJobStore) -> None:
    store.grant("j", "q", "A")
    assert store.grant("j", "q", "B", 0) == 2  # e.g. replayed after Redis lost data
    with pytest.raises(InvalidInput):
        store.grant("j", "q", "B", -1)
    with pytest.raises(InvalidInput):
        store.grant("j", "q", "B", True)  # type: ignore[arg-type]


# -- bug 5: redrive refuses what would restart the token -----------------------------------------------


def test_redrive_refuses_a_missing_item_and_a_cancelled_or_succeeded_one(store: DynamoJobStore) -> None:
    with pytest.raises(JobNotFound, match="expired"):
        store.redrive("gone")
    store.cancel_unrecorded("c", "q", "withdrawn")
    with pytest.raises(AlreadyFinished, match="cancelled"):
        store.redrive("c")
    t = store.grant("s", "q", "A")
    store.write_result("s", t, 1)
    with pytest.raises(AlreadyFinished, match="succeeded"):
        store.redrive("s")


def test_redrive_keeps_the_item_and_drops_an_earlier_cancel_request(store: DynamoJobStore) -> None:
    t = store.grant("j", "q", "A")
    store.request_cancel("j")  # answered cancel_requested; then the job dead-lettered anyway
    store.record_failure("j", t, "boom", "dead")
    store.redrive("j")
    item = store.items.read("j")
    assert item is not None and "expires_at" not in item and "cancel_requested" not in item
    assert store.grant("j", "q", "B", 1) == t + 1


# -- bug 2: the settle write is fenced on the generation of the attempt that ended ---------------------


def test_settle_write_lands_only_while_no_newer_generation_was_granted(store: DynamoJobStore) -> None:
    store.grant("j", "q", "A")  # generation 0; its lease expires on the last attempt
    gen = store.redrive("j")
    store.grant("j", "q", "B", gen)  # the redriven run
    assert store.settle_ended(ended("j", 0)) is Settled.MOVED_ON
    assert store.settle_ended(ended("j", None)) is Settled.MOVED_ON  # the older format: generation 0
    assert store.get_job("j").status is JobState.LEASED
    assert store.settle_ended(ended("j", gen)) is Settled.WRITTEN  # the redriven run's own ending
    assert store.get_job("j").status is JobState.DEAD


# -- minor: a re-run of a succeeded job that ends without a result retires its token ------------------


def test_a_rerun_that_ended_without_a_result_cannot_write_side_effects(env: tuple[DynamoJobStore, str],
                                                                      db: Any) -> None:
    store, side = env
    first = store.grant("j", "q", "A")
    assert store.write_result("j", first, {"ok": 1}) is WriteOutcome.WRITTEN
    rerun = store.grant("j", "q", "B")  # A crashed before its ack
    table = store.fenced_table(side, "j", rerun, events=EventBus())
    table.put_item({"pk": "before"})  # the re-run's holder may write while it runs
    for _ in range(2):  # the hard timeout's failure record, and its retry
        with pytest.raises(AlreadyFinished):
            store.record_failure("j", rerun, "hard timeout", "queued")
    with pytest.raises(LeaseLost):
        table.put_item({"pk": "abandoned thread"})
    assert {i["pk"]["S"] for i in db.scan(TableName=side)["Items"]} == {"before"}
    assert store.get_job("j").result == {"ok": 1}


# -- minor: FencedTable retries ------------------------------------------------------------------------


class Flaky:
    """A DynamoDB client whose next transaction lands and then times out on the way back, and
    which applies a request token once, as DynamoDB does within its idempotency window."""

    def __init__(self, db: Any) -> None:
        self.db = db
        self.tokens: list[str] = []
        self.lose_next_response = False
        self.committed: set[str] = set()

    def transact_write_items(self, **kw: Any) -> Any:
        token = kw["ClientRequestToken"]
        self.tokens.append(token)
        if token in self.committed:
            return {}
        response = self.db.transact_write_items(**kw)
        self.committed.add(token)
        if self.lose_next_response:
            self.lose_next_response = False
            raise ReadTimeoutError(endpoint_url="http://dynamodb")
        return response


def test_a_retry_after_backend_unavailable_applies_a_non_idempotent_update_once(
        env: tuple[DynamoJobStore, str], db: Any) -> None:
    store, side = env
    db.put_item(TableName=side, Item={"pk": {"S": "balance"}, "amount": {"N": "100"}})
    token = store.grant("j", "q", "A")
    client = Flaky(db)
    table = FencedTable(client, side, "j", token, jobs_table=store.table, events=EventBus())

    def charge() -> None:
        table.update_item({"pk": "balance"}, "SET amount = amount - :a", values={":a": 10})

    client.lose_next_response = True
    with pytest.raises(BackendUnavailable):
        charge()
    charge()  # the retry docs/store.md calls safe
    assert client.tokens[0] == client.tokens[1]
    assert db.get_item(TableName=side, Key={"pk": {"S": "balance"}})["Item"]["amount"]["N"] == "90"
    charge()  # a new charge after a known outcome is a new write
    assert client.tokens[2] != client.tokens[1]
    assert db.get_item(TableName=side, Key={"pk": {"S": "balance"}})["Item"]["amount"]["N"] == "80"


@pytest.mark.parametrize("reason", ["ThrottlingError", "ProvisionedThroughputExceeded",
                                    "TransactionConflict"])
def test_throttling_inside_a_cancelled_transaction_stays_retryable(env: tuple[DynamoJobStore, str],
                                                                   reason: str) -> None:
    store, side = env
    token = store.grant("j", "q", "A")

    class Throttled:
        def transact_write_items(self, **kw: Any) -> Any:
            raise ClientError({"Error": {"Code": "TransactionCanceledException", "Message": "cancelled"},
                               "CancellationReasons": [{"Code": "None"}, {"Code": reason}]},
                              "TransactWriteItems")

    table = FencedTable(Throttled(), side, "j", token, jobs_table=store.table, events=EventBus())  # type: ignore[arg-type]
    with pytest.raises(BackendUnavailable):
        table.put_item({"pk": "x"})
