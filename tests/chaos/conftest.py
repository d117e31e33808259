"""The chaos tier's order: the whole-pipeline runs first, longest first (tests/ordering.py).

Each run has a file of its own and takes about a minute; the rest of the tier takes seconds. The
Makefile runs this tier with ``--dist loadfile --no-loadscope-reorder``, so xdist hands the files
out in this order: the two longest runs start at once, one on each worker, the next two follow
them, and the short files fill in around them. (xdist's default order, most tests first, left the
one-test files of the runs to the end, where one worker took three of them while the other idled.)
"""

from __future__ import annotations

import pytest

from tests.ordering import longest_first

LONGEST_FIRST = ("test_tenant", "test_chaos_short", "test_chaos_registry_rotation", "test_chaos_process",
                 "test_chaos_operator")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    longest_first(items, LONGEST_FIRST)
