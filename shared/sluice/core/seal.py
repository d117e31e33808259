"""Whole-record MACs ("seals") of the job records the gateway writes to Kafka. Pure: no I/O, no clock.

A job id's own MAC (``sluice.core.ids``) proves that a gateway of this deployment named the
job, not what the record says about it: before seals, a record with a valid id and any payload,
priority, attempts or run-at was pushed as is (issue 27, item 4). A record of format
``VERSION`` (``schema_version`` 2) carries ``seal``: the key id of the job id key that sealed
it (one Crockford character, as in an id) and an HMAC-SHA256, truncated to 128 bits (32 hex
digits), over every field the relay acts on:

    schema_version, job_id, queue, SHA-256 of the payload's canonical JSON (``models.dump_json``),
    priority, max_attempts, lease_ms, run_at_ms, enqueued_at_ms, idempotency_key[, group][, traceparent]

(the group, issue 28 item 5, and the traceparent, issue 31 item 6, only when the record has one:
every record sealed before them, and every record without them, signs the same bytes as before).
The traceparent is sealed although the relay only carries it: it goes into Redis with the job, and
whoever can write to Kafka must not graft a genuine job onto another trace, nor carry text of their
own into the job's hash; inside the seal it costs no Kafka header and no second check.

with a key derived from the job id key for this use only (``record_key``), so a seal is never a
valid id MAC nor the other way round. The relay checks the seal before it pushes
(``sluice.relay.intake``), the gateway checks a stored continuation's seal before it releases it
(``sluice.gateway.families``). The record's job id is inside the seal, so a firing's keyless id
(``sluice.core.schedules.firing_id``) is trusted through its record's seal.

Records of format 1 (no seal) are refused: docs/security.md, "Records".
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from functools import lru_cache
from typing import TYPE_CHECKING, Final

from sluice.core import ids, limits
from sluice.core.models import MAX_DELAY_MS

if TYPE_CHECKING:
    from sluice.core.models import JobSpec

VERSION: Final = 2  # the sealed record format (JobSpec.schema_version)
SEAL_MAC_LENGTH: Final = 32  # 128 bits in hex (C-fast to make and compare: the relay checks every record)
SEAL_LENGTH: Final = ids.KEY_ID_LENGTH + SEAL_MAC_LENGTH
_MAC_BYTES: Final = 16


@lru_cache(maxsize=16)
def record_key(key: bytes) -> bytes:
    """The key seals are made with: derived from the job id key, for this use only."""
    return hmac.new(key, b"sluice record seal key\x00", hashlib.sha256).digest()


def payload_digest(payload_json: str) -> str:
    """SHA-256 (hex) of a payload's canonical JSON: what the seal covers of it."""
    return hashlib.sha256(payload_json.encode("utf-8")).hexdigest()


def message(job_id: str, queue: str, payload_json: str, priority: int, max_attempts: int, lease_ms: int,
            run_at_ms: int, enqueued_at_ms: int, idempotency_key: str | None,
            group: str | None = None, traceparent: str | None = None) -> bytes:
    """The bytes a seal signs. Fields are separated by a newline, which none may contain (ids,
    queues and groups match their patterns, the numbers are ints, the digest is hex, and an
    idempotency key is printable ASCII); a missing idempotency key is ``-``, a present one ``+`` and
    the key. A group adds a line ``g`` and the group, then a traceparent a line ``t`` and it (hex and
    dashes); without them the bytes are those of before groups, so their seals still verify."""
    key = "-" if idempotency_key is None else "+" + idempotency_key
    tail = "" if group is None else "\ng" + group
    if traceparent is not None:
        tail += "\nt" + traceparent
    return (f"sluice record {VERSION}\n{job_id}\n{queue}\n{payload_digest(payload_json)}\n{priority}\n"
            f"{max_attempts}\n{lease_ms}\n{run_at_ms}\n{enqueued_at_ms}\n{key}{tail}").encode()


@lru_cache(maxsize=16)
def _keyed(key: bytes) -> hmac.HMAC:
    """An HMAC-SHA256 already keyed with ``record_key(key)``, for ``_mac`` to copy: the one-shot
    ``hmac.digest`` sets OpenSSL's HMAC up with the key for every record (3.6 against 2.1 µs a
    record on session 35's machine; the MAC is the same)."""
    return hmac.new(record_key(key), digestmod=hashlib.sha256)


def _mac(key: bytes, signed: bytes) -> str:
    mac = _keyed(key).copy()
    mac.update(signed)
    return mac.digest()[:_MAC_BYTES].hex()


def seal(key: bytes, signed: bytes) -> str:
    """The seal of ``signed`` (``message``) with the job id key ``key``."""
    return ids.key_id(key) + _mac(key, signed)


