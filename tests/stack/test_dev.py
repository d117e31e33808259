"""`sluice dev` as a user runs it: a subprocess that serves the whole pipeline until SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.stack.gateway_http import http

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SLUICE = str(Path(sys.executable).parent / "sluice")


# A shell without job control starts its background commands with SIGINT ignored, and an ignored
# signal stays ignored across exec: Python then installs no KeyboardInterrupt handler and Ctrl-C
# (SIGINT) does nothing. A CI run launched that way (`nohup ... &`) failed the two tests that stop a
# command with SIGINT, as a user's Ctrl-C would. This puts SIGINT back to its default, then execs.
_RESET_SIGINT = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                 "os.execv(sys.argv[1], sys.argv[1:])")


def with_ctrl_c(argv: list[str]) -> list[str]:
    """``argv``, run so that SIGINT interrupts it whatever this process inherited."""
    return [sys.executable, "-c", _RESET_SIGINT, *argv]


def wait_for(path: Path, proc: subprocess.Popen[str], timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read() if proc.stderr else ""
            raise AssertionError(f"sluice dev exited {proc.returncode}: {err}")
        if path.exists():
            data: dict[str, Any] = json.loads(path.read_text())
            return data
        time.sleep(0.1)
    raise AssertionError(f"no {path} after {timeout}s")


HANDLERS = """
import sluice

app = sluice.Worker()


@app.handler("shout")
def shout(job, ctx):
    return {"shouted": str(job.payload["text"]).upper(), "token": ctx.token}
"""


def test_sluice_dev_serves_the_pipeline_and_leaves_no_process_behind(tmp_path: Path) -> None:
    (tmp_path / "myjobs.py").write_text(HANDLERS)  # the user's own module, next to where they run dev
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    argv = [SLUICE, "dev", "--workers", "2", "--log-level", "WARNING", "--handlers", "myjobs"]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        endpoints = wait_for(tmp_path / ".sluice" / "endpoints.json", proc)
        for key in ("gateway_url", "redis_url", "kafka_bootstrap", "dynamodb_endpoint"):
            assert endpoints[key], key
        assert endpoints["pid"] == proc.pid

        # Issue 19: these two once stopped every job for good (the relay's own queue); now 400.
        for partition in ("x", 0):
            hostile = {"payload": {"topic": "sluice.jobs", "partition": partition}, "priority": 9}
            status, problem = http("POST", f"{endpoints['gateway_url']}/v1/queues/sluice-relay/jobs", hostile)
            assert (status, problem["code"]) == (400, "RESERVED_QUEUE"), problem

        status, accepted = http("POST", f"{endpoints['gateway_url']}/v1/queues/shout/jobs",
                                {"payload": {"text": "hello dev"}})
        assert status == 202, accepted
        job_url = f"{endpoints['gateway_url']}/v1/jobs/{accepted['job_id']}"
        deadline = time.monotonic() + 30
        view: dict[str, Any] = {}
        while time.monotonic() < deadline:
            status, view = http("GET", job_url)
            assert status == 200, view
            if view["status"] == "succeeded":
                break
            time.sleep(0.2)
        assert view["status"] == "succeeded", view
        assert view["result"] == {"shouted": "HELLO DEV", "token": 1}
        assert endpoints["handlers"] == "myjobs"
        # As deployed (DefaultWorkerRoutes registers the default worker's queues): a queue the
        # handlers lack is refused at the door, not accepted to die with "no handler registered".
        status, problem = http("POST", f"{endpoints['gateway_url']}/v1/queues/echo/jobs", {"payload": 1})
        assert (status, problem.get("code")) == (404, "NO_ROUTE"), problem
        assert endpoints["routes"] == ["shout -> sluice-worker"]

        second = subprocess.run([SLUICE, "dev"], cwd=tmp_path, env=env, capture_output=True, text=True,
                                timeout=30)
        assert second.returncode != 0
        assert "already runs" in second.stderr and endpoints["gateway_url"] in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1
        assert json.loads((tmp_path / ".sluice" / "endpoints.json").read_text())["pid"] == proc.pid

        children = psutil.Process(proc.pid).children(recursive=True)
        names = " ".join(" ".join(c.cmdline()) for c in children)
        for part in ("redis-server", "sluice_dev.local.motoserver", "tansu", "sluice-gateway", "sluice-relay",
                     "sluice-worker"):
            assert part in names, part
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "gateway" in out and endpoints["gateway_url"] in out
    # Issue 14: what differs from template.yaml is printed at start-up, each with its reason.
    assert "local overrides of" in out
    assert "WorkerFunction.ReservedConcurrentExecutions: 25 -> 2  (--workers" in out
    assert "WorkerFunction.Environment.POWERTOOLS_LOG_LEVEL: INFO -> WARNING  (--log-level)" in out
    assert endpoints["overrides"] and all(line in out for line in endpoints["overrides"])
    assert "try:  sluice enqueue shout --payload '<its JSON payload>' --wait" in out
    time.sleep(0.2)
    left = [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    assert left == [], [c.cmdline() for c in left]
    assert not (tmp_path / ".sluice" / "endpoints.json").exists()
