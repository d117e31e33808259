"""Issue 28, item 1: a record due beyond the relay's horizon waits in its queue's delay lane
(relay/delays.py), keyed by run time, holding back none of its queue's ready records; it comes back
into Redis once due within the horizon, through a hand-off that neither skips nor repeats it."""

from __future__ import annotations

from typing import Any

from sluice.core import bus as ev
from sluice.core.bus import EventBus
from sluice.core.errors import BackendUnavailable
from sluice.core.limits import DAY_MS
from sluice.core.models import JobSpec
from sluice.core.ports import DELAY_MARKER, ParkedRecord
from sluice.relay import Relay, RelayConfig
from sluice.relay.delays import NOT_KNOWN, delay_topic, due_within, next_due
from sluice_dev.fakes import FakeParkingLot
from tests.unit.test_relay import TOPIC, World, run_steps

HORIZON = 60_000


def relay_with(w: World, lot: FakeParkingLot, relay_id: str = "r1", hooks: Any = None, **knobs: Any) -> Relay:
    config = RelayConfig(**{"poll_ms": 10, "commit_s": 0, "batch": 10, "max_pending": 50, "refresh_s": 0.0,
                            "delay_horizon_ms": HORIZON, "park_threads": 0, **knobs})
    return Relay(w.engine, w.store, w.source, w.dispatcher, relay_id=relay_id,  # type: ignore[arg-type]
                 clock=w.clock, events=EventBus(), config=config, parking=lot, hooks=hooks)


def delayed(w: World, n: int, delay_ms: int, queue: str = "a") -> list[str]:
    ids = []
    for _ in range(n):
        w.seq += 1
        now = w.clock.now_ms()
        spec = JobSpec(job_id=f"job-{w.seq}", queue=queue, payload={"n": w.seq}, enqueued_at_ms=now,
                       run_at_ms=now + delay_ms)
        w.source.append_spec(0, spec)
        ids.append(spec.job_id)
    return ids


def flooded() -> tuple[World, FakeParkingLot, Relay, list[str], list[str], list[str]]:
    """Queue a's 30 records due in 7 days, 5 due two horizons ahead, then 3 ready, taken by a relay."""
    w, lot = World(partitions=1), FakeParkingLot()
    far = delayed(w, 30, 7 * DAY_MS)
    soon = delayed(w, 5, 2 * HORIZON)
    ready = w.add(3, queue="a", partition=0)
    relay = relay_with(w, lot)
    run_steps(relay, 5)
    return w, lot, relay, far, soon, ready


def ticking(w: World, relay: Relay, n: int) -> None:
    """``n`` steps, half a second apart (recovery checkpoints on the clock)."""
    for _ in range(n):
        relay.step()
        w.clock.t += 0.5


def parked(n: int, run_at: int) -> ParkedRecord:
    return ParkedRecord(0, n, None, b"{}", f"job-{n}", 0, run_at)


def test_a_page_is_due_up_to_the_horizon_and_says_when_to_look_next() -> None:
    page = [parked(1, 10), parked(2, 20), parked(3, 30)]
    assert due_within(page, 20) == 2 and due_within(page, 5) == 0 and due_within(page, 99) == 3
    assert next_due(page, 2, 10) == 30  # the first not due yet
    assert next_due(page, 3, 3) == 0  # a full page, all due: more may be due at once
    assert next_due(page, 3, 10) == NOT_KNOWN  # a short page, all due: nothing more is known of


def test_far_delayed_records_park_by_run_time_and_hold_none_of_their_queues_ready_records() -> None:
    w, lot, relay, far, soon, ready = flooded()
    assert w.in_redis("a") == ready  # a's ready jobs went by its 35 delayed ones
    assert (0, DELAY_MARKER + "a") in lot.markers and (0, "a") not in lot.markers
    lane = lot.delays[("a", 0)]
    assert [r.job_id for _, r in sorted(lane.items())] == soon + far  # by run time, not offset
    assert w.source.committed_offsets[0] == 38  # committed past every parked one
    assert relay.report.parked == 35


