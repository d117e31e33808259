"""A forged relayed owner (session 36): a team's worker Redis user may write its queue's relayed key
``sluice:{q}:relayed:<topic>:<p>``, say owner 2**53-1. push.lua then refuses every push into that queue
as stale. Before, the relay took that as a newer owner and dropped the partition, and every relay that
took it dropped it again at its first push into that queue: the partition's commit stalled, and its
other queues (other teams') moved only between take-overs. Now the relay asks its lease first
(``Ownership.still_ours``): still ours, the queue alone is held; not ours, the partition is dropped as
before (tests/unit/test_relay.py::test_push_refused_with_stale_token_drops_the_partition)."""

from __future__ import annotations

import pytest

from sluice.core import bus as ev
from sluice.core.bus import EventBus
from sluice.core.errors import LeaseLost, StaleToken
from sluice.relay import RELAY_QUEUE, Relay, RelayConfig, partition_job_id
from sluice.relay.delays import delay_topic
from sluice.relay.pusher import forged_suspect
from sluice_dev.fakes import FakeParkingLot
from tests.unit.test_relay import TOPIC, World, run_steps
from tests.unit.test_relay_delay_lane import HORIZON, delayed
from tests.unit.test_relay_delay_lane import relay_with as delay_relay

pytestmark = pytest.mark.timeout(30)
FORGED = 2**53 - 1


