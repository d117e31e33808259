"""Byte budgets (issue 28, item 4): the pure decisions (``sluice.core.limits``), the relay's hold
(``QueueStates``, the planner through ``QueueState.blocked``, the pusher on a partial push) and
``sluice check``'s comparison with the node type's memory. No sockets: fakes only."""

from __future__ import annotations

import pytest

from sluice.core import bus as ev
from sluice.core import limits
from sluice.core.bus import EventBus
from sluice.core.limits import (
    GIB,
    Limits,
    budget_held,
    budget_problems,
    job_bytes,
    node_budget_bytes,
    total_held,
)
from sluice.core.models import QueueConfig
from sluice.relay.observers import GATE_METRICS
from sluice.relay.state import QueueState
from tests.unit.test_relay import World, run_steps


def test_a_queues_budget_is_its_own_max_bytes_else_the_deployments() -> None:
    lim = Limits(queue_budget=1000)
    assert lim.budget(QueueConfig()) == 1000
    assert lim.budget(QueueConfig(max_bytes=50)) == 50
    assert Limits().budget(QueueConfig()) == 0  # no budget at all


def test_job_bytes_counts_payload_meta_id_twice_prefix_and_the_overhead() -> None:
    assert job_bytes("ab", '"é"', "0,5,1,0", 10) == 4 + 7 + 4 + 10 + limits.JOB_OVERHEAD_BYTES


def test_budget_hold_closes_at_the_budget_and_opens_below_the_resume_share() -> None:
    assert not budget_held(999, 1000, held=False)
    assert budget_held(1000, 1000, held=False)
    assert budget_held(950, 1000, held=True)  # hysteresis: no flapping at every ack
    assert not budget_held(899, 1000, held=True)
    assert not budget_held(10**12, 0, held=True)  # no budget: never held


def test_at_the_total_only_the_queues_holding_an_equal_share_or_more_are_held() -> None:
    assert not total_held(900, 900, 3, 1000)  # below the total: nobody
    assert total_held(700, 1000, 3, 1000)  # 700 >= 1000 / 3
    assert not total_held(100, 1000, 3, 1000)  # the small one keeps flowing
    assert not total_held(700, 10**9, 3, 0)  # no total


def test_a_queue_over_its_budget_is_held_with_an_incident_and_the_others_flow() -> None:
    w = World(partitions=1)
    w.engine.job_size = 100
    w.engine.set_config("big", max_bytes=300)
    held: list[ev.QueueHeld] = []
    bus = EventBus()
    bus.subscribe(held.append, ev.QueueHeld)
    pushed: list[ev.Pushed] = []
    bus.subscribe(pushed.append, ev.Pushed)
    big = w.add(10, queue="big", partition=0)
    small = w.add(5, queue="small", partition=0)
    relay = w.relay(batch=50, refresh_s=0.5, max_pending=100, events=bus)
    run_steps(relay, 4)
    assert w.in_redis("big") == big[:3]  # only what fits: push.lua's take, the rest stays buffered
    assert sorted(w.in_redis("small")) == sorted(small)
    assert [(e.queue, e.gate, e.held) for e in held] == [("big", "budget", True)]
    assert relay.queues.states["big"].blocked
    # the push's event names only the records push.lua took (the chaos history reads it)
    assert [j for e in pushed if e.queue == "big" for j in e.jobs] == big[:3]
    before = list(w.engine.calls)
    run_steps(relay, 3)
    assert w.engine.calls.count("push_many") == before.count("push_many")  # held: not even tried
    # the queue's jobs run and leave Redis: below the resume share it takes jobs again
    w.engine.used["big"] = 0
    w.clock.t += 1
    run_steps(relay, 4)
    assert len(w.in_redis("big")) == 6
    assert [(e.gate, e.held) for e in held][:2] == [("budget", True), ("budget", False)]
    assert w.in_redis("big") == big[:6]  # in order, none lost, none twice


