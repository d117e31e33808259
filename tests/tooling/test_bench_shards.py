"""benchmarks/bench_shards.py runs end to end on a small load: both sides measured, every job
through its lifecycle (the benchmark asserts that), a ratio from the two."""

from __future__ import annotations

import pytest

from benchmarks.bench_shards import measure

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


def test_bench_shards_measures_both_sides() -> None:
    out = measure(jobs=600, runs=1)
    assert out["jobs"] == 600 and out["queues"] == 3 and out["shards"] == 3
    node, cluster = out["node_us_per_job"], out["cluster_us_per_job"]
    assert isinstance(node, float) and isinstance(cluster, float) and node > 0 and cluster > 0
    assert abs(float(out["ratio"]) - cluster / node) < 0.01  # type: ignore[arg-type]
