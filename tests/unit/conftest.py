"""The unit tier: no sockets, no subprocesses, no moto. Anything that tries fails loudly.

Sockets are pytest-socket's (``socket_disabled``, Unix sockets too). A test that needs a server,
moto (in-process or server) or a process belongs in a server tier: ``tests/backends`` (one
adapter or Lua script on its real server, or on moto), ``tests/stack`` (the local stack end to
end) or ``tests/tooling`` (the CLI, the console, tooling that runs servers or processes).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import settings

# Hypothesis's 200 ms deadline per example fails a test on a loaded 2-core CI machine (a unit run
# beside the helpers' suites failed test_tenancy's id property so, and passed alone); each test's
# time is bounded by pytest-timeout instead.
settings.register_profile("sluice", deadline=None)
settings.load_profile("sluice")

HINT = "; move this test to tests/backends, tests/stack or tests/tooling"


def _refuse(what: str) -> Any:
    def refuse(*args: object, **kwargs: object) -> Any:
        raise RuntimeError(f"unit tests may not {what}{HINT}")
    return refuse


@pytest.fixture(autouse=True)
def _unit_tier(socket_disabled: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(subprocess.Popen, "_execute_child", _refuse("start a subprocess"))
    monkeypatch.setattr(os, "fork", _refuse("fork"))
    monkeypatch.setattr(os, "system", _refuse("start a subprocess"))
    try:
        from moto.core import models as moto_models
    except ImportError:  # moto is a dev dependency; without it nothing can start it either
        pass
    else:
        monkeypatch.setattr(moto_models.MockAWS, "start", _refuse("use moto (mock_aws)"))
    yield
