"""The nemesis's plan is a pure function of the seed, and covers every fault kind."""

from __future__ import annotations

from sluice_dev.chaos.nemesis import KINDS, plan


def test_the_same_seed_gives_the_same_faults_and_another_seed_other_ones() -> None:
    a = plan(7, 60, interval_s=4, lease_s=2, workers=3, relays=1)
    assert a == plan(7, 60, interval_s=4, lease_s=2, workers=3, relays=1)
    assert a != plan(8, 60, interval_s=4, lease_s=2, workers=3, relays=1)


def test_every_kind_appears_within_the_window_on_real_targets() -> None:
    for seed in range(20):
        faults = plan(seed, 45, interval_s=3.5, lease_s=2, workers=3, relays=1)  # the short run's plan
        assert {f.kind for f in faults} == set(KINDS)
        assert all(3.0 <= f.at_s <= 40.0 for f in faults)
        assert [f.at_s for f in faults] == sorted(f.at_s for f in faults)
        for f in faults:
            if f.kind in ("pause_worker", "pause_worker_before_write"):
                assert 2.0 <= f.hold_s <= 6.0 and f.target in ("w0", "w1", "w2")
            elif f.kind == "kill_relay_after_push":
                assert f.target == "r0"
            elif f.kind.startswith("kill_worker"):
                assert f.target in ("w0", "w1", "w2")


def test_one_node_plans_are_unchanged_and_a_cluster_adds_shard_restarts() -> None:
    from sluice_dev.chaos.nemesis import SHARD_KIND

    for seed in range(20):
        one = plan(seed, 45, interval_s=3.5, lease_s=2, workers=3, relays=1)
        assert one == plan(seed, 45, interval_s=3.5, lease_s=2, workers=3, relays=1, shards=1)
        assert SHARD_KIND not in {f.kind for f in one}
        many = plan(seed, 45, interval_s=3.5, lease_s=2, workers=3, relays=1, shards=3)
        assert {f.kind for f in many} == {*KINDS, SHARD_KIND}
        shards = {f.target for f in many if f.kind == SHARD_KIND}
        assert shards <= {"redis-shard0", "redis-shard1", "redis-shard2"}


def _digest(plans: list[list[dict[str, object]]]) -> str:
    import hashlib
    import json

    return hashlib.sha256(json.dumps(plans, sort_keys=True).encode()).hexdigest()


def test_plans_without_the_extra_kinds_are_the_ones_seeds_always_gave() -> None:
    """The digest of these plans before flush_registry_shard and rotate_job_id_key existed (main at
    783ef78): a seed named in an earlier report still replays the same faults."""
    plans = []
    for seed in range(20):
        for shards in (1, 3):
            for duration, relays in ((45, 1), (600, 2)):
                plans.append([f.as_dict() for f in plan(seed, duration, interval_s=3.5, lease_s=2, workers=3,
                                                        relays=relays, shards=shards, extra=())])
    assert _digest(plans) == "cbc9bb98f51e627d9db98c5f95bd0c3a9f888154f8996d1cf888442edf5b209e"


def test_the_extra_kinds_are_planned_when_asked_for_in_the_first_round_on_their_targets() -> None:
    from sluice_dev.chaos.nemesis import EXTRA_KINDS, REGISTRY_KIND, ROTATE_KIND, SHARD_KIND

    for seed in range(30):
        for shards in (1, 3):
            every = {*KINDS, *EXTRA_KINDS, *((SHARD_KIND,) if shards > 1 else ())}
            faults = plan(seed, 80, interval_s=3.5, lease_s=2, workers=3, relays=1, shards=shards,
                          extra=EXTRA_KINDS)
            assert {f.kind for f in faults[:len(every)]} == every  # the first round: each kind once
            assert faults == plan(seed, 80, interval_s=3.5, lease_s=2, workers=3, relays=1, shards=shards,
                                  extra=tuple(reversed(EXTRA_KINDS)))  # extra's order does not matter
            for f in faults:
                if f.kind == REGISTRY_KIND:
                    assert (f.target, f.hold_s, f.offset_s) == ("redis-registry", 0.0, 0.0)
                elif f.kind == ROTATE_KIND:
                    assert (f.target, f.hold_s, f.offset_s) == ("job-id-key", 0.0, 0.0)
        one = plan(seed, 80, interval_s=3.5, lease_s=2, workers=3, relays=1, extra=(ROTATE_KIND,))
        assert ROTATE_KIND in {f.kind for f in one} and REGISTRY_KIND not in {f.kind for f in one}


def test_a_long_plan_with_the_extra_kinds_draws_the_flush_again_by_weight_and_rotates_once() -> None:
    """A registry flush is drawn again by weight, as restart_redis is; the key is rotated once a run:
    an id verifies under the current key and one previous, and no record of a deployment (30 days
    between rotations, a 14-day job life) is in flight across two rotations."""
    from sluice_dev.chaos.nemesis import EXTRA_KINDS, REGISTRY_KIND, ROTATE_KIND

    for seed in range(10):
        faults = plan(seed, 3_600, interval_s=3.5, lease_s=2, workers=3, relays=1, shards=3,
                      extra=EXTRA_KINDS)
        counts = {k: sum(f.kind == k for f in faults) for k in (REGISTRY_KIND, ROTATE_KIND, "restart_redis")}
        assert counts[REGISTRY_KIND] > 5 and counts["restart_redis"] > 5, counts  # weight 1 each
        assert counts[ROTATE_KIND] == 1, counts


def test_an_unknown_extra_kind_is_refused() -> None:
    import pytest

    with pytest.raises(ValueError, match="unknown extra fault kinds"):
        plan(1, 45, interval_s=3.5, lease_s=2, workers=3, relays=1, extra=("restart_redis",))
