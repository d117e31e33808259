"""The infra tier's order: the two ``sam build`` files first, then the linters (tests/ordering.py).

Each build file's module fixture runs one ``sam build`` (test_artifacts_e2e: x86_64, then a job
through the built functions; test_build: arm64), most of it pip fetching the layer's wheels. The
Makefile runs this tier with ``--dist loadfile --no-loadscope-reorder``: the two builds start at
once, one on each worker, and the template tests (hundreds, each milliseconds) fill in around them.
(They once ran on one worker, one after the other, through an ``xdist_group``; pytest 9 ignores the
group xdist 3.8 writes into the node id, so each worker ran test_build's fixture, two arm64 builds.)
"""

from __future__ import annotations

import pytest

from tests.ordering import longest_first

LONGEST_FIRST = ("test_artifacts_e2e", "test_build", "test_lint", "test_lint_egress")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    longest_first(items, LONGEST_FIRST)