def test_a_delayed_record_comes_back_once_due_within_the_horizon_past_the_queues_relayed_offset() -> None:
    w, _, relay, far, soon, ready = flooded()
    assert w.in_redis("a") == ready
    assert w.engine.relayed[("a", TOPIC, 0)]["offset"] == 37  # past every delayed record's offset
    pushes: list[ev.Pushed] = []
    relay.events.subscribe(pushes.append, ev.Pushed)
    w.clock.t += HORIZON / 1000 + 1  # the first five are due within the horizon now
    ready += w.add(2, queue="a", partition=0)
    run_steps(relay, 3)
    assert sorted(w.in_redis("a")) == sorted(ready + soon)  # none skipped by the offset of the job topic
    assert w.engine.relayed[("a", delay_topic(TOPIC), 0)]["offset"] == 4
    assert [(e.topic, e.pushed) for e in pushes if e.topic != TOPIC] == [(delay_topic(TOPIC), 5)]
    assert sorted(j for q, j in w.engine.enqueued if q == "a") == sorted(ready + soon)  # each once
    run_steps(relay, 5)  # nothing more is due: not pushed again, not read again each step
    assert len(w.engine.enqueued) == len(ready + soon)
    assert not set(far) & set(w.in_redis("a"))


def test_a_new_owner_reads_the_lane_from_its_start_and_repeats_nothing() -> None:
    w, lot = World(partitions=1), FakeParkingLot()
    soon = delayed(w, 6, 2 * HORIZON)
    first = relay_with(w, lot)
    run_steps(first, 3)
    w.clock.t += HORIZON / 1000 + 1
    run_steps(first, 3)
    assert sorted(w.in_redis("a")) == sorted(soon)
    first.stop()
    done = soon[:2]  # ran and acked: out of Redis, final in the jobs table
    for job_id in done:
        del w.engine.jobs["a"][job_id]
    w.store.final.update(done)
    later = delayed(w, 2, 2 * HORIZON)
    second = relay_with(w, lot, relay_id="r2")
    run_steps(second, 5)
    assert second.ownership.owned[0].delays["a"].marked  # learnt from the partition's marker
    assert sorted(j for q, j in w.engine.enqueued if q == "a") == sorted(soon)  # nothing twice
    assert second.report.skipped == 4 and second.report.final_dropped == 2
    w.clock.t += HORIZON / 1000 + 1
    run_steps(second, 3)
    assert sorted(w.in_redis("a")) == sorted(soon[2:] + later)


def test_a_held_queue_keeps_its_delay_lane_and_a_failed_park_keeps_the_commit_point() -> None:
    w, lot = World(partitions=1), FakeParkingLot()
    w.engine.set_config("a", paused=True)
    relay = relay_with(w, lot)
    run_steps(relay, 1)  # the partition taken, its markers read
    soon = delayed(w, 4, 2 * HORIZON)
    b_ids = w.add(2, queue="b", partition=0)
    lot.fail = 10**6
    run_steps(relay, 3)
    assert w.source.committed_offsets.get(0, 0) == 0 and sorted(w.in_redis("b")) == sorted(b_ids)
    lot.fail = 0
    run_steps(relay, 2)
    assert w.source.committed_offsets[0] == 6 and lot.count("a") == 4
    w.clock.t += 10 * HORIZON / 1000
    run_steps(relay, 3)
    assert w.in_redis("a") == []  # paused: due, and still waiting in the lot
    w.engine.set_config("a", paused=False)
    run_steps(relay, 3)
    assert sorted(w.in_redis("a")) == sorted(soon)


def test_the_sweep_releases_delay_lane_records_only_once_final() -> None:
    w, lot = World(partitions=1), FakeParkingLot()
    soon = delayed(w, 3, 2 * HORIZON)
    far = delayed(w, 2, 7 * DAY_MS)
    relay = relay_with(w, lot)
    run_steps(relay, 2)
    w.clock.t += HORIZON / 1000 + 1
    run_steps(relay, 2)
    relay.parking.sweep(wait=True)  # type: ignore[union-attr]
    assert lot.count("a") == 5  # pushed back, not final: kept for a replay
    w.store.final.update(soon)
    relay.parking.sweep(wait=True)  # type: ignore[union-attr]
    assert sorted(r.job_id for r in lot.delays[("a", 0)].values()) == sorted(far)


