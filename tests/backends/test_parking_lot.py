"""The parking lot on a real (moto) DynamoDB (issue 28, ``backends/dynamodb/parking.py``).

A lane reads back in offset order from any point, whatever order its records were written in;
a re-park of the same record is one item (an idempotent put); markers name the queues of a
partition; a release deletes; the TTL is past the job life bound; errors are sluice errors.
"""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from sluice.backends.dynamodb import segments
from sluice.backends.dynamodb.parking import DynamoParkingLot, expires_at
from sluice.backends.dynamodb.tables import create_parked_table
from sluice.core.errors import InvalidInput, SluiceError
from sluice.core.limits import JOB_LIFE_MS
from sluice.core.ports import ParkedRecord

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def rec(partition: int, offset: int, key: bytes | None = b"k") -> ParkedRecord:
    return ParkedRecord(partition, offset, key, b'{"job_id":"j%d"}' % offset, f"j{offset}",
                        1_700_000_000_000, 0)


@pytest.fixture
def lot(moto_url: str, unique: str) -> DynamoParkingLot:
    client = boto3.client("dynamodb", endpoint_url=moto_url, region_name="us-east-1")
    create_parked_table(client, f"parked-{unique}")
    return DynamoParkingLot(client, f"parked-{unique}")


def test_a_lane_comes_back_in_offset_order_from_any_point_and_a_repark_is_one_item(
        lot: DynamoParkingLot) -> None:
    offsets = [7, 1_000_000, 3, 99, 12, 100]  # out of order, and across digit counts
    lot.park("a", 2, [rec(2, o) for o in offsets])
    lot.park("a", 2, [rec(2, 99), rec(2, 3, key=None)])  # the same records again (a replay)
    lot.park("a", 3, [rec(3, 5)])
    lot.park("b", 2, [rec(2, 8)])
    assert [r.offset for r in lot.page("a", 2, -1, 100)] == sorted(offsets)
    assert [r.offset for r in lot.page("a", 2, 12, 2)] == [99, 100]
    assert lot.page("a", 2, 1_000_000, 10) == []
    back = lot.page("a", 2, -1, 1)[0]
    assert back.record().value == b'{"job_id":"j3"}' and back.key is None and back.job_id == "j3"
    assert (lot.count("a"), lot.count("b")) == (7, 1)  # each record once, in however many segments
    assert sorted(lot.marked(2)) == ["a", "b"] and lot.marked(3) == ["a"] and lot.marked(4) == []


def test_release_deletes_and_unmark_forgets_the_marker(lot: DynamoParkingLot) -> None:
    lot.park("a", 0, [rec(0, o) for o in range(60)])  # one segment
    assert lot.count("a") == 60
    # a segment goes only once every record of it is released: until then it stays, whole
    assert lot.release("a", lot.page("a", 0, -1, 40)) == 0
    assert [r.offset for r in lot.page("a", 0, -1, 100)] == list(range(60))
    assert lot.release("a", lot.page("a", 0, -1, 10, whole=True)) == 60  # the sweep's read: whole
    assert lot.page("a", 0, -1, 100) == [] and lot.count("a") == 0
    lot.release("a", [rec(0, 0)])  # gone already: an idempotent delete
    lot.unmark("a", 0)
    assert lot.marked(0) == []


def test_release_deletes_each_segment_once_all_of_its_records_are_released(
        moto_url: str, unique: str) -> None:
    client = boto3.client("dynamodb", endpoint_url=moto_url, region_name="us-east-1")
    create_parked_table(client, f"parked-{unique}")
    lot = DynamoParkingLot(client, f"parked-{unique}", segment_bytes=10 * segments.size(rec(0, 0)))
    lot.park("a", 0, [rec(0, o) for o in range(60)])  # segments of 9
    head = lot.page("a", 0, -1, 20)
    assert {r.item for r in head} and all(r.item is not None and r.item[1] == 9 for r in head)
    assert lot.release("a", head) == 18  # two whole segments and two records of the third
    assert [r.offset for r in lot.page("a", 0, -1, 100)] == list(range(18, 60))
    assert [r.offset for r in lot.page("a", 0, -1, 1, whole=True)] == list(range(18, 27))


def test_the_ttl_is_a_backstop_past_the_job_life_bound() -> None:
    r = rec(0, 1)
    assert expires_at(r) * 1000 > r.enqueued_at_ms + JOB_LIFE_MS


def test_a_missing_table_is_a_sluice_error(moto_url: str) -> None:
    client = boto3.client("dynamodb", endpoint_url=moto_url, region_name="us-east-1")
    lot = DynamoParkingLot(client, "no-such-table")
    with pytest.raises(SluiceError):
        lot.park("a", 0, [rec(0, 1)])
    with pytest.raises(SluiceError):
        lot.page("a", 0, -1, 10)
    with pytest.raises(SluiceError):
        lot.marked(0)


