"""Parked records packed many to a DynamoDB item (backends/dynamodb/segments.py): pure, no moto."""

from __future__ import annotations

import pytest

from sluice.backends.dynamodb import segments
from sluice.core.ports import ParkedRecord


def rec(offset: int, key: bytes | None = b"", value: bytes = b'{"x":1}', run_at: int = 0) -> ParkedRecord:
    job = f"job-{offset}"
    return ParkedRecord(3, offset, job.encode() if key == b"" else key, value, job,
                        1_700_000_000_000 + offset, run_at)


def test_a_segment_gives_back_every_record_as_parked_with_its_item() -> None:
    records = [rec(0), rec(7, key=None), rec(2**40, key=b"another key"), rec(9, value=b""),
               rec(12, value=bytes(range(256)) * 300, run_at=1_800_000_000_000)]
    back = segments.unpack(3, segments.pack(records), ("o#000003#x", 5))
    assert [r._replace(item=None) for r in back] == records
    assert {r.item for r in back} == {("o#000003#x", 5)}
    assert back[0].key == b"job-0" and back[1].key is None  # a key that is the job id is kept once


def test_a_record_keyed_by_its_job_id_costs_its_id_once() -> None:
    keyed = segments.size(rec(1))
    assert keyed == segments.HEAD.size + len(b'{"x":1}') + len(b"job-1") == segments.size(rec(1, key=None))
    assert segments.size(rec(1, key=b"other")) == keyed + len(b"other")


def test_chunks_keep_each_segment_within_its_bytes_and_a_large_record_alone() -> None:
    small = [rec(o) for o in range(100)]
    big = rec(100, value=b"v" * 5000)
    limit = 20 * segments.size(small[0])
    runs = segments.chunks([*small, big, rec(101)], limit)
    assert [r.offset for run in runs for r in run] == list(range(102))  # every record, in order
    assert all(len(segments.pack(run)) <= limit for run in runs if big not in run)
    assert [big] in runs and runs[-1] == [rec(101)] and len(runs) > 5  # a big one alone, the next after it
    assert segments.chunks([]) == []


@pytest.mark.parametrize("blob", [b"", b"\x02", segments.pack([rec(1)])[:-3], b"\x01" + b"\x00" * 10])
def test_bytes_that_are_not_a_segment_are_refused(blob: bytes) -> None:
    with pytest.raises(segments.SegmentError):
        segments.unpack(0, blob)