def test_after_a_redis_loss_the_replay_pushes_the_delay_lane_again_but_not_the_final_jobs() -> None:
    from sluice.relay.recovery import Recovery
    from sluice_dev.fakes import FakeCheckpoints, FakeEpochs
    from tests.unit.test_relay_reread import Offsets

    w, lot = World(partitions=1), FakeParkingLot()
    epochs, ckpts = FakeEpochs(), FakeCheckpoints()

    def recovering(relay_id: str) -> Relay:
        recovery = Recovery(w.source.topic, epochs, ckpts, Offsets(w), w.store, interval_s=1.0,
                            clock=w.clock.monotonic, events=EventBus())
        return relay_with(w, lot, relay_id=relay_id, hooks=recovery)

    soon = delayed(w, 5, 2 * HORIZON)
    ready = w.add(2, queue="a", partition=0)
    first = recovering("r1")
    ticking(w, first, 6)
    w.clock.t += HORIZON / 1000
    ticking(w, first, 6)
    assert sorted(w.in_redis("a")) == sorted(ready + soon)
    first.stop()
    w.store.final.add(soon[0])  # ran before the loss
    w.engine.jobs.clear()
    w.engine.relayed.clear()
    epochs.epoch = None
    second = recovering("r2")
    ticking(w, second, 20)
    assert sorted(w.in_redis("a")) == sorted(ready + soon[1:])


def test_a_push_back_that_landed_unanswered_is_neither_lost_nor_repeated_when_the_page_shifts() -> None:
    """The lane topic's offsets are numbered afresh after a push that got no answer: had it landed,
    the next numbers start above it, so a record that moved up the page (the sweep released one
    before it) is not taken for one already pushed."""
    w, lot = World(partitions=1), FakeParkingLot()
    soon = delayed(w, 12, 2 * HORIZON)  # more than a page (batch 10)
    relay = relay_with(w, lot)
    run_steps(relay, 3)
    w.clock.t += HORIZON / 1000 + 1
    landed = w.engine.push_many

    def unanswered(topic: str, items: Any, gens: Any = None) -> list[Any]:
        landed(topic, items, gens)
        w.engine.push_many = landed  # type: ignore[method-assign]
        raise BackendUnavailable("the reply was lost")

    w.engine.push_many = unanswered  # type: ignore[method-assign]
    run_steps(relay, 1)
    assert sorted(w.in_redis("a")) == sorted(soon[:10])  # the first page landed, not known to have
    del w.engine.jobs["a"][soon[0]]  # ran and acked; the sweep releases it
    w.store.final.add(soon[0])
    relay.parking.sweep(wait=True)  # type: ignore[union-attr]
    more = delayed(w, 2, HORIZON // 2)  # due within the horizon at once: pushed directly
    later = delayed(w, 3, 2 * HORIZON)
    run_steps(relay, 3)
    w.clock.t += 2 * HORIZON / 1000
    run_steps(relay, 3)
    assert sorted(w.in_redis("a")) == sorted(soon[1:] + more + later)
    assert sorted(j for q, j in w.engine.enqueued if q == "a") == sorted(soon + more + later)  # once each


def test_a_delay_lanes_read_runs_off_the_step_one_at_a_time_and_is_applied_on_the_relays_thread() -> None:
    """The due-reads were made in the step (10.7 s of 120 s of a loaded relay's main thread): now each
    lane's read is a lot call in flight (one at a time), and its page is pushed at a later turn."""
    import threading

    from tests.unit.test_relay_lot_calls import HeldExecutor

    w, lot = World(partitions=1), FakeParkingLot()
    soon = delayed(w, 5, 2 * HORIZON)
    relay = relay_with(w, lot, park_threads=1)
    assert relay.parking is not None
    held = relay.parking.calls.executor = HeldExecutor()
    for _ in range(4):  # parked, and a first read (the lane's next run time not known yet) applied
        relay.step()
        held.finish()
    relay.step()
    assert len(lot.delays[("a", 0)]) == 5 and not held.waiting and not w.in_redis("a")
    reads_on: list[threading.Thread] = []
    due = lot.due
    lot.due = lambda *a, **k: (reads_on.append(threading.current_thread()), due(*a, **k))[1]  # type: ignore
    w.clock.t += HORIZON / 1000 + 1  # due within the horizon now
    run_steps(relay, 3)
    assert reads_on == [] and len(held.waiting) == 1  # one read in flight for the lane, not one a step
    assert not set(soon) & set(w.in_redis("a"))
    b = w.add(3, queue="b", partition=0)
    run_steps(relay, 2)
    assert sorted(w.in_redis("b")) == sorted(b)  # no other queue waits for it
    held.finish()
    run_steps(relay, 2)
    assert sorted(w.in_redis("a")) == sorted(soon)
    assert sorted(j for q, j in w.engine.enqueued if q == "a") == sorted(soon)  # each once
    run_steps(relay, 3)
    held.finish()
    run_steps(relay, 2)
    assert sorted(j for q, j in w.engine.enqueued if q == "a") == sorted(soon)
