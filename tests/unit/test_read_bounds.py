"""sluice.core.read_bounds: which job-hash fields the operator's reads take, by their lengths (pure)."""

from __future__ import annotations

import pytest

from sluice.core import read_bounds
from sluice.core.errors import InvalidInput
from sluice.core.read_bounds import CAPS, chosen

FIELDS = ("p", "m", "a", "err", "grp")


def test_fields_within_their_caps_are_read_and_absent_ones_are_neither_read_nor_named() -> None:
    reads, unread = chosen([[10, 20, 1, 0, 5]], FIELDS, budget=None)
    assert reads == [[True, True, True, False, True]] and unread == [[]]


@pytest.mark.parametrize("field", FIELDS)
def test_a_field_one_byte_over_its_cap_is_left_unread_and_named(field: str) -> None:
    row = [CAPS[f] + (1 if f == field else 0) for f in FIELDS]
    reads, unread = chosen([row], FIELDS, budget=None)
    assert reads[0] == [f != field for f in FIELDS]
    assert unread[0] == [read_bounds.NAMES[field]]


def test_payloads_are_read_in_order_while_the_budget_lasts_and_a_smaller_later_one_still_fits() -> None:
    lengths = [[600, 1, 1, 0, 0], [500, 1, 1, 0, 0], [300, 1, 1, 0, 0], [0, 1, 1, 0, 0]]
    reads, unread = chosen(lengths, FIELDS, budget=1000)
    assert [r[0] for r in reads] == [True, False, True, False]
    assert unread == [[], ["payload"], [], []]
    assert all(r[1] and r[2] for r in reads)  # only payloads count against the budget


def test_without_a_budget_every_payload_within_its_cap_is_read() -> None:
    reads, _ = chosen([[CAPS["p"], 1, 1, 0, 0]] * 3, FIELDS, budget=None)
    assert all(r[0] for r in reads)


def test_a_list_larger_than_sluice_writes_is_refused_with_what_and_how_large() -> None:
    read_bounds.check_list_size("job j's timeline", None, 10)  # no such list: nothing to refuse
    read_bounds.check_list_size("job j's timeline", 10, 10)
    with pytest.raises(InvalidInput, match=r"not read: job j's timeline holds 11 bytes .*at most 10\)"):
        read_bounds.check_list_size("job j's timeline", 11, 10)


def test_the_bounds_cover_what_sluice_writes() -> None:
    from sluice.core import timeline
    from sluice.core.models import MAX_ERROR_CHARS

    assert CAPS["err"] >= 4 * MAX_ERROR_CHARS  # a worker's error, cut to its characters, in UTF-8
    assert read_bounds.TIMELINE_MAX_BYTES >= 200 * timeline.MAX_ENTRY
    assert CAPS["m"] >= len("99,100,43200000,9007199254740991")
