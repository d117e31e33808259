"""The tenant nemesis's pure parts (``sluice_dev.chaos.tenant``): its plan and the others' latency."""

from __future__ import annotations

import pytest

from sluice_dev.chaos.tenant import TENANT, TenantPlan, latency, tenant_payload


def test_a_plan_that_cannot_hold_anything_is_refused() -> None:
    for bad in ({"flood": -1}, {"far": -1}, {"rate_per_s": 0}, {"padded_every": 0}):
        with pytest.raises(ValueError, match="tenant plan"):
            TenantPlan(**bad)  # type: ignore[arg-type]


def test_the_tenant_pads_only_when_asked_and_its_payload_is_the_workloads_otherwise() -> None:
    from sluice_dev.chaos.workload import payload

    assert tenant_payload(3, 10_000_001, 0) == payload(3, 10_000_001)
    padded = tenant_payload(3, 10_000_001, 1024)
    assert len(padded.pop("pad")) == 1024 and padded == payload(3, 10_000_001)


def test_latency_counts_only_the_others_accepted_jobs_to_their_first_accepted_result() -> None:
    events = [
        {"op": "enqueue", "job": "a", "outcome": "ok", "t1": 10.0},
        {"op": "enqueue", "job": "b", "outcome": "ok", "t1": 10.0},
        {"op": "enqueue", "job": "c", "outcome": "info", "t1": 10.0},  # unknown outcome: not counted
        {"op": "enqueue", "job": "t", "outcome": "ok", "t1": 10.0, "queue": TENANT},  # the tenant's
        {"op": "write", "job": "a", "outcome": "rejected", "t1": 10.1},  # not accepted
        {"op": "write", "job": "a", "outcome": "written", "t1": 10.5},
        {"op": "write", "job": "a", "outcome": "written", "t1": 19.0},  # a second run: the first counts
        {"op": "write", "job": "b", "outcome": "written", "t1": 12.0},
        {"op": "write", "job": "c", "outcome": "written", "t1": 10.2},
        {"op": "write", "job": "t", "outcome": "written", "t1": 99.0},
    ]
    assert latency(events) == {"p50": 2000.0, "p99": 2000.0, "n": 2}
    assert latency(events, queue=TENANT) == {"p50": 89000.0, "p99": 89000.0, "n": 1}
    assert latency([]) == {"p50": 0.0, "p99": 0.0, "n": 0}


def test_latency_splits_off_the_time_to_the_first_lease() -> None:
    events = [
        {"op": "enqueue", "job": "a", "outcome": "ok", "t1": 10.0},
        {"op": "lease", "job": "a", "t1": 10.25},
        {"op": "lease", "job": "a", "t1": 15.0},  # a second lease: the first counts
        {"op": "write", "job": "a", "outcome": "written", "t1": 10.5},
    ]
    assert latency(events) == {"p50": 500.0, "p99": 500.0, "n": 1, "lease_p50": 250.0, "lease_p99": 250.0}
