"""moto's DynamoDB answers, serialised without the model walk (local stack and tests only).

moto 5.2 serialises every answer by walking botocore's output shape: for each item, each attribute's
``AttributeValue`` structure, and each of its ten members (S, N, B, SS, NS, BS, M, L, NULL, BOOL),
it asks an attribute picker that tries up to seven aliases of the member's name. An item of 20
attributes costs some 1,400 look-ups; it was a quarter of the moto server's CPU in the job model's
run and in a chaos run (py-spy ``--gil``), DynamoDB Streams' records (their images) included.

An ``AttributeValue`` that moto's DynamoDB handlers hand over is already a dict in the wire's shape
(``moto.dynamodb.models.utilities.dynamo_to_dict``: one member, bytes for a binary), so ``install``
writes it as the walk would, directly: every member the shape knows, the binary ones base64-encoded,
maps and lists recursively, nothing else. Any other value (an attribute value that is not a dict,
at any depth) goes the stock way.
"""

from __future__ import annotations

import base64
from typing import Any

_INSTALLED = "_sluice_fast_attribute_value"
SERVICES = frozenset({"dynamodb", "dynamodbstreams"})  # one AttributeValue shape, ten members
_BINARY = "B"
_BINARY_SET = "BS"
_STRINGS = ("S", "N")
_LISTS = ("SS", "NS")
_FLAGS = ("NULL", "BOOL")


class _Unusual(Exception):
    """A value moto's DynamoDB handler never hands over: left to the stock walk."""


def _b64(value: Any) -> str:
    if isinstance(value, str):
        value = value.encode("utf-8")
    return base64.b64encode(value).strip().decode("utf-8")


def attribute_value(value: Any) -> dict[str, Any]:
    """What moto's JSON serialiser makes of one ``AttributeValue`` dict, made directly."""
    if not isinstance(value, dict):
        raise _Unusual
    out: dict[str, Any] = {}
    for key, member in value.items():
        if member is None:
            continue
        if key in _STRINGS:
            out[key] = str(member) if member not in ({}, []) else member
        elif key == "M":
            out[key] = {k: attribute_value(v) for k, v in member.items()}
        elif key == "L":
            out[key] = [attribute_value(v) for v in member]
        elif key in _FLAGS:
            out[key] = member
        elif key in _LISTS:
            out[key] = [str(v) if v not in ({}, []) and v is not None else v for v in member]
        elif key == _BINARY:
            out[key] = _b64(member)
        elif key == _BINARY_SET:
            out[key] = [_b64(v) for v in member]
    return out


def install() -> None:
    """Serialise DynamoDB's ``AttributeValue`` dicts directly in moto's JSON serialiser (idempotent)."""
    from moto.core import serialize

    cls = serialize.BaseJSONSerializer
    original = cls._serialize_type_structure
    if getattr(original, _INSTALLED, False):
        return

    def _serialize_type_structure(self: Any, serialized: Any, value: Any, shape: Any, key: str) -> None:
        if key and shape.name == "AttributeValue" and isinstance(value, dict) \
                and self.service_model.service_name in SERVICES:
            try:
                fast = attribute_value(value)
            except _Unusual:
                pass
            else:
                self._default_serialize(serialized, fast, shape, key)
                return
        original(self, serialized, value, shape, key)

    setattr(_serialize_type_structure, _INSTALLED, True)
    _serialize_type_structure.__wrapped__ = original  # type: ignore[attr-defined]
    cls._serialize_type_structure = _serialize_type_structure  # type: ignore[method-assign]
