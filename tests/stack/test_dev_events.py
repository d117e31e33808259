"""`sluice dev` with completion events and progress, as a user sees them: `sluice events --follow`
prints a job's event as it ends, `sluice status` shows the handler's progress."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.stack.test_dev import SLUICE, http, wait_for, with_ctrl_c

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

HANDLERS = """
import sluice

app = sluice.Worker()


@app.handler("steps")
def steps(job, ctx):
    ctx.progress(0.4, "resized 4 of 10")
    if job.payload.get("fail"):
        raise sluice.Fail("asked to fail")
    return {"steps": job.payload["n"]}
"""


def test_events_follow_prints_each_ending_and_status_shows_progress(tmp_path: Path) -> None:
    (tmp_path / "stepjobs.py").write_text(HANDLERS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    argv = [SLUICE, "dev", "--workers", "1", "--log-level", "WARNING", "--handlers", "stepjobs"]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    follow = None
    try:
        endpoints = wait_for(tmp_path / ".sluice" / "endpoints.json", proc)
        assert endpoints["events_queue_url"]
        follow = subprocess.Popen(with_ctrl_c([SLUICE, "events", "--follow", "--json"]), cwd=tmp_path,
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines: list[dict[str, Any]] = []

        def read() -> None:
            assert follow is not None and follow.stdout is not None
            for line in follow.stdout:
                lines.append(json.loads(line))

        threading.Thread(target=read, daemon=True).start()
        ids = []
        for body in ({"payload": {"n": 3}}, {"payload": {"n": 1, "fail": True}}):
            status, accepted = http("POST", f"{endpoints['gateway_url']}/v1/queues/steps/jobs", body)
            assert status == 202, accepted
            ids.append(accepted["job_id"])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len({e["detail"]["job_id"] for e in lines}) < 2:
            time.sleep(0.2)
        by_job = {e["detail"]["job_id"]: e for e in lines}
        assert set(by_job) == set(ids), lines
        ok, failed = by_job[ids[0]], by_job[ids[1]]
        assert ok["source"] == "sluice.queue.steps" and ok["detail-type"] == "Job Succeeded"
        assert ok["detail"]["result"] == {"steps": 3}
        assert ok["detail"]["event_id"] == f"{ids[0]}:succeeded:0"
        assert failed["detail-type"] == "Job Failed" and failed["detail"]["last_error"] == "asked to fail"

        shown = subprocess.run([SLUICE, "status", ids[0]], cwd=tmp_path, env=env, capture_output=True,
                               text=True, timeout=30)
        assert shown.returncode == 0, shown.stderr
        assert "progress: 40% resized 4 of 10" in shown.stdout
        status, view = http("GET", f"{endpoints['gateway_url']}/v1/jobs/{ids[0]}")
        assert (view["progress"], view["progress_detail"]) == (0.4, "resized 4 of 10")
    finally:
        if follow is not None:
            follow.send_signal(signal.SIGINT)
            follow.wait(10)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    assert proc.returncode == 0
