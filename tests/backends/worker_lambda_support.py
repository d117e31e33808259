"""The worker Lambda's function module (``functions/worker/app.py``) loaded as Lambda loads it,
configured through its environment as a deployment is, on a real Redis and the moto server.
Shared by the worker Lambda tests (``test_worker_lambda``, ``test_worker_typed``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import pytest

from sluice.entry import root as wiring
from tests.backends.worker_procs import Stack, make_stack
from tests.loading import module_from_file

APP = Path(__file__).resolve().parents[2] / "functions" / "worker" / "app.py"


def load_function() -> ModuleType:
    """A fresh import of the function module: Lambda's init phase."""
    return module_from_file(APP, "worker_function_app_it")


@contextmanager
def lambda_stack(redis_url: str, moto_url: str, unique: str, monkeypatch: pytest.MonkeyPatch, *,
                 handlers_module: str, **env: str) -> Iterator[Stack]:
    """A fresh queue and jobs table, and the function's environment naming them (``env`` adds
    or overrides variables); the composition root is reset on entry and on exit."""
    s = make_stack(redis_url, moto_url, unique)
    env = {"SLUICE_REDIS_URL": redis_url, "SLUICE_AWS_ENDPOINT_URL": moto_url,
           "SLUICE_JOBS_TABLE": s.cfg["table"], "SLUICE_RESULTS_BUCKET": s.cfg["bucket"],
           "SLUICE_HANDLERS_MODULE": handlers_module, "SLUICE_LAMBDA_MARGIN_MS": "1000",
           "SLUICE_WORKER_BATCH": "10", **env}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    wiring.reset()
    try:
        yield s
    finally:
        wiring.reset()
        s.queue.close()
