"""The published paths of before the layers keep working, as deprecated aliases (issue 26).

Teams' copies of ``infra/worker.yaml`` name ``sluice.runtime.worker_function.handler``; handlers
import ``Fail``, ``Retry`` and ``JobContext`` from ``sluice.runtime`` and ``fenced_table``'s
helpers from ``sluice.store.fenced``. Each alias must be the very object of its new home, so a
handler written either way behaves the same.
"""

from __future__ import annotations

import importlib
import sys

import pytest

import sluice
from sluice.core.config import Settings
from sluice.entry import root as wiring


def test_sluice_runtime_names_the_runtimes_own_objects() -> None:
    from sluice import runtime
    from sluice.worker import runtime as new

    for name in ("Fail", "Retry", "JobContext", "HandlerSpec", "Outcome", "WorkerOptions"):
        assert getattr(runtime, name) is getattr(new, name), name
    assert runtime.Fail is sluice.Fail and runtime.JobContext is sluice.JobContext


def test_sluice_store_fenced_names_the_dynamodb_adapters_objects() -> None:
    from sluice.backends.dynamodb import fenced as new
    from sluice.store import fenced

    for name in ("FencedTable", "Fence", "fencing_headers", "classify"):
        assert getattr(fenced, name) is getattr(new, name), name


def test_the_old_worker_function_handler_path_is_the_layers_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    # Importing a worker function's module prepares its handlers module once (as Lambda's init).
    settings = Settings(handlers_module="sluice.worker.no_handlers")
    monkeypatch.setattr(wiring, "settings", lambda: settings)
    for name in ("sluice.runtime.worker_function", "sluice.entry.worker_function"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    old = importlib.import_module("sluice.runtime.worker_function")
    new = importlib.import_module("sluice.entry.worker_function")
    assert old.handler is new.handler
    module, _, attr = "sluice.runtime.worker_function.handler".rpartition(".")
    assert callable(getattr(importlib.import_module(module), attr))  # what Lambda's runtime resolves
