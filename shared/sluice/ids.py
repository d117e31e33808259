"""Job ids the gateway can verify without a database: ``<ULID>.<queue>.<mac>``.

The gateway answers 202 as soon as Kafka acknowledged a job, before any status item
exists in DynamoDB (the relay creates it). ``GET /v1/jobs/{id}`` must still work at
once, and must not say ``accepted`` for an id the gateway never issued. So each id
carries its own proof:

- ``ULID``: 26 Crockford base32 characters, 48-bit millisecond time + 80 random bits.
  Ids sort by acceptance time, and the random tail spreads them over Kafka partitions
  and DynamoDB. The time is also when the job was accepted.
- ``queue``: the queue the job was enqueued on. Queue names cannot contain ``.``, so
  the id splits unambiguously into three parts.
- ``mac``: HMAC-SHA256 with the gateway's secret over ``<ULID>.<queue>``, truncated to
  80 bits (16 Crockford characters). Forging one takes about 2**80 guesses online.

``verify`` returns the queue and the acceptance time of an id minted with the key, or
None for anything else (a forged or truncated mac, another queue, a bare ULID, an id
of any other shape). The longest id is 26 + 1 + 64 + 1 + 16 = 108 characters, inside
``models.validate_job_id``'s 128. Pure: no I/O, no clock.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from typing import Final, NamedTuple

from sluice.models import QUEUE_NAME_RE

CROCKFORD: Final = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_VALUE: Final = {c: i for i, c in enumerate(CROCKFORD)}
ULID_LENGTH: Final = 26
MAC_LENGTH: Final = 16  # 80 bits
_MAC_BYTES: Final = MAC_LENGTH * 5 // 8
MIN_KEY_BYTES: Final = 16


class Minted(NamedTuple):
    """What a verified id says about itself."""

    queue: str
    accepted_at_ms: int


_FROM_RFC4648: Final = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", CROCKFORD.encode("ascii"))


def _base32(value: int, length: int) -> str:
    """``value`` as ``length`` Crockford digits, most significant first.

    Through the C base32 encoder (the gateway mints one id per job, so this is hot):
    the value is left-aligned to whole 40-bit groups, encoded, and translated.
    """
    bits = 5 * length
    padded = -(-bits // 40) * 40
    raw = (value << (padded - bits)).to_bytes(padded // 8, "big")
    return base64.b32encode(raw)[:length].translate(_FROM_RFC4648).decode("ascii")


def ulid(now_ms: int, entropy: bytes | None = None) -> str:
    """48-bit millisecond time + 80 random bits, 26 Crockford base32 characters."""
    rand = entropy if entropy is not None else os.urandom(10)
    return _base32(((now_ms & (2**48 - 1)) << 80) | int.from_bytes(rand[:10], "big"), ULID_LENGTH)


def ulid_time_ms(text: str) -> int | None:
    """The millisecond time of a ULID, or None if ``text`` is not one (upper-case Crockford)."""
    if len(text) != ULID_LENGTH or text[0] > "7":  # 26 characters hold 130 bits; a ULID has 128
        return None
    value = 0
    for char in text[:10]:
        digit = _VALUE.get(char)
        if digit is None:
            return None
        value = value << 5 | digit
    if any(char not in _VALUE for char in text[10:]):
        return None
    return value


def _mac(key: bytes, signed: str) -> str:
    digest = hmac.new(key, signed.encode("ascii"), hashlib.sha256).digest()
    return _base32(int.from_bytes(digest[:_MAC_BYTES], "big"), MAC_LENGTH)


def check_key(key: bytes) -> bytes:
    if not isinstance(key, bytes) or len(key) < MIN_KEY_BYTES:
        raise ValueError(f"the job id key must be at least {MIN_KEY_BYTES} bytes")
    return key


def mint(now_ms: int, queue: str, key: bytes, entropy: bytes | None = None) -> str:
    """A new job id for ``queue``, accepted at ``now_ms``."""
    if QUEUE_NAME_RE.fullmatch(queue) is None:
        raise ValueError(f"invalid queue name {queue!r}")
    signed = f"{ulid(now_ms, entropy)}.{queue}"
    return f"{signed}.{_mac(key, signed)}"


def verify(job_id: str, key: bytes) -> Minted | None:
    """(queue, accepted_at_ms) if ``job_id`` was minted with ``key``, else None."""
    if len(job_id) > ULID_LENGTH + 1 + 64 + 1 + MAC_LENGTH:
        return None
    parts = job_id.split(".")
    if len(parts) != 3:
        return None
    stamp, queue, mac = parts
    accepted_at_ms = ulid_time_ms(stamp)
    if accepted_at_ms is None or len(mac) != MAC_LENGTH or QUEUE_NAME_RE.fullmatch(queue) is None:
        return None
    # Bytes, not str: compare_digest refuses a non-ASCII str, and this input is the caller's.
    if not hmac.compare_digest(_mac(key, f"{stamp}.{queue}").encode(), mac.encode("utf-8", "replace")):
        return None
    return Minted(queue, accepted_at_ms)
