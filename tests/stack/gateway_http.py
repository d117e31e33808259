"""Plain HTTP to a local stack's gateway, for the stack and artifact tests and both sides of the
upgrade test: the old side (tests/stack/upgrade_old_stack.py, run under the code at c44b81f) and
today's (tests/stack/test_upgrade.py). The standard library only, so either version's interpreter
path can import it."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any


def http(method: str, url: str, body: Any = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def until(gw: str, job_id: str, done: Callable[[dict[str, Any]], bool],
          timeout: float = 90) -> dict[str, Any]:
    """The job's view once ``done`` says so; AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    view: Any = None
    while time.monotonic() < deadline:
        code, view = http("GET", f"{gw}/v1/jobs/{job_id}")
        if code == 200 and done(view):
            return dict(view)
        time.sleep(0.2)
    raise AssertionError(f"{job_id} never reached the state wanted after {timeout} s: {view}")
