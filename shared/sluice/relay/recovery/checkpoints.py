"""Checkpoints in the jobs table, with a pending list of any length.

A checkpoint lists every record below its ``high`` whose job was not final (docs/redis-loss.md).
That list has no bound: 2,000 jobs delayed by a day stay on it for a day, while ``high`` moves
on past them. So it is kept in two parts:

- the newest entries inline, in the checkpoint item (``pending``, at most ``inline_bytes``);
- older ones in **pages**, items of their own (``~relay-page~<random id>``, at most
  ``page_bytes`` each), listed by key in the checkpoint item (``pages``).

A page is written once and never changed: a save writes new pages only for entries that no
page holds yet and for pages that lost entries (their jobs became final), then the checkpoint
item (conditional on the epoch, as before) naming the pages it uses. So a long-lived backlog
costs a page write when it appears and when it shrinks, not on every checkpoint.

Pages are never deleted outright: another relay (a frozen one, say) may still name a page in
its own next save. A page our save stopped naming is marked to expire after ``superseded_s``
(the table's TTL attribute), and a load that finds a page so marked writes its entries again
under a new key at its next save. If a page named by the checkpoint is missing all the same,
the checkpoint comes back ``complete=False`` and the next session reads the partition again
from ``low_water`` (``tracker.plan_start``): slower, never unsafe.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from sluice.backends.dynamodb.errors import is_conditional_failure
from sluice.backends.dynamodb.errors import translate as translate_aws
from sluice.core.errors import BackendUnavailable
from sluice.relay.recovery.tracker import Checkpoint

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

log = logging.getLogger(__name__)

CHECKPOINT_KIND = "relay-checkpoint"
PAGE_KIND = "relay-checkpoint-page"
PAGE_BYTES = 100_000  # a DynamoDB item holds 400 KB
INLINE_BYTES = 50_000
SUPERSEDED_S = 7 * 24 * 3600
BATCH_GET_LIMIT = 100
BATCH_GET_ROUNDS = 5

Entry = tuple[int, str]


def checkpoint_key(topic: str, partition: int) -> str:
    return f"~relay~{topic}~{int(partition)}"


def _size(entries: Sequence[Entry]) -> int:
    """About the JSON size of ``entries``: an offset has at most 16 digits, plus punctuation."""
    return sum(len(job_id) + 22 for _, job_id in entries)


def _dump(entries: Sequence[Entry]) -> str:
    return json.dumps([list(e) for e in entries], separators=(",", ":"))


def _parse(text: str) -> tuple[Entry, ...]:
    return tuple((int(o), str(j)) for o, j in json.loads(text))


@dataclass(frozen=True, slots=True)
class _Page:
    key: str
    entries: tuple[Entry, ...]
    superseded: bool = False  # someone marked it to expire: write its entries again


class DynamoCheckpoints:
    def __init__(self, client: DynamoDBClient, table: str, *, page_bytes: int = PAGE_BYTES,
                 inline_bytes: int = INLINE_BYTES, superseded_s: int = SUPERSEDED_S,
                 now_s: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep) -> None:
        self._db = client
        self.table = table
        self.page_bytes, self.inline_bytes, self.superseded_s = page_bytes, inline_bytes, superseded_s
        self._now_s, self._sleep = now_s, sleep
        self._pages: dict[tuple[str, int], list[_Page]] = {}  # what our last load or save named

    # -- load -------------------------------------------------------------------------------------

    def load(self, topic: str, partition: int) -> Checkpoint | None:
        try:
            item = self._db.get_item(TableName=self.table, ConsistentRead=True,
                                     Key={"job_id": {"S": checkpoint_key(topic, partition)}}).get("Item")
        except (BotoCoreError, ClientError) as exc:
            raise translate_aws(exc, "checkpoint load") from exc
        keys = json.loads(item["pages"]["S"]) if item and "pages" in item else []
        return self._checkpoint(topic, partition, item, self._read_pages([str(k) for k in keys]))

    def load_many(self, topic: str, partitions: Sequence[int]) -> dict[int, Checkpoint | None]:
        """``load`` of each partition, in one BatchGetItem for the checkpoints and one for all their
        pages (a relay taking 8 partitions: 2 requests, not 8 or more, on its cold start)."""
        keys = {p: checkpoint_key(topic, p) for p in partitions}
        items = self._batch_get(list(keys.values()), "checkpoint load")
        page_keys = {p: [str(k) for k in json.loads(items[key]["pages"]["S"])]
                     for p, key in keys.items() if key in items and "pages" in items[key]}
        pages = {k: _Page(k, _parse(it["entries"]["S"]), "expires_at" in it) for k, it in self._batch_get(
            [k for ks in page_keys.values() for k in ks], "checkpoint page load").items()}
        return {p: self._checkpoint(topic, p, items.get(key),
                                    [pages[k] for k in page_keys.get(p, []) if k in pages])
                for p, key in keys.items()}

    def _checkpoint(self, topic: str, partition: int, item: dict[str, Any] | None,
                    pages: list[_Page]) -> Checkpoint | None:
        """The checkpoint in ``item`` (None: there is none), with those of its ``pages`` found."""
        if not item:
            self._pages.pop((topic, partition), None)
            return None
        keys = json.loads(item["pages"]["S"]) if "pages" in item else []
        self._pages[(topic, partition)] = pages
        complete = len(pages) == len(keys)
        if not complete:
            log.warning("checkpoint of %s/%s names %d pages that are gone: the next session reads the "
                        "partition again from its low-water mark", topic, partition, len(keys) - len(pages))
        pending = sorted(set(_parse(item["pending"]["S"])).union(*(p.entries for p in pages)))
        return Checkpoint(topic, partition, item["epoch"]["S"], int(item["generation"]["N"]),
                          int(item["low_water"]["N"]), int(item["high"]["N"]), tuple(pending), complete)

    def _read_pages(self, keys: list[str]) -> list[_Page]:
        found = {k: _Page(k, _parse(it["entries"]["S"]), "expires_at" in it)
                 for k, it in self._batch_get(keys, "checkpoint page load").items()}
        return [found[k] for k in keys if k in found]

    def _batch_get(self, keys: list[str], what: str) -> dict[str, dict[str, Any]]:
        """The items of ``keys`` that exist, by key: consistent BatchGetItems of at most 100 keys,
        retrying the unprocessed ones."""
        found: dict[str, dict[str, Any]] = {}
        keys = list(dict.fromkeys(keys))  # a BatchGetItem refuses a key twice
        for start in range(0, len(keys), BATCH_GET_LIMIT):
            chunk = keys[start:start + BATCH_GET_LIMIT]
            request: list[dict[str, Any]] = [{"job_id": {"S": k}} for k in chunk]
            for round_ in range(BATCH_GET_ROUNDS):
                try:
                    response: Any = self._db.batch_get_item(RequestItems={
                        self.table: {"Keys": request, "ConsistentRead": True}})
                except (BotoCoreError, ClientError) as exc:
                    raise translate_aws(exc, what) from exc
                for it in response.get("Responses", {}).get(self.table, []):
                    found[str(it["job_id"]["S"])] = it
                request = list(response.get("UnprocessedKeys", {}).get(self.table, {}).get("Keys", []))
                if not request:
                    break
                self._sleep(min(1.0, 0.025 * 2**round_))
            else:
                raise BackendUnavailable(f"{what} left {len(request)} items unprocessed")
        return found

    # -- save -------------------------------------------------------------------------------------

    def save(self, ckpt: Checkpoint, expect_epoch: str | None) -> bool:
        where = (ckpt.topic, ckpt.partition)
        old = self._pages.get(where, [])
        kept, fresh, inline = self._layout(old, ckpt.pending)
        for page in fresh:
            self._put_page(page)
        used = kept + fresh
        if not self._put_checkpoint(ckpt, inline, [p.key for p in used], expect_epoch):
            self._supersede(fresh)  # named by nothing
            return False
        named = {p.key for p in used}
        self._supersede([p for p in old if p.key not in named])
        self._pages[where] = used
        return True

    def _layout(self, old: list[_Page], pending: Sequence[Entry]) -> tuple[list[_Page], list[_Page],
                                                                             list[Entry]]:
        """(pages kept as they are, pages to write, entries inline) holding exactly ``pending``."""
        wanted = set(pending)
        kept: list[_Page] = []
        fresh: list[_Page] = []
        held: set[Entry] = set()
        for page in old:
            still = tuple(e for e in page.entries if e in wanted)
            if still == page.entries and not page.superseded:
                kept.append(page)
            elif still:
                fresh.append(self._page(still))
            held.update(still)
        loose = [e for e in pending if e not in held]  # in offset order: new entries, mostly
        if _size(loose) > self.inline_bytes:
            # Page out the oldest, leaving about half the inline room for the next checkpoints.
            keep_inline: list[Entry] = []
            while loose and _size(keep_inline) + _size(loose[-1:]) <= self.inline_bytes // 2:
                keep_inline.insert(0, loose.pop())
            chunk: list[Entry] = []
            for e in loose:
                if chunk and _size(chunk) + _size([e]) > self.page_bytes:
                    fresh.append(self._page(tuple(chunk)))
                    chunk = []
                chunk.append(e)
            if chunk:
                fresh.append(self._page(tuple(chunk)))
            loose = keep_inline
        return kept, fresh, loose

    def _page(self, entries: tuple[Entry, ...]) -> _Page:
        return _Page(f"~relay-page~{uuid.uuid4().hex}", entries)

    def _put_page(self, page: _Page) -> None:
        item = {"job_id": {"S": page.key}, "kind": {"S": PAGE_KIND}, "entries": {"S": _dump(page.entries)},
                "updated_at_ms": {"N": str(int(self._now_s() * 1000))}}
        try:
            self._db.put_item(TableName=self.table, Item=item)
        except (BotoCoreError, ClientError) as exc:
            raise translate_aws(exc, "checkpoint page save") from exc

    def _put_checkpoint(self, ckpt: Checkpoint, inline: list[Entry], pages: list[str],
                        expect_epoch: str | None) -> bool:
        item = {"job_id": {"S": checkpoint_key(ckpt.topic, ckpt.partition)}, "kind": {"S": CHECKPOINT_KIND},
                "epoch": {"S": ckpt.epoch}, "generation": {"N": str(ckpt.generation)},
                "low_water": {"N": str(ckpt.low_water)}, "high": {"N": str(ckpt.high)},
                "pending": {"S": _dump(inline)}, "pages": {"S": json.dumps(pages)},
                "pending_count": {"N": str(len(ckpt.pending))},
                "updated_at_ms": {"N": str(int(self._now_s() * 1000))}}
        if expect_epoch is None:
            condition: dict[str, Any] = {"ConditionExpression": "attribute_not_exists(job_id)"}
        else:
            condition = {"ConditionExpression": "epoch = :e",
                         "ExpressionAttributeValues": {":e": {"S": expect_epoch}}}
        try:
            self._db.put_item(TableName=self.table, Item=item, **condition)
        except ClientError as exc:
            if is_conditional_failure(exc):
                return False
            raise translate_aws(exc, "checkpoint save") from exc
        except BotoCoreError as exc:
            raise translate_aws(exc, "checkpoint save") from exc
        return True

    def _supersede(self, pages: list[_Page]) -> None:
        """Let pages expire (TTL): never delete one another relay may still name (module doc)."""
        expires = str(int(self._now_s()) + self.superseded_s)
        for page in pages:
            try:
                self._db.update_item(TableName=self.table, Key={"job_id": {"S": page.key}},
                                     UpdateExpression="SET expires_at = :x",
                                     ExpressionAttributeValues={":x": {"N": expires}})
            except (BotoCoreError, ClientError) as exc:  # an unmarked page only lingers
                log.warning("could not mark checkpoint page %s to expire: %s",
                            page.key, translate_aws(exc, "checkpoint page expiry"))
