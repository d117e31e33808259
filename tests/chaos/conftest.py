"""The chaos tier's order: the whole-pipeline runs first, longest first.

Each run has a file of its own and takes about a minute; the rest of the tier takes seconds. The
Makefile runs this tier with ``--dist loadfile --no-loadscope-reorder``, so xdist hands the files
out in this order: the two longest runs start at once, one on each worker, the next two follow
them, and the short files fill in around them. (xdist's default order, most tests first, left the
one-test files of the runs to the end, where one worker took three of them while the other idled.)
"""

from __future__ import annotations

import pytest

LONGEST_FIRST = ("test_tenant", "test_chaos_short", "test_chaos_registry_rotation", "test_chaos_process",
                 "test_chaos_operator")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        module = item.module.__name__.rpartition(".")[2] if item.module else ""
        return LONGEST_FIRST.index(module) if module in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: every file keeps its own order