def delayed_rec(partition: int, offset: int, run_at_ms: int) -> ParkedRecord:
    return ParkedRecord(partition, offset, b"k", b'{"job_id":"d%d"}' % offset, f"d{offset}",
                        1_700_000_000_000, run_at_ms)


def test_a_delay_lane_comes_back_by_run_time_apart_from_the_ordered_lane(lot: DynamoParkingLot) -> None:
    t = 1_700_000_000_000
    records = [delayed_rec(2, 5, t + 900), delayed_rec(2, 1, t + 50), delayed_rec(2, 9, t + 50),
               delayed_rec(2, 3, t + 7_000_000)]
    lot.park("a", 2, records, delay=True)
    lot.park("a", 2, records[:2], mark=False, delay=True)  # a re-park: the same items
    lot.park("a", 2, [rec(2, 4)])  # the ordered lane of the same queue and partition
    lot.park("a", 3, [delayed_rec(3, 0, t)], delay=True)
    order = [(r.run_at_ms - t, r.offset) for r in lot.due("a", 2, None, 10)]
    assert order == [(50, 1), (50, 9), (900, 5), (7_000_000, 3)]  # by run time, then offset
    assert [r.offset for r in lot.due("a", 2, (t + 50, 1), 2)] == [9, 5]
    assert [r.offset for r in lot.page("a", 2, -1, 10)] == [4]  # neither lane reads the other
    assert sorted(lot.marked(2)) == ["a", "~d#a"] and lot.marked(3) == ["~d#a"]
    assert lot.count("a") == 6
    lot.release("a", lot.due("a", 2, None, 2), delay=True)
    assert [r.offset for r in lot.due("a", 2, None, 10)] == [5, 3]
    assert [r.offset for r in lot.page("a", 2, -1, 10)] == [4]


def test_a_park_of_hundreds_goes_out_in_overlapping_batches_and_all_lands(lot: DynamoParkingLot) -> None:
    lot.park("a", 1, [rec(1, o) for o in range(310)])  # 13 BatchWriteItems, 4 at a time
    assert [r.offset for r in lot.page("a", 1, -1, 1000)] == list(range(310))
    lot.release("a", lot.page("a", 1, -1, 1000))
    assert lot.count("a") == 0


def test_a_batch_left_unprocessed_fails_the_whole_park_with_a_sluice_error(lot: DynamoParkingLot) -> None:
    real = lot.client.batch_write_item

    def throttled(**kwargs: Any) -> Any:  # the batch holding offset 30 is throttled every time
        if "j30" in str(kwargs["RequestItems"]):
            return {"UnprocessedItems": kwargs["RequestItems"]}
        return real(**kwargs)

    client = lot.client
    lot.client = type("Client", (), {"batch_write_item": staticmethod(throttled),
                                     "put_item": client.put_item})()
    lot._sleep = lambda _s: None
    lot.segment_bytes = 1  # a segment a record: 100 items, 4 BatchWriteItems
    with pytest.raises(SluiceError, match="left unprocessed"):
        lot.park("a", 1, [rec(1, o) for o in range(100)])
    lot.client = client
    assert lot.count("a") == 75  # the other batches landed: the relay parks all 100 again (idempotent)


def old_item(queue: str, r: ParkedRecord) -> dict[str, Any]:
    """A record as the lot parked it before segments (one item a record), frozen here as written then."""
    return {"pk": {"S": queue}, "sk": {"S": f"o#{r.partition:06d}#{r.offset:020d}"}, "v": {"B": r.value},
            "k": {"B": r.key}, "job": {"S": r.job_id}, "enq": {"N": str(r.enqueued_at_ms)},
            "run_at": {"N": str(r.run_at_ms)}, "expires_at": {"N": str(expires_at(r))}}


def test_an_upgrade_with_records_parked_one_an_item_reads_them_all_in_order_and_loses_none(
        lot: DynamoParkingLot) -> None:
    for o in range(0, 40):  # parked by the relay before segments
        lot.client.put_item(TableName=lot.table, Item=old_item("a", rec(1, o)))
    # the new relay: a re-park of some (its new owner re-read them from Kafka), then new records
    lot.park("a", 1, [rec(1, o) for o in range(30, 45)], mark=False)
    lot.park("a", 1, [rec(1, o) for o in range(45, 100)], mark=False)
    assert lot.count("a") == 100
    read, after = [], -1
    while page := lot.page("a", 1, after, 7):  # read back in small pages, as a held queue's buffer has room
        assert len(page) == 7 or page[-1].offset == 99
        read += page
        after = page[-1].offset
    assert [r.offset for r in read] == list(range(100))  # each once, in order
    assert read[3].item is None and read[3].value == rec(1, 3).value and read[50].item is not None
    # the sweep: whole pages from the start, every job final: every item goes, the old ones too
    released = 0
    while page := lot.page("a", 1, -1, 100, whole=True):
        released += lot.release("a", page)
    assert lot.count("a") == 0 and released >= 100


