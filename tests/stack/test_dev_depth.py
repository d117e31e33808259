"""A queue's depth hour on a running ``sluice dev`` (issue 32's closing review), end to end: jobs
enqueued through the gateway are leased by the stack's workers (``lease.lua`` counts each one's
enqueue-to-start wait), the stack's relay samples the queue every 10 s (``sample.lua``), and the
operator route ``GET /v1/admin/queues/{queue}/depth`` serves the hour with the waits, as every
console reads it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.stack.gateway_http import http, until
from tests.stack.test_dev import HANDLERS, SLUICE, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]


def test_the_relay_keeps_the_queues_hour_with_its_jobs_waits_for_the_operator_route(tmp_path: Path) -> None:
    from sluice_dev.local.api_server import LOCAL_CALLER_HEADER, LOCAL_OPERATOR

    (tmp_path / "myjobs.py").write_text(HANDLERS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    argv = [SLUICE, "dev", "--workers", "1", "--log-level", "WARNING", "--handlers", "myjobs"]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    try:
        gw = wait_for(tmp_path / ".sluice" / "endpoints.json", proc)["gateway_url"]
        started_at = time.time() * 1000
        ids = []
        for text in ("a", "b", "c"):
            status, accepted = http("POST", f"{gw}/v1/queues/shout/jobs", {"payload": {"text": text}})
            assert status == 202, accepted
            ids.append(accepted["job_id"])
        for job_id in ids:
            until(gw, job_id, lambda v: v["status"] == "succeeded")
        operator = {LOCAL_CALLER_HEADER: LOCAL_OPERATOR}
        deadline = time.monotonic() + 60
        hour: Any = {}
        while time.monotonic() < deadline:
            status, hour = http("GET", f"{gw}/v1/admin/queues/shout/depth", headers=operator)
            assert status == 200, hour
            if hour["started"] >= 3 and len(hour["samples"]) >= 2:
                break
            time.sleep(1)
        assert hour["started"] == 3, hour  # each first start counted once, in one sample
        assert 0 <= hour["wait_p50_ms"] <= hour["wait_p99_ms"] < 60_000
        at = [s["at_ms"] for s in hour["samples"]]
        assert at == sorted(at) and at[0] >= started_at - 60_000
        assert all(s["ready"] >= 0 and s["dead"] == 0 for s in hour["samples"])
        assert http("GET", f"{gw}/v1/admin/queues/shout/depth")[0] == 403  # operators only
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
