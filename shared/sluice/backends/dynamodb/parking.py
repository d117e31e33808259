"""The parking lot on DynamoDB (issue 28): held records wait here, outside the shared partitions.

One on-demand table (template.yaml ``ParkedTable``), key ``pk`` + ``sk`` (strings):

- a segment of parked records (backends/dynamodb/segments.py): ``pk`` their queue, ``sk``
  ``o#<partition, 6 digits>#<offset of its last record, 20 digits>#<of its first, 20 digits>``
  (``segment_key``), so one Query from any offset reads a (queue, partition) lane in offset order;
  ``seg`` the records packed (each with its key and value as Kafka had them: the relay decodes and
  checks the seal again when they come back; and the job id, acceptance and run-at times the sweep
  needs without decoding), ``n`` how many, ``first`` the first offset, ``expires_at`` (TTL,
  seconds: a backstop a margin past the latest of their jobs' life bounds; the relay's sweep ends
  such a job first). A segment is deleted only once every one of its records is released;
- a record parked alone, as every ordered-lane record was before segments (still read, never
  written): the same key with its own offset, ``v`` its value, ``k`` its key, ``job``, ``enq``,
  ``run_at``, ``expires_at``;
- a marker: ``pk`` ``~parked#<partition, 6 digits>``, ``sk`` the queue (queue names never start with
  ``~``): the queues a new owner of the partition must read back before pushing their new records;
- the delay lane (records due beyond the relay's horizon): ``pk`` the queue, ``sk``
  ``d#<partition, 6 digits>#<run-at ms, 15 digits>#<offset, 20 digits>``, so one Query reads a
  (queue, partition) delay lane by run time, one item a record as above (a delay lane is read by run
  time, not in the order records were parked, so its records are not packed); its marker's ``sk`` is
  ``DELAY_MARKER`` + the queue.

Errors are translated to sluice errors (``errors.translate``); nothing here is conditional.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any, Final

from sluice.backends.dynamodb import segments
from sluice.backends.dynamodb.errors import translated
from sluice.core.errors import BackendUnavailable, InvalidInput
from sluice.core.limits import DAY_MS, JOB_LIFE_MS
from sluice.core.listing import SCAN_MOST
from sluice.core.ports import DELAY_MARKER, ParkedPage, ParkedRecord

BATCH: Final = 25  # BatchWriteItem's most
UNPROCESSED_TRIES: Final = 5
CONCURRENT_BATCHES: Final = 4  # a lane's park of hundreds of records: its BatchWriteItems a few at once
TTL_MARGIN_MS: Final = 2 * DAY_MS  # the backstop: only past the life bound and the relay's sweep
MARKER_PREFIX: Final = "~parked#"


def lane_key(partition: int, offset: int) -> str:
    return f"o#{partition:06d}#{offset:020d}"


def segment_key(partition: int, first: int, last: int) -> str:
    """A segment's key: by its last record's offset first, so that a lane's Query from any offset finds
    each segment holding a record above it, in order, beside the items of one record each
    (``lane_key``); then by its first, so that a re-park cut otherwise (a new owner parks again what
    Kafka gives it again, from a commit point inside a segment) never overwrites a segment with one
    holding fewer of its records."""
    return f"{lane_key(partition, last)}#{first:020d}"


def delay_key(partition: int, run_at_ms: int, offset: int) -> str:
    return f"d#{partition:06d}#{run_at_ms:015d}#{offset:020d}"


def _key(r: ParkedRecord, delay: bool) -> str:
    return delay_key(r.partition, r.run_at_ms, r.offset) if delay else lane_key(r.partition, r.offset)


def marker_pk(partition: int) -> str:
    return f"{MARKER_PREFIX}{partition:06d}"


def expires_at(record: ParkedRecord) -> int:
    """The TTL (epoch seconds): past the job's life bound by a margin, whatever its delay."""
    return (record.enqueued_at_ms + JOB_LIFE_MS + TTL_MARGIN_MS) // 1000


def _item(queue: str, r: ParkedRecord, delay: bool) -> dict[str, Any]:
    item: dict[str, Any] = {"pk": {"S": queue}, "sk": {"S": _key(r, delay)},
                            "v": {"B": r.value}, "job": {"S": r.job_id}, "enq": {"N": str(r.enqueued_at_ms)},
                            "run_at": {"N": str(r.run_at_ms)}, "expires_at": {"N": str(expires_at(r))}}
    if r.key is not None:
        item["k"] = {"B": r.key}
    return item


