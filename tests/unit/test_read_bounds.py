"""sluice.core.read_bounds: the read bounds themselves, and the refusal of a list larger than Sluice writes
(pure; fields.lua applies the field bounds: tests/backends/test_lua_fields.py)."""

from __future__ import annotations

import pytest

from sluice.core import read_bounds
from sluice.core.errors import InvalidInput
from sluice.core.read_bounds import CAPS


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