def test_a_repark_cut_otherwise_ending_at_the_same_record_overwrites_no_segment(
        lot: DynamoParkingLot) -> None:
    """A new owner re-reads Kafka from a commit point inside a parked segment (another queue's record
    held it there) and parks again the records it is given, ending where the segment ended."""
    lot.park("a", 0, [rec(0, o) for o in range(10, 60)])
    lot.park("a", 0, [rec(0, o) for o in range(35, 60)], mark=False)
    assert [r.offset for r in lot.page("a", 0, -1, 100)] == list(range(10, 60))
    assert lot.count("a") == 50


# -- the operator's listing, state=parked (issue 32's review): newest, read backwards ------------------


def listed(partition: int, offset: int, run_at_ms: int = 0, job: str | None = None) -> ParkedRecord:
    job_id = job or f"p{partition}-{offset}"
    value = b'{"job_id":"%s","payload":{"n":%d},"priority":3}' % (job_id.encode(), offset)
    return ParkedRecord(partition, offset, b"k", value, job_id, 1_700_000_000_000, run_at_ms)


def filled(lot: DynamoParkingLot) -> list[tuple[int, str]]:
    """Held lanes in segments and delay lanes in two partitions, and another queue's; the order the
    listing must give: the held records, by partition (highest first) and newest offset first, then
    the delayed ones, by partition and latest run time first."""
    t = 1_700_000_000_000
    lot.segment_bytes = 200  # a few records a segment: pages end inside segments
    held = {0: list(range(10, 40)), 2: list(range(100, 112))}
    delayed = {0: [(t + 5_000 * (i % 7), 500 + i) for i in range(15)], 1: [(t + 9, 900), (t + 9, 901)]}
    for partition, offsets in held.items():
        lot.park("q", partition, [listed(partition, o) for o in offsets])
    lot.park("q", 0, [listed(0, 12), listed(0, 13)])  # a re-park, cut otherwise: no repeat on a page
    for partition, runs in delayed.items():
        lot.park("q", partition, [listed(partition, o, run) for run, o in runs], delay=True)
    lot.park("other", 0, [listed(0, 1, job="elsewhere")])
    order = [((1, p, 0, o), f"p{p}-{o}") for p, offsets in held.items() for o in offsets]
    order += [((0, p, run, o), f"p{p}-{o}") for p, runs in delayed.items() for run, o in runs]
    return [(i, job) for i, (_, job) in enumerate(sorted(order, reverse=True))]


def walk_lot(lot: DynamoParkingLot, limit: int, prefix: str | None = None) -> tuple[list[str], list[int]]:
    seen, examined, after = [], [], None
    for _ in range(500):
        page = lot.newest("q", after, limit, prefix)
        seen += [r.job_id for r, _ in page.records]
        examined.append(page.examined)
        if page.next is None:
            return seen, examined
        after = page.next
    raise AssertionError("the walk did not end")


def test_the_listing_reads_a_queues_parked_records_newest_first_across_lanes_and_pages(
        lot: DynamoParkingLot) -> None:
    expected = [job for _, job in filled(lot)]
    assert len(expected) == 30 + 12 + 15 + 2
    for limit in (1, 7, 100):
        assert walk_lot(lot, limit)[0] == expected, limit
    first = lot.newest("q", None, 3)
    assert [d for _, d in first.records] == [False, False, False] and first.records[0][0].offset == 111
    assert walk_lot(lot, 4, prefix="p0-5")[0] == [j for j in expected if j.startswith("p0-5")]
    assert lot.newest("q", None, 5, prefix="nobody").records == []


def test_a_parked_page_stops_at_its_budget_and_goes_on_from_there(
        lot: DynamoParkingLot, monkeypatch: pytest.MonkeyPatch) -> None:
    import sluice.backends.dynamodb.parking as parking

    expected = [job for _, job in filled(lot)]
    monkeypatch.setattr(parking, "SCAN_MOST", 10)
    seen, examined = walk_lot(lot, 50, prefix="p")
    assert seen == expected and len(examined) > 1
    assert max(examined) < 10 + 10  # the budget and the rest of one segment (200 bytes: a few records)


@pytest.mark.parametrize("bad", ["x1-2", "d1-2", "d1-2-3-4", "o1", "d1-1000000000000000-1",
                                 "o1-100000000000000000000", "d-1-2", "o1-a"])
def test_a_cursor_that_names_no_place_in_the_lot_is_refused_before_any_read(lot: DynamoParkingLot,
                                                                            bad: str) -> None:
    with pytest.raises(InvalidInput):
        lot.newest("q", (bad, 0), 5)


def test_compact_keys_round_trip() -> None:
    from sluice.backends.dynamodb.parking import compact_key, delay_key, item_key, lane_key, segment_key

    for sk in (delay_key(3, 1_765_000_000_000, 42), lane_key(0, 7), segment_key(12, 100, 250)):
        assert item_key(compact_key(sk)) == sk
