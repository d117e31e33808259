"""The pure decisions of families (issue 29, item 2): a child's slot, whatever order a request
lists the children in, and which stream records leave children for the countdown to end."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from sluice.core.families import abandoned_reason, creatable_slots, family_slots
from sluice.streams.countdown import EndedParent, ended_child, ended_parent

FAMILY = json.loads((Path(__file__).parents[1] / "events" / "dynamodb_stream_family.json").read_text())


def test_a_childs_slot_is_its_rank_in_the_set_whatever_the_order() -> None:
    children = ["c.work.x", "a.work.x", "b.work.x", "d.work.x"]
    want = {"a.work.x": 0, "b.work.x": 1, "c.work.x": 2, "d.work.x": 3}
    for order in itertools.permutations(children):
        assert family_slots(order) == want
    assert family_slots([*children, "a.work.x"]) == want  # a repeated id is one child
    assert sorted(family_slots(children).values()) == list(range(len(children)))  # one slot each


def test_the_abandoned_reason_names_the_parent_and_its_ending() -> None:
    reason = abandoned_reason("P.q.m", "failed")
    assert reason.startswith("never appended: its parent P.q.m ended failed")


def test_a_parents_final_write_with_pending_children_is_an_ended_parent() -> None:
    record = FAMILY["parent_succeeded"]
    parent = record["dynamodb"]["Keys"]["job_id"]["S"]
    lost = FAMILY["child_abandoned"]["dynamodb"]["Keys"]["job_id"]["S"]
    then = FAMILY["child_abandoned"]["dynamodb"]["NewImage"]["continuation"]["S"]
    assert ended_parent(record) == EndedParent(parent, "succeeded", (lost,), (then,))
    assert ended_child(record) is None  # the parent is no child


def test_records_without_pending_children_or_not_final_are_no_ended_parent() -> None:
    record = json.loads(json.dumps(FAMILY["parent_succeeded"]))
    assert ended_parent(FAMILY["child_succeeded"]) is None
    again = json.loads(json.dumps(record))
    again["dynamodb"]["OldImage"]["status"] = {"S": "succeeded"}  # not a transition into final
    assert ended_parent(again) is None
    del record["dynamodb"]["NewImage"]["pending_children"]
    assert ended_parent(record) is None
    assert ended_child(FAMILY["child_abandoned"]) == (
        FAMILY["child_abandoned"]["dynamodb"]["NewImage"]["continuation"]["S"], 0)


def test_only_children_of_the_parents_own_families_with_its_time_may_be_created() -> None:
    from sluice.core import ids

    key = b"unit-test-job-id-key-0123456789"
    parent = ids.mint(1_700_000_000_000, "fanout", key)
    a, b = (ids.derive(parent, "work", k, key) for k in ("a", "b"))
    stranger = ids.mint(1_700_000_000_001, "work", key)  # another time: no child of this parent
    got = creatable_slots(parent, {"then1": (parent, [b, a, stranger]), "then2": ("someone-else", [a])})
    ranks = family_slots([a, b, stranger])
    assert got == {a: ("then1", ranks[a]), b: ("then1", ranks[b])}
    assert creatable_slots(parent, {"then2": ("someone-else", [a, b])}) == {}
    assert creatable_slots("not-an-id", {"t": ("not-an-id", [a])}) == {}
