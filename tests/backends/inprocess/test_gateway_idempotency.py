"""PowertoolsIdempotency on Powertools' real DynamoDB layer, over in-process moto (no sockets)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from sluice.core.config import Settings
from sluice.core.errors import BackendUnavailable, IdempotencyConflict, InProgress
from sluice.gateway.http.idempotency import KEY_PREFIX, PowertoolsIdempotency

TABLE = "idem-unit"


@pytest.fixture
def idem() -> Iterator[PowertoolsIdempotency]:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(TableName=TABLE, KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
                            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
                            BillingMode="PAY_PER_REQUEST")
        yield PowertoolsIdempotency.from_settings(Settings(idempotency_table=TABLE), client=client)


class Action:
    def __init__(self, result: dict[str, Any] | None = None, error: Exception | None = None) -> None:
        self.calls = 0
        self.result = result or {"job_id": "01J0000000000000000000000A"}
        self.error = error

    def __call__(self) -> dict[str, Any]:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return dict(self.result, call=self.calls)


FP = {"op": "enqueue", "queue": "q", "request": {"payload": 1}}


def test_first_call_runs_and_replays_return_the_stored_result(idem: PowertoolsIdempotency) -> None:
    action = Action()
    first = idem.run("k", FP, action)
    second = idem.run("k", dict(FP), action)
    assert first == (action.result | {"call": 1}, False)
    assert second == (first[0], True)
    assert action.calls == 1


def test_a_different_request_under_the_same_key_is_a_conflict(idem: PowertoolsIdempotency) -> None:
    action = Action()
    idem.run("k", FP, action)
    with pytest.raises(IdempotencyConflict):
        idem.run("k", {**FP, "request": {"payload": 2}}, action)
    assert action.calls == 1


def test_keys_are_independent(idem: PowertoolsIdempotency) -> None:
    action = Action()
    idem.run("a", FP, action)
    assert idem.run("b", FP, action)[1] is False
    assert action.calls == 2


def test_a_request_still_running_makes_the_second_one_in_progress(idem: PowertoolsIdempotency) -> None:
    seen: list[BaseException] = []

    def first() -> dict[str, Any]:
        try:
            idem.run("k", FP, Action())
        except InProgress as exc:
            seen.append(exc)
        return {"job_id": "first"}

    assert idem.run("k", FP, first) == ({"job_id": "first"}, False)
    assert len(seen) == 1


def test_a_crashed_request_frees_its_key_when_its_time_runs_out(idem: PowertoolsIdempotency) -> None:
    taken_over: list[tuple[dict[str, Any], bool]] = []

    def first() -> dict[str, Any]:  # its invocation has no time left: as if it had died
        taken_over.append(idem.run("k", FP, Action({"job_id": "second"})))
        return {"job_id": "first"}

    idem.run("k", FP, first, remaining_ms=lambda: 0)
    assert taken_over == [({"job_id": "second", "call": 1}, False)]


def test_a_failed_action_releases_the_key(idem: PowertoolsIdempotency) -> None:
    with pytest.raises(BackendUnavailable):
        idem.run("k", FP, Action(error=BackendUnavailable("kafka down")))
    action = Action()
    assert idem.run("k", FP, action)[1] is False and action.calls == 1


def test_unreachable_store_runs_nothing(idem: PowertoolsIdempotency, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("connection refused")

    monkeypatch.setattr(idem.persistence, "_put_record", refuse)
    action = Action()
    with pytest.raises(BackendUnavailable):
        idem.run("k", FP, action)
    assert action.calls == 0


def test_accepted_job_is_reported_even_if_saving_the_key_fails(idem: PowertoolsIdempotency,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("throttled")

    monkeypatch.setattr(idem.persistence, "_update_record", refuse)
    action = Action()
    assert idem.run("k", FP, action) == (action.result | {"call": 1}, False)


def test_records_use_the_sluice_prefix_and_the_powertools_layout(idem: PowertoolsIdempotency) -> None:
    idem.run("k", FP, Action())
    items = boto3.client("dynamodb", region_name="us-east-1").scan(TableName=TABLE)["Items"]
    [item] = items
    assert item["id"]["S"].startswith(f"{KEY_PREFIX}#")
    assert {"expiration", "status", "data", "validation"} <= set(item)


def test_the_dynamodb_layer_is_built_on_the_first_keyed_request_not_before(
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
            idem = entry_gateway.idempotency(Settings(idempotency_table=TABLE))
            assert built == []
            action = Action()
            assert idem.run("k1", FP, action) == (action.result | {"call": 1}, False)
            assert idem.run("k1", FP, action) == (action.result | {"call": 1}, True)
            assert built == ["dynamodb"]  # once, on the first keyed request
        finally:
            wiring.reset()  # not the moto client for later tests