def _segment(queue: str, partition: int, records: Sequence[ParkedRecord]) -> dict[str, Any]:
    return {"pk": {"S": queue}, "sk": {"S": segment_key(partition, records[0].offset, records[-1].offset)},
            "seg": {"B": segments.pack(records)}, "n": {"N": str(len(records))},
            "first": {"N": str(records[0].offset)},
            "expires_at": {"N": str(max(expires_at(r) for r in records))}}


def _records(item: dict[str, Any]) -> list[ParkedRecord]:
    """An item's records: a segment's, or the one record an item of its own holds."""
    sk = item["sk"]["S"]
    parts = sk.split("#")  # o#<partition>#<offset> or d#<partition>#<run-at>#<offset>
    partition, offset = int(parts[1]), int(parts[-1])
    if "seg" in item:
        return segments.unpack(partition, bytes(item["seg"]["B"]), (sk, int(item["n"]["N"])))
    key = item.get("k")
    return [ParkedRecord(partition, offset, bytes(key["B"]) if key else None, bytes(item["v"]["B"]),
                         item["job"]["S"], int(item["enq"]["N"]), int(item["run_at"]["N"]))]


def compact_key(sk: str) -> str:
    """An item's key as a listing's cursor holds it: ``d#000001#001765000000000#000...42`` ->
    ``d1-1765000000000-42``, ``o#000003#000...1234#000...1200`` -> ``o3-1234-1200``."""
    kind, partition, *rest = sk.split("#")
    return f"{kind}{int(partition)}-" + "-".join(str(int(n)) for n in rest)


def item_key(compact: str) -> str:
    """``compact_key`` undone; InvalidInput for a key no item of the lot could have."""
    kind, numbers = compact[:1], compact[1:].split("-")
    try:
        partition, *rest = (int(n) for n in numbers)
    except ValueError:
        raise InvalidInput(f"invalid cursor: no place in the parking lot ({compact!r})") from None
    fits = partition < 10**6 and all(n < 10**20 for n in rest)
    if kind == "d" and len(rest) == 2 and fits and rest[0] < 10**15:
        return delay_key(partition, rest[0], rest[1])
    if kind == "o" and len(rest) == 1 and fits:
        return lane_key(partition, rest[0])
    if kind == "o" and len(rest) == 2 and fits:
        return segment_key(partition, rest[1], rest[0])
    raise InvalidInput(f"invalid cursor: no place in the parking lot ({compact!r})")


def in_order(records: Sequence[ParkedRecord], after: int) -> list[ParkedRecord]:
    """Records of a lane's items, once each, in offset order, above ``after``: a re-park after a crash
    may cut a lane into other segments than the first park did (the same record, the same bytes)."""
    seen: dict[int, ParkedRecord] = {}
    for r in records:
        if r.offset > after:
            seen.setdefault(r.offset, r)
    return [seen[o] for o in sorted(seen)]