def world(n: int = 10) -> tuple[World, FakeParkingLot, Relay, list[ev.Event]]:
    """One partition; records alternate between the forged team's queue ``a`` and another team's ``b``."""
    w, lot = World(partitions=1), FakeParkingLot()
    for _ in range(n // 2):
        w.add(1, queue="a", partition=0)
        w.add(1, queue="b", partition=0)
    seen: list[ev.Event] = []
    bus = EventBus()
    bus.subscribe(seen.append, ev.Incident)
    config = RelayConfig(poll_ms=10, commit_s=0, batch=4, max_pending=50, park_threads=0, refresh_s=0.5)
    relay = Relay(w.engine, w.store, w.source, w.dispatcher, relay_id="r1",  # type: ignore[arg-type]
                  clock=w.clock, events=bus, config=config, parking=lot)
    return w, lot, relay, seen


def forge(w: World, queue: str = "a", owner: int = FORGED, topic: str = TOPIC) -> None:
    """The team's user writes its queue's relayed owner by hand."""
    w.engine.relayed.setdefault((queue, topic, 0), {"offset": -1, "owner_token": 0})["owner_token"] = owner


def test_only_a_refusal_push_lua_gave_for_the_queues_key_may_be_forged() -> None:
    assert forged_suspect(StaleToken(mine=1, current=FORGED), fenced=False)
    assert not forged_suspect(StaleToken(mine=1, current=2), fenced=True)  # the hooks' fence (epoch)
    assert not forged_suspect(LeaseLost("lease lost"), fenced=False)


def test_a_forged_owner_holds_its_queue_alone_and_the_partitions_other_queue_keeps_flowing() -> None:
    w, lot, relay, seen = world()
    forge(w)
    run_steps(relay, 10)
    assert 0 in relay.ownership.owned and relay.report.stale_stops == 0  # before: dropped at once
    assert relay.report.partitions_lost == 0
    assert set(w.in_redis("b")) == {f"job-{n}" for n in (2, 4, 6, 8, 10)}
    assert w.in_redis("a") == []
    assert relay.queues.states["a"].blocked and not relay.queues.states["b"].blocked
    forged = [e for e in seen if isinstance(e, ev.OwnerForged)]
    assert [(e.queue, e.partition, e.owner, e.held) for e in forged] == [("a", 0, str(FORGED), True)]  # once
    # the held queue's records are parked, so the partition's commit passed them
    assert sorted(lot.lanes[("a", 0)]) == [0, 2, 4, 6, 8]
    assert w.source.committed_offsets == {0: 10}
    # more of the other team's records keep flowing while the queue stays held
    more = w.add(4, queue="b", partition=0)
    run_steps(relay, 5)
    assert set(more) <= set(w.in_redis("b")) and w.source.committed_offsets == {0: 14}


def test_the_held_queue_flows_again_once_its_team_fixes_the_key_nothing_lost_or_doubled() -> None:
    w, _, relay, seen = world()
    forge(w)
    run_steps(relay, 10)
    del w.engine.relayed[("a", TOPIC, 0)]  # the team deletes its key
    for _ in range(20):  # the re-read every refresh_s lets the next round push into it again
        w.clock.t += 0.2
        relay.step()
    assert set(w.in_redis("a")) == {f"job-{n}" for n in (1, 3, 5, 7, 9)}
    assert len(w.engine.enqueued) == len(set(w.engine.enqueued)) == 10
    assert not relay.queues.states["a"].blocked
    assert [e.held for e in seen if isinstance(e, ev.OwnerForged)] == [True, False]


def test_a_real_newer_owner_whose_lease_began_after_the_check_still_fences_the_old_relay() -> None:
    """The race: our check says "ours", the queue is held, then the lease lapses (the relay froze) and
    a newer relay takes the partition. The old relay holding instead of dropping changed nothing of
    the fencing: its next push into a queue the newer one pushed is refused, its lease is not its own
    any more, and it drops the partition; every record lands once."""
    w, _, old, _ = world()
    forge(w)
    run_steps(old, 10)
    assert 0 in old.ownership.owned
    # old freezes past its lease; a newer relay takes the partition (token 2) and pushes
    w.engine.ownership[partition_job_id(TOPIC, 0)][1].deadline = w.clock.t - 1
    newer = w.engine.lease(RELAY_QUEUE, 1, 30_000, "r2")[0]
    assert newer.lease_token > old.ownership.owned[0].token
    w.engine.relayed[("b", TOPIC, 0)]["owner_token"] = newer.lease_token
    w.add(2, queue="b", partition=0)
    old.step()
    old.step()
    assert 0 not in old.ownership.owned and old.report.stale_stops == 1
    assert len(w.engine.enqueued) == len(set(w.engine.enqueued))


def test_the_hooks_fence_drops_the_partition_without_asking_the_lease() -> None:
    """Recovery's before_push refusing (Redis's epoch changed) is not the queue's key speaking."""

    w, _, relay, _ = world()
    run_steps(relay, 2)

    def refuse(queue: str, partition: int, lease_token: int) -> int:
        raise StaleToken(f"partition {partition}: Redis's epoch changed", mine=lease_token, current=None)

    relay.hooks.before_push = refuse  # type: ignore[method-assign]
    relay.pusher.hooks.before_push = refuse  # type: ignore[method-assign]
    w.add(2, queue="b", partition=0)
    extends = w.engine.calls.count("extend")
    run_steps(relay, 3)
    assert 0 not in relay.ownership.owned
    assert w.engine.calls.count("extend") == extends


def test_a_forged_owner_of_a_delay_lanes_key_holds_that_lane_alone() -> None:
    """The delay lane pushes under a topic of its own (``delay_topic``), so under a relayed key of its
    own, which the team's user may write too. Before, the refusal dropped the partition there as well."""
    w, lot = World(partitions=1), FakeParkingLot()
    soon = delayed(w, 5, 2 * HORIZON)
    relay = delay_relay(w, lot)
    seen: list[ev.OwnerForged] = []
    relay.events.subscribe(seen.append, ev.OwnerForged)
    run_steps(relay, 3)
    forge(w, topic=delay_topic(TOPIC))
    w.clock.t += HORIZON / 1000 + 1  # due within the horizon now
    ready = w.add(3, queue="a", partition=0)
    run_steps(relay, 5)
    assert 0 in relay.ownership.owned and relay.report.stale_stops == 0
    assert w.in_redis("a") == ready  # the queue's ordered lane flows; its delay lane waits
    assert [(e.queue, e.held) for e in seen] == [("a", True)]
    del w.engine.relayed[("a", delay_topic(TOPIC), 0)]  # the team deletes its key
    w.clock.t += 1
    run_steps(relay, 3)
    assert sorted(w.in_redis("a")) == sorted(ready + soon)
    assert len(w.engine.enqueued) == len(set(w.engine.enqueued)) == 8
    assert [(e.queue, e.held) for e in seen] == [("a", True), ("a", False)]
