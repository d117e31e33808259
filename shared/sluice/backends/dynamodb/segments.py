"""Parked records packed many to one DynamoDB item: a segment (issue 28, the tenant nemesis).

A park call's records (up to ``RelayConfig.park_call_max``, in offset order) are written as one item,
or a few when their bytes pass ``SEGMENT_BYTES``, instead of one item each. On DynamoDB that is one
request unit per KB of the segment instead of one per record (each record is well under a KB), one
write instead of hundreds; on the local stack's moto server, whose CPU is per item, a 500-record park
took 0.4-0.6 s as items and 6-11 ms as one segment, and reading 500 back 0.9-1.2 s against 45-55 ms
(docs/relay.md, "Segments").

A segment is keyed by the record it ends with, then the one it starts with (``parking.segment_key``),
so the records parked one per item before segments (keyed by their offset) and segments read back in
one Query range, in order; an item with ``seg`` is a segment, one with ``v`` a single record. The packing is
pure and versioned (its first byte): ``pack`` / ``unpack`` below.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final

from sluice.core.ports import ParkedRecord

FORMAT: Final = 1
SEGMENT_BYTES: Final = 300 * 1024  # a segment's packed records at most (an item may hold 400 KB)
# offset, accepted at, run at (ms), key length (-1: none, -2: the job id), value length, job id length
HEAD: Final = struct.Struct(">qqqiIH")
NO_KEY: Final = -1
KEY_IS_ID: Final = -2  # the gateway keys each record by its job id: kept once


class SegmentError(ValueError):
    """A segment's bytes are not a segment this code can read."""


def size(r: ParkedRecord) -> int:
    """The bytes ``r`` takes in a segment."""
    key = 0 if r.key is None or r.key == r.job_id.encode() else len(r.key)
    return HEAD.size + key + len(r.value) + len(r.job_id.encode())


def chunks(records: Sequence[ParkedRecord], limit: int = SEGMENT_BYTES) -> list[list[ParkedRecord]]:
    """``records`` in runs whose packed size stays within ``limit`` (a record larger alone in its own)."""
    out: list[list[ParkedRecord]] = []
    run: list[ParkedRecord] = []
    used = 1
    for r in records:
        n = size(r)
        if run and used + n > limit:
            out.append(run)
            run, used = [], 1
        run.append(r)
        used += n
    if run:
        out.append(run)
    return out


def pack(records: Sequence[ParkedRecord]) -> bytes:
    parts = [bytes([FORMAT])]
    for r in records:
        job = r.job_id.encode()
        if r.key is None:
            key_len, key = NO_KEY, b""
        elif r.key == job:
            key_len, key = KEY_IS_ID, b""
        else:
            key_len, key = len(r.key), r.key
        parts += [HEAD.pack(r.offset, r.enqueued_at_ms, r.run_at_ms, key_len, len(r.value), len(job)),
                  key, r.value, job]
    return b"".join(parts)


def unpack(partition: int, blob: bytes, item: tuple[str, int] | None = None) -> list[ParkedRecord]:
    """The records of a segment of ``partition``, in the order packed; each names ``item``."""
    if not blob or blob[0] != FORMAT:
        raise SegmentError(f"parked segment of format {blob[:1]!r}, not {FORMAT}")
    view, at, out = memoryview(blob), 1, []
    try:
        while at < len(blob):
            offset, enq, run_at, key_len, value_len, job_len = HEAD.unpack_from(blob, at)
            at += HEAD.size
            key = bytes(view[at:at + key_len]) if key_len >= 0 else None
            at += max(0, key_len)
            value = bytes(view[at:at + value_len])
            at += value_len
            job = bytes(view[at:at + job_len])
            at += job_len
            if at > len(blob):
                raise SegmentError("parked segment cut short")
            out.append(ParkedRecord(partition, offset, job if key_len == KEY_IS_ID else key, value,
                                    job.decode(), enq, run_at, item))
    except struct.error as exc:
        raise SegmentError(f"parked segment cut short: {exc}") from exc
    return out
