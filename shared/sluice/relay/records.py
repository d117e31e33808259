"""A Kafka record's value, decoded once into what the relay carries per job.

``decode_job`` is the relay's decoder: it validates the record against ``JobSpec``'s own
fields (a TypedDict derived from the model, checked in pydantic-core without building a
model) and turns the payload into canonical JSON, the only time the relay serialises a
payload. The result, a ``DecodedJob`` tuple, goes through the buffers to ``push.lua`` as
it is. A record it refuses is decoded again by ``decode`` (the ``JobSpec`` model), whose
reason goes to the dead-letter topic: a poison record's reason is the model's, word for
word, and the model stays the one definition of a valid job.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any, NamedTuple, NotRequired, Required

from pydantic import ConfigDict, TypeAdapter, ValidationError, with_config
from typing_extensions import TypedDict

from sluice.core import seal
from sluice.core.errors import InvalidInput
from sluice.core.models import (
    RESERVED_QUEUE_PREFIX,
    SCHEMA_VERSION,
    DecodedJob,
    JobSpec,
    describe_validation,
    dump_json,
    is_reserved_queue,
)
from sluice.relay.ports import SourceRecord

_DEFAULTS: dict[str, Any] = {name: info.default for name, info in JobSpec.model_fields.items()
                             if not info.is_required()}
_PRIORITY, _MAX_ATTEMPTS, _LEASE_MS, _RUN_AT_MS, _ENQUEUED_AT_MS = (
    _DEFAULTS[n] for n in ("priority", "max_attempts", "lease_ms", "run_at_ms", "enqueued_at_ms"))


def _fields() -> TypeAdapter[dict[str, Any]]:
    """JobSpec's fields as a TypedDict: the same types and bounds, the same strictness and
    refusal of unknown keys, but a dict out, and no payload validator (``decode_job``
    serialises the payload itself, once). Built on first use: a cold start without records
    pays nothing."""
    fields: dict[str, Any] = {}
    for name, info in JobSpec.model_fields.items():
        kind = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
        fields[name] = Required[kind] if info.is_required() else NotRequired[kind]
    model = JobSpec.model_config
    config = ConfigDict(extra=model.get("extra"), strict=bool(model.get("strict")))
    typed = with_config(config)(TypedDict("JobSpecFields", fields))  # type: ignore[operator]
    return TypeAdapter(typed)


_new = tuple.__new__
_validate: Callable[[bytes], dict[str, Any]] | None = None  # _fields()'s core validator, once built


def _validator() -> Callable[[bytes], dict[str, Any]]:
    global _validate
    if _validate is None:
        _validate = _fields().validator.validate_json
    return _validate


class Sealing(NamedTuple):
    """What a record says about its own seal (``sluice.core.seal``): its format, its seal, and the
    one field the seal covers that the relay does not carry on (``DecodedJob`` has the rest)."""

    schema_version: int
    seal: str | None
    idempotency_key: str | None


def decode_job(record: SourceRecord) -> DecodedJob | str:
    """The record's job, or the reason it is poison (for the dead-letter topic)."""
    found = decode_sealed(record)
    return found if isinstance(found, str) else found[0]


def decode_sealed(record: SourceRecord) -> tuple[DecodedJob, Sealing] | str:
    """``decode_job``, and the record's ``Sealing`` for the relay's seal check."""
    if record.value is None:
        return "undecodable: empty value"
    try:
        d = (_validate or _validator())(record.value)
        payload = dump_json(d.get("payload"))
    except (ValidationError, InvalidInput):  # the model says why (or, never expected, accepts it)
        spec = decode(record)
        if isinstance(spec, str):
            return spec
        return DecodedJob.of(spec), Sealing(spec.schema_version, spec.seal, spec.idempotency_key)
    job_id, queue = d["job_id"], d["queue"]
    key = record.key
    if key is not None and key != job_id.encode():
        return _key_mismatch(key, job_id)
    if queue.startswith(RESERVED_QUEUE_PREFIX):  # is_reserved_queue, for a str the validator checked
        return _reserved(queue)
    get = d.get
    # tuple.__new__ directly: a NamedTuple's own __new__ is a Python function, a call more per record
    return (_new(DecodedJob, (job_id, queue, payload, get("priority", _PRIORITY),
                              get("max_attempts", _MAX_ATTEMPTS), get("lease_ms", _LEASE_MS),
                              get("run_at_ms", _RUN_AT_MS), get("enqueued_at_ms", _ENQUEUED_AT_MS),
                              get("group"), get("traceparent"))),
            _new(Sealing, (get("schema_version", SCHEMA_VERSION), get("seal"), get("idempotency_key"))))


def decode(record: SourceRecord) -> JobSpec | str:
    """The record's ``JobSpec`` model, or the reason it is poison: the reference ``decode_job``
    agrees with (tests/unit/test_relay_records.py), and its source of reasons."""
    if record.value is None:
        return "undecodable: empty value"
    try:
        spec = JobSpec.model_validate_json(record.value)
    except ValidationError as exc:
        return _poison_reason(record.value, exc)
    if record.key is not None and record.key != spec.job_id.encode():
        return _key_mismatch(record.key, spec.job_id)
    if is_reserved_queue(spec.queue):  # no gateway accepts these; a record for one is hostile
        return _reserved(spec.queue)
    return spec


def _key_mismatch(key: bytes, job_id: str) -> str:
    return f"invalid: key {key[:64]!r} does not match job_id {job_id!r}"


def _reserved(queue: str) -> str:
    return f"reserved queue {queue!r}: names starting with {RESERVED_QUEUE_PREFIX!r} are internal"


def _poison_reason(value: bytes, exc: ValidationError) -> str:
    # Only the failure path parses twice, to tell a newer schema from garbage.
    try:
        doc = json.loads(value)
    except (ValueError, RecursionError):
        return "undecodable: not UTF-8 JSON"
    if not isinstance(doc, dict):
        return "invalid: not a JSON object"
    version = doc.get("schema_version", SCHEMA_VERSION)
    if version not in (SCHEMA_VERSION, seal.VERSION):
        return f"unknown schema_version {str(version)[:32]}"
    return f"invalid job spec: {describe_validation(exc, root='', limit=5)}"[:1000]
