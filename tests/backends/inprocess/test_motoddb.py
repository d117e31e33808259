"""The local moto server's direct serialisation of DynamoDB attribute values
(``sluice_dev.local.motoddb``): the same answer as moto's own walk of the model, for any item."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from moto import mock_aws
from moto.core import serialize
from moto.core.utils import get_service_model

from sluice_dev.local import motoddb

pytestmark = pytest.mark.timeout(120)

CURRENT = serialize.BaseJSONSerializer._serialize_type_structure  # installed by conftest.py
STOCK = getattr(CURRENT, "__wrapped__", CURRENT)


def _stock() -> None:
    serialize.BaseJSONSerializer._serialize_type_structure = STOCK  # type: ignore[method-assign]


@pytest.fixture
def installed() -> Iterator[None]:
    _stock()
    motoddb.install()
    try:
        yield
    finally:
        serialize.BaseJSONSerializer._serialize_type_structure = CURRENT  # type: ignore[method-assign]


def _leaf() -> st.SearchStrategy[dict[str, Any]]:
    text = st.text(max_size=8)
    number = st.integers(-10**6, 10**6).map(str)
    blob = st.binary(max_size=8)
    return st.one_of(
        st.builds(lambda v: {"S": v}, text), st.builds(lambda v: {"N": v}, number),
        st.builds(lambda v: {"B": v}, blob), st.builds(lambda v: {"SS": v}, st.lists(text, max_size=3)),
        st.builds(lambda v: {"NS": v}, st.lists(number, max_size=3)),
        st.builds(lambda v: {"BS": v}, st.lists(blob, max_size=3)),
        st.just({"NULL": True}), st.builds(lambda v: {"BOOL": v}, st.booleans()))


ATTRIBUTE = st.recursive(_leaf(), lambda inner: st.one_of(
    # a map's keys are not empty: moto's walk takes the key "" for "no key" and writes such a
    # member's value in place of the map's (DynamoDB keeps it as it is, and so does motoddb)
    st.builds(lambda v: {"M": v}, st.dictionaries(st.text(min_size=1, max_size=5), inner, max_size=3)),
    st.builds(lambda v: {"L": v}, st.lists(inner, max_size=3))), max_leaves=12)
ITEM = st.dictionaries(st.text(min_size=1, max_size=6), ATTRIBUTE, max_size=6)


SERVICES = {name: get_service_model(name) for name in ("dynamodb", "dynamodbstreams")}


def _serialize(operation: str, result: dict[str, Any], service_name: str = "dynamodb") -> Any:
    service = SERVICES[service_name]
    serializer = serialize.JSONSerializer(service.operation_model(operation),
                                          value_picker=serialize.XFormedAttributePicker())
    return json.loads(serializer.serialize(result)["body"])


@settings(max_examples=100, deadline=None)
@given(item=ITEM, items=st.lists(ITEM, max_size=3))
def test_every_item_serialises_as_motos_own_walk_does(item: dict[str, Any],
                                                      items: list[dict[str, Any]]) -> None:
    record = {"eventName": "MODIFY", "dynamodb": {"Keys": {"k": {"S": "1"}}, "NewImage": item,
                                                  "OldImage": items[0] if items else item}}

    def answers() -> list[Any]:
        return [_serialize("GetItem", {"Item": item}),
                _serialize("Query", {"Items": items, "Count": len(items)}),
                _serialize("GetRecords", {"Records": [record]}, "dynamodbstreams")]

    _stock()
    try:
        stock = answers()
        motoddb.install()
        fast = answers()
    finally:
        serialize.BaseJSONSerializer._serialize_type_structure = CURRENT  # type: ignore[method-assign]
    assert fast == stock


def test_the_attribute_values_of_both_services_take_the_direct_way(installed: None,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[Any] = []
    direct = motoddb.attribute_value
    monkeypatch.setattr(motoddb, "attribute_value", lambda value: made.append(value) or direct(value))
    _serialize("GetItem", {"Item": {"a": {"S": "x"}}})
    _serialize("GetRecords", {"Records": [{"dynamodb": {"NewImage": {"b": {"N": "1"}}}}]}, "dynamodbstreams")
    assert made == [{"S": "x"}, {"N": "1"}]


def test_an_attribute_value_that_is_not_a_dict_goes_the_stock_way(installed: None) -> None:
    odd = {"Item": {"a": {"L": ["not an attribute value"]}}}
    _stock()
    stock = _serialize("GetItem", odd)
    motoddb.install()
    assert _serialize("GetItem", odd) == stock


def test_a_moto_round_trip_gives_back_the_item_binary_and_nested_values_included(installed: None) -> None:
    motoddb.install()  # idempotent: not wrapped twice
    wrapped = serialize.BaseJSONSerializer._serialize_type_structure.__wrapped__  # type: ignore[attr-defined]
    assert wrapped is STOCK
    item = {"job_id": {"S": "j1"}, "n": {"N": "12"}, "blob": {"B": b"\x00\xffsealed"},
            "blobs": {"BS": [b"a", b"b"]}, "tags": {"SS": ["x", "y"]}, "none": {"NULL": True},
            "m": {"M": {"l": {"L": [{"S": "v"}, {"N": "2"}, {"BOOL": False}, {"B": b"\x01"}]}}}}
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(TableName="t", KeySchema=[{"AttributeName": "job_id", "KeyType": "HASH"}],
                            AttributeDefinitions=[{"AttributeName": "job_id", "AttributeType": "S"}],
                            BillingMode="PAY_PER_REQUEST")
        client.put_item(TableName="t", Item=item)
        got = client.get_item(TableName="t", Key={"job_id": {"S": "j1"}})["Item"]
        new = client.update_item(TableName="t", Key={"job_id": {"S": "j1"}},
                                 UpdateExpression="SET n = n + :one",
                                 ExpressionAttributeValues={":one": {"N": "1"}}, ReturnValues="ALL_NEW")
    assert got == item
    assert new["Attributes"] == {**item, "n": {"N": "13"}}
