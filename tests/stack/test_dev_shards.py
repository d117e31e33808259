"""`sluice dev --redis-shards 3`: the pipeline over a local 3-master Redis cluster, jobs on a
queue of every shard, and nothing left behind (issue 20)."""

from __future__ import annotations

import time
from pathlib import Path

import psutil
import pytest
from redis.crc import key_slot

from sluice_dev.local.cluster import slot_ranges
from tests.stack.devrun import job_views, running_dev
from tests.stack.gateway_http import http

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]


def queue_per_shard(n: int) -> list[str]:
    return [next(f"shout{i}" for i in range(10_000) if a <= key_slot(f"shout{i}".encode()) <= b)
            for a, b in slot_ranges(n)]


def test_sluice_dev_runs_jobs_on_every_shard_of_a_local_cluster(tmp_path: Path) -> None:
    queues = queue_per_shard(3)
    handlers = "import sluice\n\napp = sluice.Worker()\n\n" + "".join(
        f"\n@app.handler({q!r})\ndef h_{q}(job, ctx):\n    return {{'queue': {q!r}}}\n" for q in queues)
    (tmp_path / "shardjobs.py").write_text(handlers)
    with running_dev(tmp_path, "--workers", "2", "--handlers", "shardjobs", "--redis-shards", "3") as dev:
        endpoints = dev.endpoints
        assert endpoints["redis_url"].startswith("redis+cluster://")
        urls = []
        for q in queues:
            status, accepted = http("POST", f"{endpoints['gateway_url']}/v1/queues/{q}/jobs", {"payload": {}})
            assert status == 202, accepted
            urls.append(f"{endpoints['gateway_url']}/v1/jobs/{accepted['job_id']}")
        views = job_views(urls)
        assert [views[u]["result"] for u in urls if u in views] == [{"queue": q} for q in queues]
        children = psutil.Process(dev.proc.pid).children(recursive=True)
        assert sum("redis-server" in " ".join(c.cmdline()) for c in children) == 3
    assert dev.proc.returncode == 0, dev.err
    assert endpoints["redis_url"] in dev.out  # the redis row of the start-up block
    time.sleep(0.2)
    left = [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    assert left == [], [c.cmdline() for c in left]
    assert not (tmp_path / ".sluice" / "endpoints.json").exists()
