"""State written by the code at c44b81f, read by today's (issue 29, item 9; tests/stack/test_upgrade.py runs
the whole upgrade). A continuation started before the upgrade waits in the jobs table with its record
as that gateway wrote it: format 1 (``models.SCHEMA_VERSION``), unsealed. Released by today's gateway,
it was refused as tampered and its family never ended."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from sluice.backends.dynamodb.jobs import DynamoJobStore
from sluice.core import formats, ids, seal
from sluice.core.errors import RecordTampered
from sluice.core.families import MAX_CHILDREN, NewChild
from sluice.gateway.api import Api, Backends, IdMinting
from tests.backends.inprocess import test_flows
from tests.backends.inprocess.test_flows import PARENT_MS, Rig
from tests.unit.test_gateway_fakes import KEY

db, store = test_flows.db, test_flows.store  # the jobs table on in-process moto (fixtures)


def rig_with(store: DynamoJobStore, unsealed_before_ms: int) -> Rig:
    rig = Rig(store)
    rig.api = Api(Backends(rig.log, store, rig.queue, rig.api.events, families=store.families),
                  IdMinting(KEY, unsealed_before_ms=unsealed_before_ms), clock=lambda: PARENT_MS + 5_000)
    return rig


def old_record(job_id: str, queue: str, payload: Any) -> str:
    """A continuation's record as c44b81f's gateway stored it (its JobSpec: no seal, no group)."""
    return json.dumps({"schema_version": 1, "job_id": job_id, "queue": queue, "payload": payload,
                       "priority": 0, "max_attempts": 3, "lease_ms": 30_000, "run_at_ms": 0,
                       "enqueued_at_ms": PARENT_MS, "idempotency_key": None})


def started_as_before_the_upgrade(rig: Rig, record: Callable[[str], str] | None = None) -> str:
    """A family of two whose children both ended; its continuation's record the old format. Its ids
    are c44b81f's: derived with the parent's key (``ids.derive``), so the continuation's id proves its
    time; a keyless one (issue 29) proves nothing, and no record of the old format is trusted for it."""
    children = [ids.derive(rig.parent, "work", f"k{i}", KEY) for i in range(2)]
    then = ids.derive(rig.parent, "report", ids.CONTINUATION_PREFIX + "then", KEY)
    families = rig.store.families  # the items as c44b81f's gateway wrote them
    families.adopt(rig.parent, rig.token, children, then, MAX_CHILDREN)
    families.record_children(rig.parent, [NewChild(j, "work", PARENT_MS, i) for i, j in enumerate(children)],
                             then)
    text = (record or (lambda job_id: old_record(job_id, "report", {"n": 2})))(then)
    families.start_family(then, "report", rig.parent, children, text, PARENT_MS)
    for slot, child in enumerate(children):
        rig.store.write_result(child, rig.store.grant(child, "work", "w"), 1)
        rig.store.families.count_down(then, slot)
    return then


def test_a_continuation_stored_unsealed_before_the_upgrade_is_released_sealed(store: DynamoJobStore) -> None:
    rig = rig_with(store, unsealed_before_ms=PARENT_MS + 1)  # the upgrade: after the family started
    then = started_as_before_the_upgrade(rig)
    assert rig.api.release_continuation(then)
    (released,) = [r for r in rig.log.records if r.job_id == then]
    assert (released.queue, released.payload, released.schema_version) == ("report", {"n": 2}, seal.VERSION)
    assert seal.verify_spec(released, [KEY]) and released.enqueued_at_ms == PARENT_MS + 5_000
    assert rig.api.release_continuation(then) is False  # once


def test_without_an_upgrade_window_an_unsealed_continuation_is_still_refused(store: DynamoJobStore) -> None:
    """The default (0): no record of the old format is trusted (issue 27, docs/security.md)."""
    rig = rig_with(store, unsealed_before_ms=0)
    then = started_as_before_the_upgrade(rig)
    with pytest.raises(RecordTampered, match="does not match its seal"):
        rig.api.release_continuation(then)
    assert then not in rig.appended()


RECORDS: dict[str, Callable[[str], str]] = {
    "minted after the upgrade": lambda then: old_record(then, "report", {"n": 2}),
    "another id": lambda then: old_record(ids.mint(PARENT_MS, "report", KEY), "report", {"n": 2}),
    "another queue": lambda then: old_record(then, "work", {"n": 2}),
    "format 2 unsealed": lambda then: old_record(then, "report", {"n": 2}).replace('"schema_version": 1',
                                                                                  '"schema_version": 2'),
}


@pytest.mark.parametrize("case", sorted(RECORDS))
def test_only_a_continuation_minted_before_the_upgrade_may_be_unsealed(store: DynamoJobStore,
                                                                        case: str) -> None:
    """Anyone who may write the family's item could write an unsealed record: it is trusted only for a
    continuation whose id (its MAC verified, its time in it) was minted before the upgrade, and only
    as the record of that very id and queue; a record of today's format must carry its seal."""
    upgraded_at = PARENT_MS if case == "minted after the upgrade" else PARENT_MS + 1
    rig = rig_with(store, unsealed_before_ms=upgraded_at)
    then = started_as_before_the_upgrade(rig, RECORDS[case])
    with pytest.raises(RecordTampered, match="does not match its seal"):
        rig.api.release_continuation(then)
    assert then not in rig.appended()


def test_every_item_the_store_writes_carries_its_format_and_an_old_one_still_reads(
        store: DynamoJobStore) -> None:
    """The jobs table item carries the format of the code that last wrote it (issue 29): the relay's
    mark, a grant, a result, a family; an item as c44b81f left it (no format_version) reads and is
    granted as before, and is stamped by the write."""
    def item(job_id: str) -> dict[str, Any]:
        key = {"job_id": {"S": job_id}}
        found: dict[str, Any] = store._db.get_item(TableName=store.table, Key=key)["Item"]
        return found

    fresh, old = ids.mint(PARENT_MS, "work", KEY), ids.mint(PARENT_MS, "work", KEY)
    store.mark_queued([(fresh, "work", PARENT_MS)])
    assert formats.item_format(item(fresh)) == formats.ITEM
    store.mark_queued([(old, "work", PARENT_MS)])
    store._db.update_item(TableName=store.table, Key={"job_id": {"S": old}},
                          UpdateExpression="REMOVE format_version")
    assert formats.item_format(item(old)) == 1
    assert store.get_job(old).status.value == "queued"
    token = store.grant(old, "work", "w")
    assert formats.item_format(item(old)) == formats.ITEM
    store.write_result(old, token, {"ok": 1})
    assert store.get_job(old).result == {"ok": 1}
    rig = rig_with(store, unsealed_before_ms=0)
    family = rig.api.enqueue_children(rig.request(1, then=True))
    assert formats.item_format(item(f"~family~{family.continuation}")) == formats.ITEM
    assert formats.item_format(item(family.job_ids[0])) == formats.ITEM
