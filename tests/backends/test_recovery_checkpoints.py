"""DynamoCheckpoints against the moto server: a pending list of any length, in pages (issue 13, bug 3)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sluice.backends.dynamodb import tables
from sluice.core.config import Settings
from sluice.entry import root as wiring
from sluice.relay.recovery import Checkpoint
from sluice.relay.recovery.checkpoints import DynamoCheckpoints, checkpoint_key

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def store(moto_url: str, unique: str, **kw: Any) -> tuple[DynamoCheckpoints, Any, str]:
    settings = Settings(aws_endpoint_url=moto_url, jobs_table=f"jobs-{unique}",
                        idempotency_table=f"idem-{unique}", results_bucket=f"results-{unique}")
    tables.ensure_all(settings)
    db = wiring.boto_client("dynamodb", settings)
    return DynamoCheckpoints(db, settings.jobs_table, **kw), db, settings.jobs_table


def pages(db: Any, table: str) -> dict[str, dict[str, Any]]:
    items = db.scan(TableName=table, ConsistentRead=True)["Items"]
    return {i["job_id"]["S"]: i for i in items if i["job_id"]["S"].startswith("~relay-page~")}


def entries(n: int, start: int = 0) -> tuple[tuple[int, str], ...]:
    return tuple((o, f"01HZX{o:021d}.q.sig") for o in range(start, start + n))


def test_a_pending_list_beyond_one_item_round_trips_and_unchanged_pages_are_not_rewritten(
        moto_url: str, unique: str) -> None:
    ckpts, db, table = store(moto_url, unique, page_bytes=20_000, inline_bytes=10_000)
    pending = entries(3000)  # about 150 KB of entries: pages, not one item's worth
    assert ckpts.save(Checkpoint("t", 0, "e1", 1, 0, 5000, pending), None)
    first = pages(db, table)
    assert len(first) >= 5
    main = db.get_item(TableName=table, Key={"job_id": {"S": checkpoint_key("t", 0)}})["Item"]
    assert sorted(json.loads(main["pages"]["S"])) == sorted(first)
    assert len(main["pending"]["S"]) <= 10_000

    loaded = DynamoCheckpoints(db, table).load("t", 0)
    assert loaded == Checkpoint("t", 0, "e1", 1, 0, 5000, pending)

    # the next checkpoint: a few new entries, the old ones unchanged -> no page written again
    more = pending + entries(5, start=5000)
    assert ckpts.save(Checkpoint("t", 0, "e1", 1, 0, 5010, more), "e1")
    assert pages(db, table).keys() == first.keys()
    # the oldest jobs finish: only the page that held them is replaced, and the old one expires
    later = more[100:]
    assert ckpts.save(Checkpoint("t", 0, "e1", 1, 100, 5010, later), "e1")
    now = pages(db, table)
    expiring = {k for k, item in now.items() if "expires_at" in item}
    assert len(expiring) == 1 and len(now) == len(first) + 1
    assert DynamoCheckpoints(db, table).load("t", 0) == Checkpoint("t", 0, "e1", 1, 100, 5010, later)


def test_a_page_marked_to_expire_is_written_again_by_the_next_saver(moto_url: str, unique: str) -> None:
    ckpts, db, table = store(moto_url, unique, page_bytes=20_000, inline_bytes=10_000)
    pending = entries(1000)
    assert ckpts.save(Checkpoint("t", 1, "e1", 1, 0, 1000, pending), None)
    marked = sorted(pages(db, table))[0]
    db.update_item(TableName=table, Key={"job_id": {"S": marked}}, UpdateExpression="SET expires_at = :x",
                   ExpressionAttributeValues={":x": {"N": "1"}})  # as another relay would
    other = DynamoCheckpoints(db, table)
    assert other.load("t", 1) == Checkpoint("t", 1, "e1", 1, 0, 1000, pending)
    assert other.save(Checkpoint("t", 1, "e1", 1, 0, 1000, pending), "e1")
    main = db.get_item(TableName=table, Key={"job_id": {"S": checkpoint_key("t", 1)}})["Item"]
    assert marked not in json.loads(main["pages"]["S"])
    assert DynamoCheckpoints(db, table).load("t", 1) == Checkpoint("t", 1, "e1", 1, 0, 1000, pending)


def test_a_missing_page_makes_the_checkpoint_incomplete_not_wrong(moto_url: str, unique: str) -> None:
    ckpts, db, table = store(moto_url, unique, page_bytes=20_000, inline_bytes=10_000)
    assert ckpts.save(Checkpoint("t", 2, "e1", 1, 0, 1000, entries(1000)), None)
    gone = sorted(pages(db, table))[0]
    db.delete_item(TableName=table, Key={"job_id": {"S": gone}})  # TTL expired it, say
    loaded = DynamoCheckpoints(db, table).load("t", 2)
    assert loaded is not None and not loaded.complete and loaded.low_water == 0


def test_a_refused_checkpoint_leaves_its_new_pages_to_expire(moto_url: str, unique: str) -> None:
    ckpts, db, table = store(moto_url, unique, page_bytes=20_000, inline_bytes=10_000)
    assert ckpts.save(Checkpoint("t", 3, "e2", 2, 0, 0), None)
    assert not ckpts.save(Checkpoint("t", 3, "e1", 1, 0, 1000, entries(1000)), "e1")
    assert pages(db, table) and all("expires_at" in item for item in pages(db, table).values())
    assert DynamoCheckpoints(db, table).load("t", 3) == Checkpoint("t", 3, "e2", 2, 0, 0)


def test_load_many_reads_every_checkpoint_and_its_pages_in_two_requests(moto_url: str, unique: str) -> None:
    """A relay taking 8 partitions reads their checkpoints in one BatchGetItem (and their pages in
    one more), not one GetItem each: round trips on its cold start (issue 14)."""
    ckpts, db, table = store(moto_url, unique, page_bytes=20_000, inline_bytes=10_000)
    saved = {0: Checkpoint("t", 0, "e1", 1, 0, 1000, entries(1000)),  # paged
             1: Checkpoint("t", 1, "e1", 2, 5, 9, ((5, "j5"), (7, "j7"))),
             3: Checkpoint("t", 3, "e2", 1, 4, 4)}
    for ckpt in saved.values():
        assert ckpts.save(ckpt, None)
    calls: list[str] = []
    db.meta.events.register("before-call.dynamodb", lambda model, **_: calls.append(model.name))
    reader = DynamoCheckpoints(db, table)
    loaded = reader.load_many("t", range(8))
    assert calls == ["BatchGetItem", "BatchGetItem"]
    assert loaded == {p: saved.get(p) for p in range(8)}
    assert loaded == {p: DynamoCheckpoints(db, table).load("t", p) for p in range(8)}
    # what it read is what its next save builds on: the unchanged pages are not written again
    before = pages(db, table).keys()
    assert reader.save(saved[0], "e1")
    assert pages(db, table).keys() == before
    calls.clear()
    assert reader.load_many("t", []) == {} and calls == []