class DynamoParkingLot:
    """``relay.ports.ParkingLot`` on the parked table."""

    def __init__(self, client: Any, table_name: str, *, sleep: Any = time.sleep,
                 segment_bytes: int = segments.SEGMENT_BYTES) -> None:
        self.client, self.table, self._sleep = client, table_name, sleep
        self.segment_bytes = segment_bytes  # a segment's packed records at most (tests: smaller)
        self._pool: ThreadPoolExecutor | None = None

    def park(self, queue: str, partition: int, records: Sequence[ParkedRecord], *, mark: bool = True,
             delay: bool = False) -> None:
        if not records:
            return
        if mark:  # the marker first: a record is never parked where a new owner would not look for it
            with translated(f"put_item {self.table}"):
                self.client.put_item(TableName=self.table, Item={
                    "pk": {"S": marker_pk(partition)}, "sk": {"S": DELAY_MARKER + queue if delay else queue}})
        if delay:
            self._batch(queue, [{"PutRequest": {"Item": _item(queue, r, delay)}} for r in records])
            return
        ordered = in_order(records, -1)
        self._batch(queue, [{"PutRequest": {"Item": _segment(queue, partition, run)}}
                            for run in segments.chunks(ordered, self.segment_bytes)])

    def page(self, queue: str, partition: int, after: int, limit: int, *,
             whole: bool = False) -> list[ParkedRecord]:
        """Up to ``limit`` records above ``after`` (``whole``: every record of the items read, so the
        sweep sees each segment it looks at entirely). Items are read a few at a time: a segment holds
        hundreds of records, and a Query reads (and bills) every item it returns."""
        kwargs: dict[str, Any] = {
            "TableName": self.table, "ConsistentRead": True,
            "KeyConditionExpression": "pk = :q AND sk BETWEEN :lo AND :hi",
            "ExpressionAttributeValues": {":q": {"S": queue}, ":lo": {"S": lane_key(partition, after + 1)},
                                          ":hi": {"S": lane_key(partition, 10**20 - 1)}}}
        found: dict[int, ParkedRecord] = {}  # by offset: each once, only those above ``after``
        # records an item holds, as far as seen (at first: guess segments, and ask for two items)
        per_item = float(max(1, limit // 2))
        with translated(f"query {self.table}"):
            while len(found) < limit:
                kwargs["Limit"] = max(1, min(limit, -(-(limit - len(found)) // max(1, int(per_item)))))
                answer = self.client.query(**kwargs)
                items = answer.get("Items", [])
                got = [r for item in items for r in _records(item) if r.offset > after]
                for r in got:
                    found.setdefault(r.offset, r)
                per_item = len(got) / len(items) if items else per_item
                if "LastEvaluatedKey" not in answer:
                    break
                kwargs["ExclusiveStartKey"] = answer["LastEvaluatedKey"]
        ordered = [found[o] for o in sorted(found)]
        return ordered if whole else ordered[:limit]

    def due(self, queue: str, partition: int, after: tuple[int, int] | None,
            limit: int) -> list[ParkedRecord]:
        run_at, offset = after or (0, -1)
        lo = delay_key(partition, run_at, offset + 1)
        return self._range(queue, lo, delay_key(partition, 10**15 - 1, 10**20 - 1), limit)

    def _range(self, queue: str, lo: str, hi: str, limit: int) -> list[ParkedRecord]:
        kwargs: dict[str, Any] = {
            "TableName": self.table, "ConsistentRead": True, "Limit": limit,
            "KeyConditionExpression": "pk = :q AND sk BETWEEN :lo AND :hi",
            "ExpressionAttributeValues": {":q": {"S": queue}, ":lo": {"S": lo}, ":hi": {"S": hi}}}
        with translated(f"query {self.table}"):
            items = self.client.query(**kwargs).get("Items", [])
        return [r for item in items for r in _records(item)]

    def release(self, queue: str, records: Sequence[ParkedRecord], *, delay: bool = False) -> int:
        """Delete the items of these records: a record's own, and a segment once all of its records
        are among them (else it stays, and a later release deletes it). Returns the records deleted."""
        keys: dict[str, int] = {}
        parts: dict[str, set[int]] = {}
        for r in records:
            if r.item is None:
                keys[_key(r, delay)] = 1
            else:
                parts.setdefault(r.item[0], set()).add(r.offset)
                if len(parts[r.item[0]]) >= r.item[1]:
                    keys[r.item[0]] = r.item[1]
        self._batch(queue, [{"DeleteRequest": {"Key": {"pk": {"S": queue}, "sk": {"S": sk}}}} for sk in keys])
        return sum(keys.values())

    def marked(self, partition: int) -> list[str]:
        kwargs: dict[str, Any] = {"TableName": self.table, "ConsistentRead": True,
                                  "KeyConditionExpression": "pk = :p",
                                  "ExpressionAttributeValues": {":p": {"S": marker_pk(partition)}}}
        queues: list[str] = []
        with translated(f"query {self.table}"):
            while True:
                page = self.client.query(**kwargs)
                queues += [item["sk"]["S"] for item in page.get("Items", [])]
                if "LastEvaluatedKey" not in page:
                    return queues
                kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def unmark(self, queue: str, partition: int) -> None:
        with translated(f"delete_item {self.table}"):
            self.client.delete_item(TableName=self.table, Key={"pk": {"S": marker_pk(partition)},
                                                               "sk": {"S": queue}})

    def count(self, queue: str) -> int:
        kwargs: dict[str, Any] = {"TableName": self.table, "KeyConditionExpression": "pk = :q",
                                  "ExpressionAttributeValues": {":q": {"S": queue}}}
        seen: set[str] = set()  # each record once, however many segments a re-park put it in
        with translated(f"query {self.table}"):
            while True:
                page = self.client.query(**kwargs)
                for item in page.get("Items", []):
                    if "seg" in item:
                        seen.update(lane_key(r.partition, r.offset) for r in _records(item))
                    else:
                        seen.add(item["sk"]["S"])
                if "LastEvaluatedKey" not in page:
                    return len(seen)
                kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def newest(self, queue: str, after: tuple[str, int] | None, limit: int,
               prefix: str | None = None) -> ParkedPage:
        """``ParkedJobs.newest`` (the operator's listing, ``state=parked``): the queue's items in key
        order read backwards (one Query, a few items at a time, eventually consistent: half the
        read's price), each segment's records newest offset first. That is the held lanes' records
        first, by partition (highest first) and newest first, then the delay lanes', by partition
        and latest run time first. ``after``: the cursor's place (compact item key, offset); the page goes on
        strictly after it. A record a re-park put in two segments is listed once a page."""
        hi = "o#~" if after is None else item_key(after[0])  # "d#..." < "o#..." < "o#~"
        kwargs: dict[str, Any] = {
            "TableName": self.table, "ScanIndexForward": False,
            "KeyConditionExpression": "pk = :q AND sk BETWEEN :lo AND :hi",
            "ExpressionAttributeValues": {":q": {"S": queue}, ":lo": {"S": "d#"}, ":hi": {"S": hi}}}
        want, per_item = limit + 1, 1.0
        picked: list[tuple[ParkedRecord, bool, str]] = []
        seen: set[tuple[bool, int, int]] = set()
        examined = 0
        with translated(f"query {self.table}"):
            while True:
                kwargs["Limit"] = max(1, min(100, int(-(-(want - len(picked)) // per_item))))
                answer = self.client.query(**kwargs)
                items = answer.get("Items", [])
                held = 0
                for item in items:
                    sk = item["sk"]["S"]
                    delayed = sk.startswith("d#")
                    records = sorted(_records(item), key=lambda r: r.offset, reverse=True)
                    held += len(records)
                    for r in records:
                        if after is not None and sk == hi and r.offset >= after[1]:
                            continue
                        if (delayed, r.partition, r.offset) in seen:
                            continue
                        seen.add((delayed, r.partition, r.offset))
                        examined += 1
                        if prefix is None or r.job_id.startswith(prefix):
                            picked.append((r, delayed, sk))
                            if len(picked) == want:
                                last = picked[limit - 1]
                                return ParkedPage([(r, d) for r, d, _ in picked[:limit]],
                                                  (compact_key(last[2]), last[0].offset), examined)
                    if examined >= SCAN_MOST and records:  # the budget spent: go on after this item
                        return ParkedPage([(r, d) for r, d, _ in picked],
                                          (compact_key(sk), records[-1].offset), examined)
                per_item = held / len(items) if items else per_item
                if "LastEvaluatedKey" not in answer:
                    return ParkedPage([(r, d) for r, d, _ in picked], None, examined)
                kwargs["ExclusiveStartKey"] = answer["LastEvaluatedKey"]

    def _batch(self, queue: str, requests: list[dict[str, Any]]) -> None:
        """BatchWriteItem in 25s, ``CONCURRENT_BATCHES`` at once (a held queue's flood is parked at
        the rate it comes only if its writes overlap), each sending back what DynamoDB left
        unprocessed (throttled) a few times before giving up: ``BackendUnavailable`` (the relay
        tries again at its next turn: the puts and deletes are idempotent)."""
        chunks = [requests[i:i + BATCH] for i in range(0, len(requests), BATCH)]
        if len(chunks) <= 1:
            for chunk in chunks:
                self._write(queue, chunk)
            return
        if self._pool is None:  # boto3 clients are thread-safe
            self._pool = ThreadPoolExecutor(max_workers=CONCURRENT_BATCHES, thread_name_prefix="sluice-lot")
        sent = [self._pool.submit(self._write, queue, chunk) for chunk in chunks]
        wait(sent)  # every batch has landed or failed before the caller hears of either
        for done in sent:
            done.result()  # the first error: the caller tries the whole park again (idempotent puts)

    def _write(self, queue: str, pending: list[dict[str, Any]]) -> None:
        for attempt in range(UNPROCESSED_TRIES):
            with translated(f"batch_write_item {self.table}"):
                left = self.client.batch_write_item(RequestItems={self.table: pending}).get(
                    "UnprocessedItems", {})
            pending = left.get(self.table, [])
            if not pending:
                return
            self._sleep(0.05 * 2**attempt)
        raise BackendUnavailable(f"batch_write_item {self.table}: {len(pending)} writes of queue "
                                 f"{queue!r} left unprocessed", operation="batch_write_item")
