"""Large payloads live in S3; the record, Kafka and Redis carry a pointer (issue 28, item 4). Pure.

A payload whose canonical JSON (``models.dump_json``) is larger than
``Settings.payload_inline_max_bytes`` is written by the gateway's pipeline
(``sluice.gateway.pipeline``) to the payloads bucket, BEFORE its record goes to Kafka, under a
key derived from the job (``payload_key``: ``payloads/<queue>/<job_id>``), so a team's role can be
scoped to its queues' prefixes. The record's payload becomes the pointer::

    {"$sluice": "s3", "key": "payloads/<queue>/<job_id>", "sha256": "<hex>", "bytes": <n>}

and the record's seal (``sluice.core.seal``) covers the pointer's canonical JSON as it covers any
payload, so the digest inside it binds the object's content to the sealed record.

The worker resolves the pointer before the handler runs (``resolve``): it reads the key the job
itself names, never one the pointer names (a pointer whose key is not its own job's is refused),
and refuses an object whose size or digest differs. Handlers never see pointers.

Forged pointers: a caller's payload that is a JSON object with the ``$sluice`` member is refused at
the gateway (``refuse_reserved``), so the only pointers in records are the gateway's own.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from sluice.core.errors import InvalidInput, PayloadUnavailable

TAG: Final = "$sluice"  # the reserved member: no caller's top-level object may have it
KIND: Final = "s3"
PREFIX: Final = "payloads"
# Below this the pointer (about 150 bytes of JSON) would save nothing: the setting's floor.
MIN_INLINE_MAX_BYTES: Final = 1024
_DIGEST = re.compile(r"[0-9a-f]{64}")


def payload_key(queue: str, job_id: str) -> str:
    """Where ``job_id``'s payload lives: under its queue's prefix (per-queue IAM), named by its id."""
    return f"{PREFIX}/{queue}/{job_id}"


@dataclass(frozen=True, slots=True)
class Pointer:
    """The pointer a record carries instead of a large payload."""

    key: str
    sha256: str
    size: int

    def as_payload(self) -> dict[str, Any]:
        return {TAG: KIND, "key": self.key, "sha256": self.sha256, "bytes": self.size}


@dataclass(frozen=True, slots=True)
class Offload:
    """A payload to write to the store before its record is appended: ``body`` under ``pointer.key``."""

    pointer: Pointer
    body: bytes


def is_reserved(payload: Any) -> bool:
    """Whether ``payload`` has the shape only the gateway's pointers may have."""
    return isinstance(payload, dict) and TAG in payload


def refuse_reserved(payload: Any, *, index: int | None = None) -> None:
    """InvalidInput (400) for a caller's payload that could pass for a pointer."""
    if is_reserved(payload):
        where = "payload" if index is None else f"job {index}: payload"
        raise InvalidInput(f"{where}: a top-level {TAG!r} member is reserved for Sluice's own payload "
                           "pointers; wrap the value (e.g. {\"data\": ...})", index=index)


def offload(queue: str, job_id: str, payload_json: str, inline_max_bytes: int) -> Offload | None:
    """The object to write for a payload larger than ``inline_max_bytes``; None: it stays inline."""
    body = payload_json.encode("utf-8")
    if len(body) <= inline_max_bytes:
        return None
    return Offload(Pointer(payload_key(queue, job_id), hashlib.sha256(body).hexdigest(), len(body)), body)


def parse(payload: Any) -> Pointer | None:
    """The pointer ``payload`` is, None if it is an ordinary payload; PayloadUnavailable if it has
    the reserved member but not the pointer's exact shape."""
    if not is_reserved(payload):
        return None
    key, digest, size = payload.get("key"), payload.get("sha256"), payload.get("bytes")
    if (payload.get(TAG) != KIND or set(payload) != {TAG, "key", "sha256", "bytes"}
            or not isinstance(key, str) or not isinstance(digest, str) or _DIGEST.fullmatch(digest) is None
            or isinstance(size, bool) or not isinstance(size, int) or size < 0):
        raise PayloadUnavailable("the record's payload is a malformed payload pointer; not resolved")
    return Pointer(key, digest, size)


def resolve(payload: Any, queue: str, job_id: str, get: Callable[[str], bytes] | None) -> Any:
    """The payload the handler gets: ``payload`` itself, or the object its pointer names, read with
    ``get`` (``PayloadStore.get``) and checked. PayloadUnavailable when the pointer is not this
    job's own, no store is configured, or the object is missing or not the one the record sealed."""
    pointer = parse(payload)
    if pointer is None:
        return payload
    own = payload_key(queue, job_id)
    if pointer.key != own:
        raise PayloadUnavailable(f"the payload pointer names {pointer.key[:200]!r}, not this job's own "
                                 f"{own!r}; not read")
    if get is None:
        raise PayloadUnavailable(f"the payload is in S3 ({own}) and this worker has no payload store")
    body = get(own)
    if len(body) != pointer.size or hashlib.sha256(body).hexdigest() != pointer.sha256:
        raise PayloadUnavailable(f"the payload object {own} is {len(body)} bytes and does not match the "
                                 f"{pointer.size}-byte payload its record sealed; not handed to the handler")
    try:
        return json.loads(body)
    except ValueError as exc:  # its digest matched, so the gateway wrote it: a bug, not an attack
        raise PayloadUnavailable(f"the payload object {own} is not JSON: {exc}") from exc