def test_the_relay_holds_the_largest_queues_when_the_total_is_reached() -> None:
    w = World(partitions=1)
    w.engine.job_size = 100
    w.engine.used.update({"big": 800, "small": 100})
    w.add(1, queue="big", partition=0)
    w.add(1, queue="small", partition=0)
    relay = w.relay(refresh_s=0.5, limits=Limits(redis_budget=1000))
    run_steps(relay, 2)
    w.clock.t += 1  # the relay reads every queue's use with its config refresh
    big = w.add(3, queue="big", partition=0)
    small = w.add(3, queue="small", partition=0)
    run_steps(relay, 4)
    assert relay.queues.used_total >= 1000
    assert not set(big) & set(w.in_redis("big"))  # the large one waits
    assert set(small) <= set(w.in_redis("small"))  # the small one keeps flowing


def test_budget_holds_have_metrics() -> None:
    assert GATE_METRICS["budget", True] == "RelayBudgetHeld"
    assert GATE_METRICS["budget", False] == "RelayBudgetReleased"
    assert QueueState(budget_full=True).blocked


def test_node_budget_is_its_memory_less_the_reserve_below_the_guard() -> None:
    small = node_budget_bytes("cache.t4g.small", 80)
    assert small == int(1.37 * GIB * 0.75 * 0.8)
    assert node_budget_bytes("cache.t4g.small", 80, shards=3) == 3 * small
    assert node_budget_bytes("cache.x9.huge", 80) is None


def test_budget_problems_refuse_a_total_the_node_cannot_hold() -> None:
    errors, _ = budget_problems("cache.t4g.small", 2 * GIB, 64 << 20, 4, 80)
    assert errors and "cache.t4g.small" in errors[0]
    assert budget_problems("cache.r7g.large", 2 * GIB, 64 << 20, 4, 80) == ([], [])


def test_budget_problems_warn_when_the_queues_budgets_exceed_the_total() -> None:
    errors, warnings = budget_problems("cache.t4g.small", 512 << 20, 64 << 20, 20, 80)
    assert errors == [] and len(warnings) == 1 and "20 queues" in warnings[0]
    assert budget_problems("cache.t4g.small", 512 << 20, 64 << 20, 8, 80) == ([], [])
    assert budget_problems("cache.nope.big", 512 << 20, 64 << 20, 8, 80)[1]  # unknown node: a warning


@pytest.mark.parametrize(("node", "total", "refused"), [
    ("cache.t4g.small", "536870912", False), ("cache.t4g.small", "4294967296", True),
    ("cache.t4g.micro", "536870912", True)])
def test_sluice_check_compares_the_total_with_the_node_type(node: str, total: str, refused: bool) -> None:
    from sluice_dev.cli.check import budget_check

    errors, _ = budget_check({"CacheNodeType": node, "RedisBudgetBytes": total,
                              "QueueBudgetBytes": "67108864", "RedisPushMemoryPercent": "80",
                              "RedisShards": "1", "QueueAllowList": ""}, 4)
    assert bool(errors) is refused


@pytest.mark.parametrize("final_at", [1, 4])
def test_records_left_over_the_budget_stay_buffered_in_order_around_final_jobs(final_at: int) -> None:
    """push.lua took all but the last records it was sent; the final jobs the relay dropped before
    the push leave the buffer only if they were before the first record left."""
    w = World(partitions=1)
    w.engine.job_size = 100
    w.engine.set_config("q", max_bytes=300)
    ids = w.add(6, partition=0)
    w.store.final = {ids[final_at]}
    relay = w.relay(refresh_s=0.5)
    run_steps(relay, 3)
    live = [i for i in ids if i != ids[final_at]]
    assert w.in_redis() == live[:3]
    pending = [job.job_id for _, job in relay.ownership.owned[0].pending["q"]]
    assert pending == [i for i in ids if ids.index(i) > ids.index(live[2])]
    w.engine.used["q"] = 0
    w.clock.t += 1
    run_steps(relay, 3)
    assert w.in_redis() == live
    assert relay.report.final_dropped == 1 and relay.report.pushed == 5
