"""An upgrade with jobs in flight loses none (issue 29, item 9).

The local stack of the code at c44b81f (exported with ``git archive``, as benchmarks/engine_groups.py
exports its base tree) runs on servers this test starts and keeps: redis-server, the moto server and
Tansu. Through the old gateway it leaves a job dead, a family half done (the parent and one child
succeeded, the other child running, the continuation waiting), a job running, three ready and one
delayed (tests/stack/upgrade_old_stack.py, run under the old tree). The old functions stop, today's
local stack starts on the same servers (``DevOptions.attach``), and every job ends as it should:
the delayed one runs when due, the ready ones run, the running ones are retried once their lease
lapses, the continuation fires with both children's results, and the dead one is redriven and runs.

The order is docs/deploy.md's ("Upgrading"): the old relay has caught up (every record of the old
format is in Redis) before the new functions start.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluice_dev.local import servers
from sluice_dev.local.api_server import LOCAL_CALLER_HEADER, LOCAL_OPERATOR
from sluice_dev.local.dev import DevOptions, DevStack
from tests.stack.gateway_http import http, until

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]

BASE = "c44b81f"  # the code a deployed stack may still run (the review of issue 29 read it)
REPO = Path(__file__).resolve().parents[2]
HANDLERS = "tests.stack.upgrade_handlers"
DELAY_S = 25  # the delayed job is due after the new functions start


def until_status(gw: str, job_id: str, status: str, timeout: float = 90) -> dict[str, Any]:
    return until(gw, job_id, lambda view: view["status"] == status, timeout)


@pytest.fixture
def old_tree(tmp_path: Path) -> Path:
    """The code at ``BASE``'s ``shared`` folder, where its packages are (its template.yaml, functions/
    and infra/ beside it: its local stack reads them)."""
    into = tmp_path / "old"
    into.mkdir()
    found = subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{BASE}^{{commit}}"], timeout=30)
    assert found.returncode == 0, f"the upgrade test needs the history up to {BASE} (a full clone)"
    archive = subprocess.run(["git", "-C", str(REPO), "archive", BASE, "shared", "functions", "infra",
                              "template.yaml", "samconfig.toml"], check=True,
                             capture_output=True, timeout=60).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True, timeout=60)
    return into / "shared"


@pytest.fixture
def kept_servers(tmp_path: Path) -> Iterator[dict[str, str]]:
    """redis-server, the moto server and Tansu, started here: both stacks attach to them."""
    started: list[servers.Server] = []
    try:
        started.append(servers.start_redis(workdir=tmp_path / "redis"))
        started.append(servers.start_moto(log_path=tmp_path / "moto.log"))
        started.append(servers.start_tansu(log_path=tmp_path / "tansu.log"))
        redis, moto, tansu = started
        yield {"redis_url": redis.extra["url"], "aws_endpoint_url": moto.extra["url"],
               "kafka_bootstrap": tansu.extra["bootstrap"], "job_id_secret": "upgrade-test-" + "k" * 32}
    finally:
        for server in reversed(started):
            server.stop()


def run_old_stack(old: Path, attach: dict[str, str], tmp_path: Path, gate: Path) -> dict[str, Any]:
    out = tmp_path / "left.json"
    config = {"attach": attach, "gate": str(gate), "state_dir": str(tmp_path / "old-state"), "out": str(out),
              "delay_s": DELAY_S}
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    env |= {**servers.DUMMY_AWS_ENV, "PYTHONPATH": str(old)}
    # cwd: the repository, where the containers find tests.stack.upgrade_handlers (and no newer sluice)
    driver = REPO / "tests" / "stack" / "upgrade_old_stack.py"
    proc = subprocess.Popen([sys.executable, str(driver), json.dumps(config)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=150)
    except subprocess.TimeoutExpired:
        proc.terminate()  # the driver stops the old stack's containers (its SIGTERM handler)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-4000:]
    left: dict[str, Any] = json.loads(out.read_text())
    return left


def test_an_upgrade_from_c44b81f_with_jobs_in_flight_loses_none(old_tree: Path, kept_servers: dict[str, str],
                                                                 tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    left = run_old_stack(old_tree, kept_servers, tmp_path, gate)
    states = left["states"]
    assert states[left["dead"]] == "dead"
    assert [states[c] for c in left["children"]] == ["succeeded", "leased"]
    assert states[left["running"]] == "leased"
    assert {states[j] for j in left["ready"]} == {"queued"}, states
    assert states[left["delayed"]] == "queued"
    assert int(time.time() * 1000) < left["delayed_due_ms"], "the old stack took too long: nothing delayed"

    # docs/deploy.md, "Upgrading": the upgrade's time, before which a continuation's record may be unsealed
    upgraded = {"UnsealedContinuationsBefore": str(int(time.time() * 1000))}
    dev = DevStack(DevOptions(state_dir=tmp_path / "new-state", handlers=HANDLERS, attach=kept_servers,
                              parameters=upgraded,
                              workers=2, warm_workers=1, log_level="WARNING", follow_events=False,
                              why="the upgrade test"))
    try:
        gw = dev.start()["gateway_url"]
        gate.touch()
        for job_id in left["ready"]:
            view = until_status(gw, job_id, "succeeded")
            assert view["attempts"] == 1
        # the running ones: their old worker stopped with them; retried once their lease lapsed
        assert until_status(gw, left["running"], "succeeded")["result"]["done"] is True
        child = until_status(gw, left["children"][1], "succeeded")
        assert child["result"] == 20
        # the continuation's record, stored unsealed by the old gateway: released (the upgrade's time given)
        then = until_status(gw, left["continuation"], "succeeded")
        assert then["result"] == {"sum": 30, "states": ["succeeded", "succeeded"]}
        assert then["attempts"] == 1
        delayed = until_status(gw, left["delayed"], "succeeded", timeout=DELAY_S + 60)
        assert delayed["finished_at_ms"] >= left["delayed_due_ms"] - 1000  # not before due (1 s: clocks)
        # the dead one: still dead, and redriven by the new operator API
        assert http("GET", f"{gw}/v1/jobs/{left['dead']}")[1]["status"] == "dead"
        code, report = http("POST", f"{gw}/v1/admin/queues/up-fail/dlq/redrive", {"job_id": left["dead"]},
                            headers={LOCAL_CALLER_HEADER: LOCAL_OPERATOR})
        assert code == 200, report
        assert until_status(gw, left["dead"], "succeeded")["result"]["redriven"] is True
    finally:
        dev.stop()
