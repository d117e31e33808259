"""An Idempotency-Key's record, written once (issue 33): what a keyed enqueue stores, how a repeat reads it.

A keyed enqueue used to write its record twice (Powertools' "in progress" put, then its "completed"
update holding the answer): 2 WRU a job, a quarter of what a job costs in DynamoDB. One write is
enough because the answer need not be stored: a keyed request's job ids are derived from the record
(its acceptance time, a random ``seed`` and the job id key it names), so a repeat rebuilds the same
records, with the same ids, from its own request, which the ``fingerprint`` proves is the same.

A repeat cannot tell whether the request that wrote the record reached Kafka (it may have died
between its write and its append), so it appends the same records again and answers 200. The relay
and Redis take one job per id (``push.lua`` skips an id whose hash exists; ``relay_view``, one whose
item is final), so the second copy is dropped when the first landed, and runs when it did not.

One case is left: the writer's append failed, so it withdraws the ids (cancels them) and answers
503. A repeat that appended them meanwhile would have answered 200 for cancelled jobs. So the writer
deletes the record before it withdraws, on condition that no repeat ``claimed`` it, and a repeat
that comes while the writer may still run (before ``until_ms``, the writer's invocation deadline)
claims it first. A writer that finds its record claimed leaves the ids alone: the repeat owns them.

Pure: no I/O, no clock. The store is ``sluice.gateway.keyed.KeyStore``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

# The record's key in the idempotency table: Powertools' layout (its key prefix, then the SHA-256 of
# the key as JSON), so a record a gateway of before wrote is found by the same key (``Stored``).
KEY_PREFIX: Final = "sluice-gateway-v1"
RECORD_FORMAT: Final = 2  # the record's ``v``; Powertools' records have none
# How far two Lambdas' clocks may disagree: a repeat claims a record this long after its writer's
# deadline too.
CLOCK_SKEW_MS: Final = 1_000
SEED_BYTES: Final = 10


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """One keyed enqueue, as its record holds it (about 300 bytes: 1 WRU whatever the batch's size)."""

    fingerprint: str  # ``fingerprint`` of the request
    accepted_at_ms: int  # the jobs' acceptance time: their ids' and records' time
    key_id: str  # the job id key the ids are minted with (``ids.key_id``)
    seed: str  # hex; the ids' 80 random bits are ``entropy(seed, index)``
    until_ms: int  # the writer's invocation deadline: after it, the writer can no longer withdraw
    claimed: bool = False  # a repeat took the ids over while the writer might still run


@dataclass(frozen=True, slots=True)
class Stored:
    """A record a gateway of before wrote (Powertools' layout): its answer, or None while in progress."""

    fingerprint: str | None
    response: dict[str, Any] | None
    in_progress_until_ms: int | None


def record_key(key: str) -> str:
    """The table key of Idempotency-Key ``key`` (already scoped to its caller)."""
    return f"{KEY_PREFIX}#{_sha256(key)}"


def fingerprint(op: str, queue: str, request: Mapping[str, Any]) -> str:
    """The hash of a request, normalised (``request`` is its JSON form with defaults applied), as
    Powertools' payload validation hashes it, so a record of before validates too."""
    return _sha256({"op": op, "queue": queue, "request": dict(request)})


def entropy(seed: str, index: int) -> bytes:
    """The 80 random bits of the ``index``-th job's id of the request whose record holds ``seed``."""
    return hashlib.sha256(b"sluice keyed enqueue\x00" + bytes.fromhex(seed) + b"\x00"
                          + str(index).encode("ascii")).digest()[:SEED_BYTES]


def must_claim(record: KeyRecord, now_ms: int) -> bool:
    """Whether a repeat must claim ``record`` before it appends: its writer may still be running."""
    return not record.claimed and now_ms <= record.until_ms + CLOCK_SKEW_MS


def _sha256(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
