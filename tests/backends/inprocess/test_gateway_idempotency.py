"""DynamoKeyStore, the idempotency table written once a keyed request (issue 33), over in-process moto.

Each conditional write is checked by the item it leaves. Records of before (Powertools' layout, written
here by Powertools' own DynamoDB layer) are read and answered; and Powertools reading a record of
ours (a rolled-back gateway) refuses to make a second set of jobs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import EndpointConnectionError
from moto import mock_aws

from sluice.backends.dynamodb.idempotency import DynamoKeyStore
from sluice.core.config import Settings
from sluice.core.errors import BackendUnavailable, StoreError
from sluice.core.idempotency import KEY_PREFIX, KeyRecord, Stored, fingerprint, record_key

TABLE = "idem-unit"
NOW = 1_700_000_000_000
DAY_S = 24 * 3600
FP = {"op": "enqueue", "queue": "q", "request": {"payload": 1}}
SCOPED = "arn:aws:sts::123456789012:assumed-role/web-servers/i-0123456789abcdef0|order-1234-welcome-email"


@pytest.fixture
def keys() -> Iterator[DynamoKeyStore]:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(TableName=TABLE, KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
                            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
                            BillingMode="PAY_PER_REQUEST")
        yield DynamoKeyStore(client, TABLE)


def record(at: int = NOW, seed: str = "0a" * 10) -> KeyRecord:
    return KeyRecord(fingerprint(FP["op"], FP["queue"], FP["request"]), at, "Q", seed, at + 29_000)


def item(keys: DynamoKeyStore, key: str = SCOPED) -> dict[str, Any] | None:
    found: dict[str, Any] | None = keys.client.get_item(TableName=TABLE,
                                                        Key={"id": {"S": record_key(key)}}).get("Item")
    return found


def test_a_first_take_writes_one_small_item(keys: DynamoKeyStore) -> None:
    assert keys.take(SCOPED, record(), expires_at_s=NOW // 1000 + DAY_S, now_ms=NOW) is None
    stored = item(keys)
    assert stored is not None and stored["id"]["S"].startswith(f"{KEY_PREFIX}#")
    assert (stored["v"]["N"], stored["status"]["S"], stored["expiration"]["N"]) == (
        "2", "INPROGRESS", str(NOW // 1000 + DAY_S))
    assert "in_progress_expiration" not in stored and "claimed" not in stored
    # DynamoDB bills a write by the item's size, 1 WRU a KB: names and values, a number's digits / 2 + 1.
    size = sum(len(name) + (len(v["S"]) if "S" in v else len(v["N"]) // 2 + 1) for name, v in stored.items())
    assert size < 400


def test_a_live_record_is_returned_not_overwritten(keys: DynamoKeyStore) -> None:
    mine = record()
    keys.take(SCOPED, mine, expires_at_s=NOW // 1000 + DAY_S, now_ms=NOW)
    later = record(NOW + 5_000, "0b" * 10)
    assert keys.take(SCOPED, later, expires_at_s=NOW // 1000 + DAY_S, now_ms=NOW + 5_000) == mine
    assert item(keys)["seed"]["S"] == mine.seed  # type: ignore[index]


def test_an_expired_record_is_taken_afresh(keys: DynamoKeyStore) -> None:
    keys.take(SCOPED, record(), expires_at_s=NOW // 1000 + 10, now_ms=NOW)
    later = record(NOW + 11_000, "0b" * 10)
    assert keys.take(SCOPED, later, expires_at_s=NOW // 1000 + DAY_S, now_ms=NOW + 11_000) is None
    assert item(keys)["seed"]["S"] == later.seed  # type: ignore[index]


def test_claim_marks_the_record_and_stops_its_release(keys: DynamoKeyStore) -> None:
    mine = record()
    keys.take(SCOPED, mine, expires_at_s=NOW // 1000 + DAY_S, now_ms=NOW)
    assert keys.claim(SCOPED, mine)
    assert not keys.release(SCOPED, mine)
    stored = item(keys)
    assert stored is not None and stored["claimed"] == {"BOOL": True}
    assert keys.take(SCOPED, record(NOW + 1, "0c" * 10), expires_at_s=NOW // 1000 + DAY_S,
                     now_ms=NOW + 1) == KeyRecord(mine.fingerprint, NOW, "Q", mine.seed, mine.until_ms, True)


def test_release_deletes_only_its_own_unclaimed_record(keys: DynamoKeyStore) -> None:
    mine = record()
    keys.take(SCOPED, mine, expires_at_s=NOW // 1000 + DAY_S, now_ms=NOW)
    assert not keys.release(SCOPED, record(seed="0d" * 10))  # another request's record
    assert not keys.claim(SCOPED, record(seed="0d" * 10))
    assert item(keys) is not None
    assert keys.release(SCOPED, mine) and item(keys) is None
    assert not keys.release(SCOPED, mine) and not keys.claim(SCOPED, mine)


def powertools_layer(keys: DynamoKeyStore) -> Any:
    from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer

    return DynamoDBPersistenceLayer(table_name=TABLE, boto3_client=keys.client)


def run_as_before(keys: DynamoKeyStore, key: str, fp: dict[str, Any], answer: dict[str, Any],
                  remaining_ms: int = 25_000) -> dict[str, Any]:
    """The gateway of before's keyed enqueue: Powertools' idempotent function, as it configured it."""
    from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function

    class Context:
        def get_remaining_time_in_millis(self) -> int:
            return remaining_ms

    config = IdempotencyConfig(event_key_jmespath="key", payload_validation_jmespath="fingerprint",
                               raise_on_no_idempotency_key=True, expires_after_seconds=DAY_S,
                               hash_function="sha256", lambda_context=Context())  # type: ignore[arg-type]
    once = idempotent_function(data_keyword_argument="request", persistence_store=powertools_layer(keys),
                               config=config, key_prefix=KEY_PREFIX)(lambda request: answer)
    result: dict[str, Any] = once(request={"key": key, "fingerprint": fp})
    return result


def test_a_record_of_before_is_read_with_its_answer(keys: DynamoKeyStore) -> None:
    answer = {"job_id": "01J0000000000000000000000A.q.Q0123456789ABCDEF", "queue": "q"}
    run_as_before(keys, SCOPED, FP, answer)
    import time

    now = int(time.time() * 1000)
    found = keys.take(SCOPED, record(now), expires_at_s=now // 1000 + DAY_S, now_ms=now)
    assert found == Stored(fingerprint("enqueue", "q", FP["request"]), answer, None)


def test_a_record_of_before_in_progress_holds_until_its_deadline(keys: DynamoKeyStore) -> None:
    import time

    now = int(time.time() * 1000)
    seen: list[Any] = []

    def inside(request: Any) -> dict[str, Any]:  # while the gateway of before runs
        seen.append(keys.take(SCOPED, record(now), expires_at_s=now // 1000 + DAY_S, now_ms=now))
        seen.append(keys.take(SCOPED, record(now + 60_000), expires_at_s=now // 1000 + DAY_S,
                              now_ms=now + 60_000))
        return {"job_id": "x", "queue": "q"}

    from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function

    class Context:
        def get_remaining_time_in_millis(self) -> int:
            return 25_000

    config = IdempotencyConfig(event_key_jmespath="key", payload_validation_jmespath="fingerprint",
                               raise_on_no_idempotency_key=True, hash_function="sha256",
                               lambda_context=Context())  # type: ignore[arg-type]
    before = idempotent_function(data_keyword_argument="request", persistence_store=powertools_layer(keys),
                                 config=config, key_prefix=KEY_PREFIX)(inside)
    before(request={"key": SCOPED, "fingerprint": FP})
    first, second = seen
    assert isinstance(first, Stored) and first.response is None
    assert first.in_progress_until_ms is not None and now < first.in_progress_until_ms <= now + 26_000
    assert second is None  # a minute on, its writer's time ran out: the key is taken afresh


def test_a_gateway_of_before_never_makes_a_second_set_of_jobs_for_our_record(keys: DynamoKeyStore) -> None:
    """A rollback: Powertools reading a record we wrote answers 409 (same request) or 422 (another),
    and never runs the enqueue again."""
    import time

    from aws_lambda_powertools.utilities.idempotency.exceptions import (
        IdempotencyAlreadyInProgressError,
        IdempotencyValidationError,
    )

    now = int(time.time() * 1000)
    keys.take(SCOPED, record(now), expires_at_s=now // 1000 + DAY_S, now_ms=now)
    with pytest.raises(IdempotencyAlreadyInProgressError):
        run_as_before(keys, SCOPED, FP, {"job_id": "second"})
    with pytest.raises(IdempotencyValidationError):
        run_as_before(keys, SCOPED, {**FP, "request": {"payload": 2}}, {"job_id": "second"})
    assert item(keys)["seed"]["S"] == "0a" * 10  # type: ignore[index]


def test_a_malformed_record_is_a_store_error(keys: DynamoKeyStore) -> None:
    keys.client.put_item(TableName=TABLE, Item={"id": {"S": record_key(SCOPED)}, "v": {"N": "2"},
                                                "expiration": {"N": str(NOW // 1000 + DAY_S)}})
    with pytest.raises(StoreError, match="malformed"):
        keys.take(SCOPED, record(), expires_at_s=NOW // 1000 + DAY_S, now_ms=NOW)


def test_an_unreachable_table_is_backend_unavailable(keys: DynamoKeyStore,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(**kwargs: Any) -> None:
        raise EndpointConnectionError(endpoint_url="https://dynamodb.us-east-1.amazonaws.com")

    for call in ("put_item", "update_item", "delete_item"):
        monkeypatch.setattr(keys.client, call, refuse)
    with pytest.raises(BackendUnavailable):
        keys.take(SCOPED, record(), expires_at_s=NOW // 1000 + DAY_S, now_ms=NOW)
    with pytest.raises(BackendUnavailable):
        keys.claim(SCOPED, record())
    with pytest.raises(BackendUnavailable):
        keys.release(SCOPED, record())


def test_the_key_store_is_built_on_the_first_keyed_request_not_before(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A keyless enqueue needs no DynamoDB client (nor boto3): the gateway's cold start (issue 14)."""
    from sluice.entry import gateway as entry_gateway
    from sluice.entry import root as wiring

    built: list[str] = []
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(TableName=TABLE, KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
                            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
                            BillingMode="PAY_PER_REQUEST")

        def boto_client(service: str, s: Settings, **options: Any) -> Any:
            built.append(service)
            return client

        monkeypatch.setattr(wiring, "boto_client", boto_client)
        wiring.reset()  # the container's DynamoDB client (wiring.dynamodb) is built afresh
        try:
            lazy = entry_gateway.idempotency(Settings(idempotency_table=TABLE))
            assert built == [] and not lazy.built
            store = lazy.get()
            assert store.take("k1", record(), expires_at_s=NOW // 1000 + DAY_S, now_ms=NOW) is None
            assert lazy.get() is store and built == ["dynamodb"]
        finally:
            wiring.reset()  # not the moto client for later tests
