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
- ``mac``: one Crockford character naming the key (its key id, ``key_id``), then
  HMAC-SHA256 with that key over ``<ULID>.<queue>.<key id>``, truncated to 80 bits (16
  Crockford characters). Forging one takes about 2**80 guesses online.

The key id lets the key rotate with two keys live: the gateway mints with the current key
and verifies with the current and the previous one, so ids minted before a rotation keep
verifying (GET, cancel, the relay's check) until they leave Kafka's retention. The key id
is derived from the key itself (no registry to keep in step with Secrets Manager); two keys
that happen to share one are both tried. The key id sits inside the mac segment, so the
id keeps its ``<ULID>.<queue>.<mac>`` shape, which per-queue IAM policies rely on.

Ids minted before key ids existed (a bare 16-character mac over ``<ULID>.<queue>``) are
verified against every key, so an upgrade does not orphan the ids still in Kafka.

``verify`` returns the queue and the acceptance time of an id minted with one of the
keys, or None for anything else (a forged or truncated mac, another queue, a bare ULID,
an id of any other shape). The longest id is 26 + 1 + 64 + 1 + 17 = 109 characters,
inside ``models.validate_job_id``'s 128. Pure: no I/O, no clock.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from typing import Final, NamedTuple

from sluice.core.models import QUEUE_NAME_RE

CROCKFORD: Final = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_VALUE: Final = {c: i for i, c in enumerate(CROCKFORD)}
ULID_LENGTH: Final = 26
MAC_LENGTH: Final = 16  # 80 bits
KEY_ID_LENGTH: Final = 1  # one Crockford character: 32 key ids
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


# Crockford digits as Python's base-32 digits (0-9a-v), so int(_, 32) decodes them in C: the relay
# verifies every record's id (issue 27 made its per-record checks show in bench_relay).
_TO_INT32: Final = str.maketrans(CROCKFORD, "0123456789abcdefghijklmnopqrstuv")
_ULID_RE: Final = re.compile(r"[0-7][0-9A-HJKMNP-TV-Z]{25}")  # 26 characters hold 130 bits; a ULID has 128
_MAC_RE: Final = re.compile(r"[0-9A-HJKMNP-TV-Z]{16}")


def ulid_time_ms(text: str) -> int | None:
    """The millisecond time of a ULID, or None if ``text`` is not one (upper-case Crockford)."""
    if len(text) != ULID_LENGTH or _ULID_RE.fullmatch(text) is None:
        return None
    return int(text[:10].translate(_TO_INT32), 32)


def _mac(key: bytes, signed: str) -> str:
    digest = hmac.new(key, signed.encode("ascii"), hashlib.sha256).digest()
    return _base32(int.from_bytes(digest[:_MAC_BYTES], "big"), MAC_LENGTH)


@lru_cache(maxsize=64)
def key_id(key: bytes) -> str:
    """The key id of ``key``: one Crockford character of a hash of it (not of its MAC use). Cached:
    the relay asks it of the same two keys for every record (issue 27's seal check)."""
    return CROCKFORD[hashlib.sha256(b"sluice job id key id\x00" + key).digest()[0] & 31]


MAX_KEY_DRAWS: Final = 64  # a draw misses both held key ids 30 times in 32: 64 misses is ~1e-77


def fresh_key(held: Iterable[bytes], draw: Callable[[], bytes]) -> bytes:
    """A new job id key from ``draw`` whose key id no ``held`` key has (the current and previous keys).

    A rotation's new key shares the current key's key id one time in 32 (one character of 32):
    ids of both keys then name the same key id, and a container that cached the keys before the
    rotation finds the id's key id known and its MAC wrong (``Verifier`` re-reads on any failed
    verify since session 35, but at a cost). So draw again until the key id is free.
    RuntimeError after ``MAX_KEY_DRAWS`` draws (only a broken ``draw``)."""
    taken = {key_id(k) for k in held}
    for _ in range(MAX_KEY_DRAWS):
        key = check_key(draw())
        if key_id(key) not in taken:
            return key
    raise RuntimeError(f"no job id key with a key id other than {sorted(taken)} in {MAX_KEY_DRAWS} draws")


def check_key(key: bytes) -> bytes:
    if not isinstance(key, bytes) or len(key) < MIN_KEY_BYTES:
        raise ValueError(f"the job id key must be at least {MIN_KEY_BYTES} bytes")
    return key


def mint(now_ms: int, queue: str, key: bytes, entropy: bytes | None = None) -> str:
    """A new job id for ``queue``, accepted at ``now_ms``, signed with ``key``."""
    if QUEUE_NAME_RE.fullmatch(queue) is None:
        raise ValueError(f"invalid queue name {queue!r}")
    signed = f"{ulid(now_ms, entropy)}.{queue}"
    kid = key_id(key)
    return f"{signed}.{kid}{_mac(key, f'{signed}.{kid}')}"


CHILD_KEY_MAX: Final = 64
CHILD_KEY_RE: Final = re.compile(r"^[\x21-\x7e]{1,64}$")  # printable ASCII, no space


def check_child_key(key: object) -> str:
    """A child's key (``ctx.enqueue(..., key=)``): 1..64 printable ASCII characters, no space."""
    if not isinstance(key, str) or CHILD_KEY_RE.fullmatch(key) is None:
        shown = key if not isinstance(key, str) or len(key) <= 80 else key[:80] + "..."
        raise ValueError(f"invalid child key {shown!r}: 1..{CHILD_KEY_MAX} printable ASCII characters, "
                         "no spaces")
    return key


def child_entropy(parent_id: str, key: str) -> bytes:
    """The 80 random bits of a child's ULID: a hash of its parent's id and its key.

    A NUL separates the two (neither can contain one), so no two (parent, key) pairs hash
    the same input. ``key`` is the child's key, or ``CONTINUATION_PREFIX`` + a key.
    """
    return hashlib.sha256(b"sluice child\x00" + parent_id.encode("utf-8") + b"\x00"
                          + key.encode("utf-8")).digest()[:10]


# Never part of a valid child key: a continuation's id and a child's never collide.
CONTINUATION_PREFIX: Final = "\x00then\x00"


def derive(parent_id: str, queue: str, key: str, signing_key: bytes) -> str:
    """The id of ``parent_id``'s child ``key`` on ``queue``: the same inputs always give the same id.

    A re-run parent (its worker died before the ack) asks for the same children again and gets
    the same ids, so the relay and Redis see one job each. The shape is a minted id's
    (``<ULID>.<queue>.<mac>``): the ULID keeps the parent's time (so the child is inside the
    same retention horizon) and takes its randomness from ``child_entropy``; the mac is the
    gateway's, so only a holder of the job id key can derive one.
    """
    stamp = parent_id.split(".", 1)[0]
    parent_ms = ulid_time_ms(stamp)
    if parent_ms is None:
        raise ValueError(f"invalid parent job id {parent_id!r}")
    return mint(parent_ms, queue, signing_key, child_entropy(parent_id, key))


NO_QUEUE: Final = "_"  # ``queue_in_id`` of an id without a queue part: never a queue name


def queue_in_id(job_id: str) -> str:
    """The queue an id of the minted shape names (``<ULID>.<queue>.<mac>``, unverified), else
    ``NO_QUEUE``. IAM's ``dynamodb:LeadingKeys`` ``*.<queue>.*`` scopes a team to the ids naming
    its queues, so whatever is keyed or labelled by queue follows this part, not an item's
    ``queue`` attribute (which a team's code writes)."""
    parts = job_id.split(".")
    return parts[1] if len(parts) == 3 and QUEUE_NAME_RE.fullmatch(parts[1]) else NO_QUEUE


# A keyless id's tag, where a keyed id has its key id: not a Crockford digit, so never a key id.
KEYLESS_TAG: Final = "U"


def keyless(now_ms: int, queue: str, entropy: bytes, name: bytes) -> str:
    """A deterministic id that no key signs: ``<ULID>.<queue>.U<hash>``, the hash of ``name`` (what
    the id stands for, e.g. a schedule's firing) and the ULID, queue included. Anyone can compute one,
    so it proves nothing by itself: a record carrying one is trusted through its seal
    (``sluice.core.seal``), and ``verify`` returns None for it. Its point is that no key rotation
    changes it (``sluice.core.schedules.firing_id``)."""
    if QUEUE_NAME_RE.fullmatch(queue) is None:
        raise ValueError(f"invalid queue name {queue!r}")
    signed = f"{ulid(now_ms, entropy)}.{queue}"
    digest = hashlib.sha256(b"sluice keyless id\x00" + signed.encode("ascii") + b"\x00" + name).digest()
    return f"{signed}.{KEYLESS_TAG}{_base32(int.from_bytes(digest[:_MAC_BYTES], 'big'), MAC_LENGTH)}"


def shaped_queue(job_id: str) -> str | None:
    """The queue of ``job_id`` if it has the shape of an id some key made (``mint``, ``derive``, or a
    bare 16-digit mac from before key ids) or of a keyless one, whatever key, current or long
    retired; None otherwise. Proves nothing: a family's parent is proved by its lease (issue 29)."""
    parts = job_id.split(".")
    if len(parts) != 3 or ulid_time_ms(parts[0]) is None or QUEUE_NAME_RE.fullmatch(parts[1]) is None:
        return None
    mac = parts[2]
    if len(mac) == KEY_ID_LENGTH + MAC_LENGTH and (mac[0] in _VALUE or mac[0] == KEYLESS_TAG):
        mac = mac[KEY_ID_LENGTH:]
    return parts[1] if _MAC_RE.fullmatch(mac) is not None else None


def named_key_id(job_id: str) -> str | None:
    """The key id ``job_id``'s mac names (``mint``), or None: a keyless id, a bare mac, another shape."""
    mac = job_id.rsplit(".", 1)[-1]
    return mac[0] if len(mac) == KEY_ID_LENGTH + MAC_LENGTH and mac[0] in _VALUE else None


def is_keyless(job_id: str) -> bool:
    """Whether ``job_id`` has a keyless id's shape (``keyless``); says nothing of who made it."""
    return job_id.rsplit(".", 1)[-1][:KEY_ID_LENGTH] == KEYLESS_TAG and shaped_queue(job_id) is not None


def derive_keyless(parent_id: str, queue: str, key: str) -> str:
    """``derive`` for a parent whose id is keyless (a schedule firing's job): a keyless child id, so a
    re-run of the parent after a key rotation gets the same children, as its own id is the same."""
    parent_ms = ulid_time_ms(parent_id.split(".", 1)[0])
    if parent_ms is None:
        raise ValueError(f"invalid parent job id {parent_id!r}")
    return keyless(parent_ms, queue, child_entropy(parent_id, key),
                   b"child\x00" + parent_id.encode("utf-8") + b"\x00" + key.encode("utf-8"))


def verify(job_id: str, key: bytes, previous: Iterable[bytes] = ()) -> Minted | None:
    """(queue, accepted_at_ms) if ``job_id`` was minted with ``key`` or a ``previous`` key."""
    if len(job_id) > ULID_LENGTH + 1 + 64 + 1 + KEY_ID_LENGTH + MAC_LENGTH:
        return None
    parts = job_id.split(".")
    if len(parts) != 3:
        return None
    stamp, queue, mac = parts
    accepted_at_ms = ulid_time_ms(stamp)
    if accepted_at_ms is None or QUEUE_NAME_RE.fullmatch(queue) is None:
        return None
    signed = f"{stamp}.{queue}"
    keys = (key, *previous)
    if len(mac) == KEY_ID_LENGTH + MAC_LENGTH:
        kid, mac = mac[:KEY_ID_LENGTH], mac[KEY_ID_LENGTH:]
        keys = tuple(k for k in keys if key_id(k) == kid)
        signed = f"{signed}.{kid}"
    elif len(mac) != MAC_LENGTH:  # 16: minted before key ids; any key may have signed it
        return None
    if _MAC_RE.fullmatch(mac) is None:  # not 16 Crockford digits: no key made it
        return None
    given = int(mac.translate(_TO_INT32), 32).to_bytes(_MAC_BYTES, "big")  # 16 digits: exactly 80 bits
    signed_bytes = signed.encode("ascii")
    if any(hmac.compare_digest(hmac.digest(k, signed_bytes, "sha256")[:_MAC_BYTES], given) for k in keys):
        return Minted(queue, accepted_at_ms)
    return None


class Verifier:
    """The current and previous keys, read again when an id does not verify with them.

    A container started before a rotation holds the old pair; an id minted elsewhere with the
    new key names a key id it does not know. ``refresh`` (I/O, given by the composition root)
    then reads both keys again, at most once every ``refresh_ms`` of ``clock`` (ms), so ids a
    caller makes up cost at most one read a minute. Without ``refresh`` the keys are fixed.

    ``cached``: the keys were not read now but come from a cache of unknown age (the relay builds
    a Verifier per invocation from the container's keys), so the first unknown key id may read
    them again at once. Counting the minute from construction instead made a warm relay container
    whose invocations last under a minute never re-read: after a rotation it dead-lettered every
    record of the new key as unminted (found by the chaos run's ``rotate_job_id_key``, issue 29).
    """

    def __init__(self, key: bytes, previous: Iterable[bytes] = (), *,
                 refresh: Callable[[], tuple[bytes, Sequence[bytes]]] | None = None,
                 clock: Callable[[], int] | None = None, refresh_ms: int = 60_000,
                 cached: bool = False) -> None:
        self.key = check_key(key)
        self.previous = tuple(check_key(k) for k in previous)
        self._refresh, self._clock, self._refresh_ms = refresh, clock, refresh_ms
        self._read_ms = (clock() - (refresh_ms if cached else 0)) if clock is not None else 0

    def verify(self, job_id: str) -> Minted | None:
        found = verify(job_id, self.key, self.previous)
        if found is None and self._reread(job_id):
            found = verify(job_id, self.key, self.previous)
        return found

    def keys_for(self, kid: str) -> tuple[bytes, ...]:
        """The keys whose key id is ``kid`` (a record's seal names one), read again as ``verify``
        does when neither key has it."""
        found = tuple(k for k in (self.key, *self.previous) if key_id(k) == kid)
        if not found and kid in _VALUE and self._reread_kid(kid):
            found = tuple(k for k in (self.key, *self.previous) if key_id(k) == kid)
        return found

    def _reread(self, job_id: str) -> bool:
        # Even when a key held has the id's key id: a key id is one character of 32, so one rotation
        # in 32 draws a new key with the current one's id. Skipping the read then made a relay refuse
        # every record of the new key as unminted (a chaos run's rotate_job_id_key lost 80 jobs
        # answered 202). The rate limit still bounds what made-up ids cost.
        kid = named_key_id(job_id)
        return kid is not None and self._reread_kid(kid, known=True)

    def _reread_kid(self, kid: str, *, known: bool = False) -> bool:
        if self._refresh is None or self._clock is None or kid not in _VALUE:
            return False
        if not known and kid in {key_id(k) for k in (self.key, *self.previous)}:
            return False
        now = self._clock()
        if now - self._read_ms < self._refresh_ms:
            return False
        self._read_ms = now
        key, previous = self._refresh()
        self.key, self.previous = check_key(key), tuple(check_key(k) for k in previous)
        return True
