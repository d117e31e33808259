"""`sluice dev --redis-shards 3`: the pipeline over a local 3-master Redis cluster, jobs on a
queue of every shard, and nothing left behind (issue 20)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from redis.crc import key_slot

from sluice_dev.local.cluster import slot_ranges
from tests.stack.test_dev import SLUICE, http, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]


def queue_per_shard(n: int) -> list[str]:
    return [next(f"shout{i}" for i in range(10_000) if a <= key_slot(f"shout{i}".encode()) <= b)
            for a, b in slot_ranges(n)]


def test_sluice_dev_runs_jobs_on_every_shard_of_a_local_cluster(tmp_path: Path) -> None:
    queues = queue_per_shard(3)
    handlers = "import sluice\n\napp = sluice.Worker()\n\n" + "".join(
        f"\n@app.handler({q!r})\ndef h_{q}(job, ctx):\n    return {{'queue': {q!r}}}\n" for q in queues)
    (tmp_path / "shardjobs.py").write_text(handlers)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    argv = [SLUICE, "dev", "--workers", "2", "--log-level", "WARNING", "--handlers", "shardjobs",
            "--redis-shards", "3"]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        endpoints = wait_for(tmp_path / ".sluice" / "endpoints.json", proc, timeout=90)
        assert endpoints["redis_url"].startswith("redis+cluster://")
        urls = []
        for q in queues:
            status, accepted = http("POST", f"{endpoints['gateway_url']}/v1/queues/{q}/jobs", {"payload": {}})
            assert status == 202, accepted
            urls.append(f"{endpoints['gateway_url']}/v1/jobs/{accepted['job_id']}")
        deadline = time.monotonic() + 60
        views: dict[str, Any] = {}
        while time.monotonic() < deadline and len(views) < len(urls):
            for url in urls:
                status, view = http("GET", url)
                assert status == 200, view
                if view["status"] == "succeeded":
                    views[url] = view
            time.sleep(0.3)
        assert [views[u]["result"] for u in urls] == [{"queue": q} for q in queues]
        children = psutil.Process(proc.pid).children(recursive=True)
        assert sum("redis-server" in " ".join(c.cmdline()) for c in children) == 3
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert endpoints["redis_url"] in out  # the redis row of the start-up block
    time.sleep(0.2)
    left = [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    assert left == [], [c.cmdline() for c in left]
    assert not (tmp_path / ".sluice" / "endpoints.json").exists()
