"""A tier's files handed to xdist longest first (``--dist loadfile --no-loadscope-reorder``).

xdist's own order (most tests first) leaves a tier's few long files, each one or two tests, to
the end, where one worker runs them while the other idles. A tier whose conftest calls
``longest_first`` with its long files, longest first, starts them at once, one per worker; the
short files fill in around them.
"""

from __future__ import annotations

import pytest


def longest_first(items: list[pytest.Item], modules: tuple[str, ...]) -> None:
    """Sort ``items`` so that the files of ``modules`` come first, in that order (stable: every
    file keeps its own order, and the other files theirs)."""
    def rank(item: pytest.Item) -> int:
        module = item.module.__name__.rpartition(".")[2] if item.module else ""
        return modules.index(module) if module in modules else len(modules)

    items.sort(key=rank)
