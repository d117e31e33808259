"""`sluice dev --profile small`: the pipeline behind the small profile's HTTP API, whose local server sends
payload 2.0 events to the gateway function, end to end (issue 33, item 2)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.stack.test_dev import SLUICE, http, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

HANDLERS = "import sluice\n\napp = sluice.Worker()\n\n\n@app.handler('small')\ndef h(job, ctx):\n" \
           "    return {'n': job.payload['n'] + 1}\n"


def test_sluice_dev_runs_a_job_behind_the_small_profiles_http_api(tmp_path: Path) -> None:
    (tmp_path / "smalljobs.py").write_text(HANDLERS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    argv = [SLUICE, "dev", "--workers", "1", "--log-level", "WARNING", "--handlers", "smalljobs",
            "--profile", "small"]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        endpoints = wait_for(tmp_path / ".sluice" / "endpoints.json", proc, timeout=90)
        gateway = endpoints["gateway_url"]
        status, accepted = http("POST", f"{gateway}/v1/queues/small/jobs", {"payload": {"n": 41}})
        assert status == 202, accepted
        deadline = time.monotonic() + 60
        view: dict[str, Any] = {}
        while time.monotonic() < deadline and view.get("status") != "succeeded":
            status, view = http("GET", f"{gateway}/v1/jobs/{accepted['job_id']}")
            assert status == 200, view
            time.sleep(0.3)
        assert view["result"] == {"n": 42}
        status, problem = http("GET", f"{gateway}/v1/queues/small/nope")  # the gateway's own 404, as 2.0
        assert status == 404 and problem["status"] == 404, problem
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
