"""One `sluice dev` run as a test's context: started in the test's folder with the user's handlers module,
stopped with SIGTERM as a user would, and its output kept for the test's last checks."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.stack.gateway_http import http
from tests.stack.test_dev import SLUICE, wait_for


@dataclass
class DevRun:
    proc: subprocess.Popen[str]
    endpoints: dict[str, Any] = field(default_factory=dict)
    out: str = ""
    err: str = ""


@contextmanager
def running_dev(folder: Path, *args: str, start_timeout: float = 90) -> Iterator[DevRun]:
    """`sluice dev --log-level WARNING ARGS...` in ``folder``, with no SLUICE_* variable of this process
    leaking in; once the block ends it has been stopped, and ``out``/``err`` hold what it printed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    proc = subprocess.Popen([SLUICE, "dev", "--log-level", "WARNING", *args], cwd=folder, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run = DevRun(proc)
    try:
        run.endpoints = wait_for(folder / ".sluice" / "endpoints.json", proc, timeout=start_timeout)
        yield run
    finally:
        proc.send_signal(signal.SIGTERM)
        run.out, run.err = proc.communicate(timeout=60)


def job_views(urls: list[str], status: str = "succeeded", timeout: float = 60) -> dict[str, dict[str, Any]]:
    """Each job's view once it reaches ``status`` (polled; an answer other than 200 fails at once), or
    those that did within ``timeout``."""
    views: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(views) < len(urls):
        for url in urls:
            code, view = http("GET", url)
            assert code == 200, view
            if view.get("status") == status:
                views[url] = view
        time.sleep(0.3)
    return views
