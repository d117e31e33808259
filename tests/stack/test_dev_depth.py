"""A queue's depth hour on a running ``sluice dev`` (issue 32's closing review), end to end: jobs
enqueued through the gateway are leased by the stack's workers (``lease.lua`` counts each one's
enqueue-to-start wait), the stack's relay samples the queue every 10 s (``sample.lua``), and the
operator route ``GET /v1/admin/queues/{queue}/depth`` serves the hour with the waits, as every
console reads it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.stack.devrun import job_views, running_dev
from tests.stack.gateway_http import http
from tests.stack.test_dev import HANDLERS

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]


def test_the_relay_keeps_the_queues_hour_with_its_jobs_waits_for_the_operator_route(tmp_path: Path) -> None:
    from sluice_dev.local.api_server import LOCAL_CALLER_HEADER, LOCAL_OPERATOR

    (tmp_path / "myjobs.py").write_text(HANDLERS)
    with running_dev(tmp_path, "--workers", "1", "--handlers", "myjobs") as dev:
        gw = dev.endpoints["gateway_url"]
        started_at = time.time() * 1000
        urls = []
        for text in ("a", "b", "c"):
            status, accepted = http("POST", f"{gw}/v1/queues/shout/jobs", {"payload": {"text": text}})
            assert status == 202, accepted
            urls.append(f"{gw}/v1/jobs/{accepted['job_id']}")
        assert len(job_views(urls, timeout=90)) == 3
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