def seal_key_id(text: object) -> str | None:
    """The key id a seal names, or None if ``text`` is not shaped like a seal."""
    if not isinstance(text, str) or len(text) != SEAL_LENGTH:
        return None
    return text[:ids.KEY_ID_LENGTH]


def verify(text: object, signed: bytes, keys: Iterable[bytes]) -> bool:
    """Whether ``text`` is the seal of ``signed`` with one of ``keys`` (those whose key id it names)."""
    kid = seal_key_id(text)
    if kid is None:
        return False
    assert isinstance(text, str)
    given = text[ids.KEY_ID_LENGTH:].encode("utf-8", "replace")
    return any(hmac.compare_digest(_mac(k, signed).encode("ascii"), given)
               for k in keys if ids.key_id(k) == kid)


def spec_message(spec: JobSpec, payload_json: str | None = None) -> bytes:
    """``message`` of a ``JobSpec`` (``payload_json``: its payload's canonical JSON, if already made)."""
    return message(spec.job_id, spec.queue, spec.payload_json() if payload_json is None else payload_json,
                   spec.priority, spec.max_attempts, spec.lease_ms, spec.run_at_ms, spec.enqueued_at_ms,
                   spec.idempotency_key, spec.group, spec.traceparent)


def seal_spec(spec: JobSpec, key: bytes) -> JobSpec:
    """``spec`` as a sealed record (format ``VERSION``), sealed with ``key``: what the gateway's
    pipeline writes (``sluice.gateway.pipeline.EnqueuePipeline.spec``); for tools, the relay
    benchmark and the chaos workload, which write records themselves."""
    fresh = spec.model_copy(update={"schema_version": VERSION, "seal": None})
    return fresh.model_copy(update={"seal": seal(key, spec_message(fresh))})


def verify_spec(spec: JobSpec, keys: Iterable[bytes]) -> bool:
    """Whether ``spec`` is a sealed record (format ``VERSION``) whose seal one of ``keys`` made."""
    return spec.schema_version == VERSION and verify(spec.seal, spec_message(spec), keys)


def unsealed_before_upgrade(spec: JobSpec, job_id: str, minted: ids.Minted | None, before_ms: int) -> bool:
    """Whether ``spec``, stored unsealed as the record of ``job_id``, may be trusted as a record a
    gateway from before sealing wrote (format 1, ``models.SCHEMA_VERSION``): a continuation started
    before an upgrade from a version without seals (docs/deploy.md, "Upgrading") waits in the jobs
    table with such a record. ``minted``: what ``job_id`` proves of itself (its MAC verified), None if
    it proves nothing; ``before_ms``: the upgrade's time (``Settings.unsealed_continuations_before_ms``;
    0, the default, trusts none). Anyone who may write the item could write an unsealed record, so only
    one of an id minted before the upgrade, for that id and its queue, passes: no job started since can
    be given one."""
    return (spec.schema_version != VERSION and spec.seal is None and spec.job_id == job_id
            and minted is not None and minted.queue == spec.queue and minted.accepted_at_ms < before_ms)


def life_refusal(enqueued_at_ms: int, run_at_ms: int, now_ms: int) -> str | None:
    """Why a record sealed at ``enqueued_at_ms`` may not be pushed now, or None.

    A job lives at most ``limits.JOB_LIFE_MS`` between its 202 and its run: a delay of at most
    ``MAX_DELAY_MS`` (the gateway's own limit, checked again here), then at most ``MAX_HOLD_MS``
    plus the margin from its due time (its run-at, or its acceptance) to its push. A record sealed
    in the future (past ``CLOCK_MARGIN_MS``) was not written now by any gateway: refused too.
    """
    if run_at_ms - enqueued_at_ms > MAX_DELAY_MS + limits.CLOCK_MARGIN_MS:
        return (f"expired: its run-at is {(run_at_ms - enqueued_at_ms) // 1000} s after its acceptance, "
                f"beyond the {MAX_DELAY_MS // 1000} s delay a job may have")
    due = max(enqueued_at_ms, run_at_ms)
    if now_ms - due > limits.MAX_HOLD_MS + limits.LIFE_MARGIN_MS:
        return (f"expired: due at {due} ms, it waited {(now_ms - due) // 3_600_000} h for its push, past the "
                f"{(limits.MAX_HOLD_MS + limits.LIFE_MARGIN_MS) // 3_600_000} h a record may "
                f"(a job lives at most {limits.JOB_LIFE_MS // 3_600_000} h between its acceptance and "
                "its run)")
    if enqueued_at_ms - now_ms > limits.CLOCK_MARGIN_MS:
        return f"expired: sealed at {enqueued_at_ms} ms, in the future of this relay's {now_ms} ms"
    return None
