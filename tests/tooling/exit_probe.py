"""A pytest plugin for tests/tooling/test_pytest_exit.py: prints, at the very end of the process,
how many objects were frozen by then (an exit handler registered first runs last)."""

from __future__ import annotations

import atexit
import gc


def pytest_configure() -> None:
    atexit.register(lambda: print(f"frozen at exit: {gc.get_freeze_count()}", flush=True))
