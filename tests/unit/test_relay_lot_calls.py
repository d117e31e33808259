"""The parking lot's calls run off the relay's step (relay/lot_calls.py).

A park write in flight must hold back no other queue's push, keep its records uncommitted until it is
applied, and leave the lane alone meanwhile; the outcomes of calls that finish in any order, at any
later step, must still bring every record back once and in its partition's order.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

import pytest

from sluice.core.errors import BackendUnavailable
from sluice.relay import Relay
from sluice.relay.lot_calls import LotCalls
from sluice.relay.parking import next_cut
from sluice_dev.fakes import FakeParkingLot
from tests.unit.test_relay import World
from tests.unit.test_relay_parking import offsets_in_redis, parked_world, relay_with

pytestmark = pytest.mark.timeout(20)


class HeldExecutor(Executor):
    """Runs a call only when the test says: ``finish`` runs some of those waiting, in any order."""

    def __init__(self, rng: random.Random | None = None, at_once: float = 0.0) -> None:
        self.waiting: list[tuple[Future[Any], Callable[[], Any]]] = []
        self.rng, self.at_once = rng, at_once  # a share run at once (a call done before its turn ends)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        if self.rng is not None and self.rng.random() < self.at_once:
            future.set_result(fn(*args, **kwargs))
        else:
            self.waiting.append((future, lambda: fn(*args, **kwargs)))
        return future

    def finish(self, rng: random.Random | None = None, share: float = 1.0) -> int:
        chosen = [w for w in self.waiting if rng is None or rng.random() < share]
        if rng is not None:
            rng.shuffle(chosen)
        for item in chosen:
            self.waiting.remove(item)
            future, call = item
            future.set_result(call())
        return len(chosen)


def held_relay(held: HeldExecutor | None = None, **knobs: Any) -> tuple[Any, Any, Relay, HeldExecutor]:
    w, lot = parked_world()
    relay = relay_with(w, lot, refresh_s=0.0, park_threads=1, **knobs)
    assert relay.parking is not None
    held = held or HeldExecutor()
    relay.parking.calls.executor = held
    return w, lot, relay, held


def test_calls_run_inline_at_zero_threads_and_a_sluice_error_is_their_outcome() -> None:
    calls, seen = LotCalls(0), []
    calls.submit("k", lambda: 1, seen.append)
    assert calls.busy("k") and seen == []
    assert calls.collect() == 1 and seen == [1] and not calls.busy("k")
    calls.submit("k", lambda: (_ for _ in ()).throw(BackendUnavailable("down")), seen.append)
    calls.collect()
    assert isinstance(seen[-1], BackendUnavailable)


def test_a_bug_in_a_call_re_raises_on_the_relays_thread_once() -> None:
    calls = LotCalls(0)
    calls.submit("k", lambda: 1 / 0, lambda _: None)
    with pytest.raises(ZeroDivisionError):
        calls.collect()
    assert not calls.busy("k")


def test_a_park_in_flight_holds_back_no_other_queue_and_its_records_stay_uncommitted() -> None:
    w, lot, relay, held = held_relay()
    w.engine.set_config("a", paused=True)
    a_ids = w.add(30, queue="a", partition=0)
    b_ids = w.add(5, queue="b", partition=0)
    for _ in range(5):
        relay.step()
    assert sorted(w.in_redis("b")) == sorted(b_ids)  # pushed while a's park waits
    assert len(held.waiting) == 1 and lot.count("a") == 0  # one write for the lane, not one a step
    assert w.source.committed_offsets.get(0, 0) == 0  # not past a record whose park is not applied
    held.finish()
    relay.step()
    assert lot.count("a") == 30 and w.source.committed_offsets[0] == 35
    w.engine.set_config("a", paused=False)
    for _ in range(40):
        held.finish()
        relay.step()
    assert offsets_in_redis(w, "a", a_ids) == list(range(30))


def test_a_park_that_finishes_after_the_partition_was_given_back_changes_nothing() -> None:
    w, _lot, relay, held = held_relay()
    w.engine.set_config("a", paused=True)
    w.add(20, queue="a", partition=0)
    relay.step()
    relay.step()
    old = relay.ownership.owned[0]
    relay.ownership.give_back([0])
    held.finish()
    relay.parking.calls.collect()  # type: ignore[union-attr]
    assert old.lanes["a"].out and relay.report.parked == 0  # applied to nobody: Kafka gives them again


def test_a_real_thread_pool_parks_while_the_step_goes_on() -> None:
    w, lot = parked_world()
    gate = threading.Event()
    park = lot.park

    def slow_park(*args: Any, **kwargs: Any) -> None:
        assert gate.wait(10)
        park(*args, **kwargs)

    lot.park = slow_park  # type: ignore[method-assign]
    relay = relay_with(w, lot, refresh_s=0.0, park_threads=2)
    w.engine.set_config("a", paused=True)
    w.add(20, queue="a", partition=0)
    b_ids = w.add(3, queue="b", partition=0)
    for _ in range(4):
        relay.step()  # would wait for the gate if the write were made in the step
    assert sorted(w.in_redis("b")) == sorted(b_ids) and lot.count("a") == 0
    gate.set()
    relay.stop()  # waits for the write and commits past it
    assert lot.count("a") == 20 and w.source.committed_offsets[0] == 23


@pytest.mark.parametrize("seed", range(16))
def test_calls_finishing_in_any_order_at_any_step_bring_every_record_back_once_in_order(seed: int) -> None:
    rng = random.Random(seed)
    w, lot, relay, held = held_relay(HeldExecutor(rng, at_once=0.3), park_threshold=3, batch=5,
                                     max_pending=30)
    a_ids: list[str] = []
    b_ids: list[str] = []
    for _ in range(60):
        roll = rng.random()
        if roll < 0.15:
            w.engine.set_config("a", paused=rng.random() < 0.6)
        elif roll < 0.25:
            w.engine.set_config("a", rate_per_s=rng.choice([0.0, 20.0, 100.0]), burst=1)
        a_ids += w.add(rng.randint(0, 12), queue="a", partition=0)
        b_ids += w.add(rng.randint(0, 2), queue="b", partition=0)
        lot.fail = 1 if rng.random() < 0.1 else 0
        held.finish(rng, share=0.5)
        relay.step()
        w.clock.t += 0.05
    lot.fail = 0
    w.engine.set_config("a", paused=False, rate_per_s=0.0, burst=0)
    for _ in range(400):
        held.finish()
        relay.step()
        w.clock.t += 0.05
        if len(w.in_redis("a")) == len(a_ids) and not held.waiting:
            break
    assert offsets_in_redis(w, "a", a_ids) == list(range(len(a_ids)))
    assert offsets_in_redis(w, "b", b_ids) == list(range(len(b_ids)))


def test_a_stopping_relay_waits_for_a_stuck_call_only_briefly_and_commits_nothing_past_it() -> None:
    w, _lot, relay, held = held_relay()
    w.engine.set_config("a", paused=True)
    w.add(10, queue="a", partition=0)
    for _ in range(3):
        relay.step()
    assert held.waiting  # the park never finishes (a lot that stopped answering)
    relay.stop()  # returns: 0.5 s at most for the lot
    assert relay.report.parked == 0 and w.source.committed_offsets.get(0, 0) == 0


def test_a_lane_of_many_records_parks_in_calls_of_at_most_park_call_max() -> None:
    w, lot, relay, held = held_relay(park_call_max=7, max_pending=100, batch=40)
    sizes: list[int] = []
    park = lot.park

    def counted(queue: str, partition: int, records: Any, **kwargs: Any) -> None:
        sizes.append(len(records))
        park(queue, partition, records, **kwargs)

    lot.park = counted  # type: ignore[method-assign]
    w.engine.set_config("a", paused=True)
    w.add(30, queue="a", partition=0)
    for _ in range(8):
        held.finish()
        relay.step()
    assert lot.count("a") == 30 and sizes == [7, 7, 7, 7, 2]


def test_a_lane_drains_while_its_queue_keeps_receiving_records() -> None:
    """A lane was read back only at a turn with no record of its queue waiting to be parked and no
    park in flight. A queue that receives records at every poll (the chaos run's single queue, at 18
    a second) parks each turn's new ones behind the lane, so the lane was never read: after an
    operator's pause and resume, a 10,000-job chaos run pushed nothing for 400 s while the workload
    ran, and drained only once it stopped."""
    w, lot, relay, held = held_relay(park_threshold=3, batch=10, max_pending=60)
    w.engine.set_config("a", paused=True)
    a_ids = w.add(40, queue="a", partition=0)
    for _ in range(6):
        held.finish()
        relay.step()
    assert lot.count("a") == 40 and w.in_redis("a") == []
    w.engine.set_config("a", paused=False)
    for _ in range(60):  # two new records of a at every poll, every park done by the next turn
        a_ids += w.add(2, queue="a", partition=0)
        held.finish()
        relay.step()
        w.clock.t += 0.05
    assert len(w.in_redis("a")) >= 40  # the backlog came back while a kept receiving
    for _ in range(100):
        held.finish()
        relay.step()
        w.clock.t += 0.05
    assert offsets_in_redis(w, "a", a_ids) == list(range(len(a_ids)))


# -- several park calls in flight per lane ------------------------------------------------------------


def resume_in_order(w: Any, relay: Relay, held: HeldExecutor, a_ids: list[str], steps: int) -> None:
    """A resumes: every one of its records reaches Redis once, in order."""
    w.engine.set_config("a", paused=False)
    for _ in range(steps):
        held.finish()
        relay.step()
    assert offsets_in_redis(w, "a", a_ids) == list(range(len(a_ids)))


def test_next_cut_takes_the_first_run_not_yet_in_a_call_and_never_overlaps_another() -> None:
    out = [10, 11, 12, 20, 21, 22, 30]
    assert next_cut(out, set(), 500, -1) == (0, 7)
    assert next_cut(out, set(), 2, -1) == (0, 2)  # at most ``park_call_max`` a call
    assert next_cut(out, {10, 11, 12}, 500, 12) == (3, 7)  # after the call in flight
    assert next_cut(out, {20, 21}, 500, 21) == (0, 3)  # a run stops at a record in another call
    assert next_cut(out, set(out), 500, 30) == (0, 0)
    assert next_cut([], set(), 500, -1) == (0, 0)
    # A spill put 10-12 ahead of the lane after calls up to 21 were cut; 20-21's call was written
    # and left ``out``: the spilled run must not reach past it, or its segment's range would hold
    # 20-21's (read back by last offset, 22 could come before 20)
    assert next_cut([10, 11, 12, 22, 30], set(), 500, 21) == (0, 3)
    assert next_cut([22, 30], set(), 500, 21) == (0, 2)


def test_a_flood_waiting_for_slow_parks_holds_back_no_other_queue() -> None:
    """The lane's parks take long (none finishes while the flood comes): with one park call at a
    time, the flood's records waiting for it filled the partition's buffer, its fetching paused, and
    B's records behind them in Kafka waited one park round trip after another (the tenant nemesis:
    the others' p99 2.5-6.3 times their quiet p99). Now each turn's new records go out in a call of
    their own, out of the buffer's count, up to ``park_calls`` calls and ``parking_max`` records in
    flight; beyond that the buffer fills and the fetching pauses, as before: memory stays bounded."""
    w, lot, relay, held = held_relay(max_pending=100, batch=25)
    w.engine.set_config("a", paused=True)
    a_ids: list[str] = []
    b_ids: list[str] = []
    for _ in range(4):  # 180 of A: more than the buffer holds
        a_ids += w.add(45, queue="a", partition=0)
        b_ids += w.add(1, queue="b", partition=0)
        for _ in range(3):
            relay.step()
        assert w.source.paused == set()
        assert sorted(w.in_redis("b")) == sorted(b_ids)  # B flows while A's parks are all in flight
    owned = relay.ownership.owned[0]
    assert len(held.waiting) == 4 and lot.count("a") == 0 and owned.parking_count == 180
    assert w.source.committed_offsets.get(0, 0) == 0  # nothing durable: nothing committed past
    a_ids += w.add(200, queue="a", partition=0)  # a fifth call would pass ``park_calls``: they wait
    for _ in range(6):
        relay.step()
    assert len(held.waiting) == 4 and w.source.paused == {0} and owned.pending_count >= 100
    for _ in range(6):
        held.finish()
        relay.step()
    assert lot.count("a") == 380 and w.source.paused == set()
    assert w.source.committed_offsets[0] == 384 and owned.parking_count == 0
    resume_in_order(w, relay, held, a_ids, 100)


def test_a_failed_park_is_not_committed_past_though_a_later_one_was_written() -> None:
    """Calls finish in any order: the second is written, the first fails. The commit stays below
    the first's records, which go again as the same call (its own segment: no two overlap), and
    every record comes back once, in order."""
    w, lot, relay, held = held_relay(max_pending=50, batch=25)
    calls: list[tuple[int, int]] = []
    park = lot.park

    def seen(queue: str, partition: int, records: Any, **kwargs: Any) -> None:
        calls.append((records[0].offset, records[-1].offset))
        park(queue, partition, records, **kwargs)

    lot.park = seen  # type: ignore[method-assign]
    w.engine.set_config("a", paused=True)
    a_ids = w.add(20, queue="a", partition=0)
    for _ in range(2):
        relay.step()
    assert len(held.waiting) == 1
    a_ids += w.add(20, queue="a", partition=0)
    for _ in range(2):
        relay.step()
    assert len(held.waiting) == 2
    second = held.waiting[1]
    held.waiting.remove(second)
    second[0].set_result(second[1]())
    relay.step()
    assert lot.count("a") == 20 and w.source.committed_offsets.get(0, 0) == 0
    lot.fail = 1
    held.finish()  # the first fails, and goes again at once, the same records
    relay.step()
    lane = relay.ownership.owned[0].lanes["a"]
    assert w.source.committed_offsets.get(0, 0) == 0 and len(lane.out) == 20
    assert calls == [(20, 39), (0, 19)] and lane.flying == {0}  # as run: the second first
    held.finish()
    relay.step()
    assert calls[2:] == [(0, 19)] and lot.count("a") == 40 and not lane.out
    assert w.source.committed_offsets[0] == 40
    resume_in_order(w, relay, held, a_ids, 40)


def test_what_a_read_fetched_beyond_a_park_still_in_flight_is_not_kept_to_serve_later() -> None:
    """A read back fetches whole items: with a slow park in flight (30..39) and a later one written
    (40..49), it may bring 40..49 too. Served later from ``Lane.ahead``, once the slow park landed,
    they would move the lane's read position past 30..39, which would never come back: the rest a
    read fetched is kept only below the bound it was read under, and dropped when a park lands
    below its end."""

    class WholeLaneLot(FakeParkingLot):  # a lane stored as one item: a whole page is all of it
        def page(self, queue: str, partition: int, after: int, limit: int, *,
                 whole: bool = False) -> list[Any]:
            return super().page(queue, partition, after, 10**9 if whole else limit)

    w, lot = World(partitions=1), WholeLaneLot()
    relay = relay_with(w, lot, refresh_s=0.0, park_threads=1, park_threshold=3, batch=10, max_pending=60)
    held = HeldExecutor()
    relay.parking.calls.executor = held  # type: ignore[union-attr]
    w.engine.set_config("a", paused=True)
    a_ids = w.add(30, queue="a", partition=0)
    for _ in range(6):
        held.finish()
        relay.step()
    assert lot.count("a") == 30 and not held.waiting
    a_ids += w.add(10, queue="a", partition=0)
    relay.step()
    a_ids += w.add(10, queue="a", partition=0)
    relay.step()
    _slow, later = held.waiting
    held.waiting.remove(later)
    later[0].set_result(later[1]())
    relay.step()
    assert lot.count("a") == 40  # 0..29 and 40..49; 30..39 in flight
    w.engine.set_config("a", paused=False)
    relay.step()
    assert len(held.waiting) == 2  # the slow park and the read
    read = held.waiting[1]
    held.waiting.remove(read)
    read[0].set_result(read[1]())  # fetches 0..29 and 40..49
    relay.step()
    lane = relay.ownership.owned[0].lanes["a"]
    assert lane.ahead and lane.ahead[-1].offset < 30
    # and if it were kept (a lot read by another rule), the slow park landing below it drops it
    lane.ahead += [lot.lanes[("a", 0)][o] for o in range(40, 50)]
    for _ in range(60):
        held.finish()
        relay.step()
    assert offsets_in_redis(w, "a", a_ids) == list(range(50))
