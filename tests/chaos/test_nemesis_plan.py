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
