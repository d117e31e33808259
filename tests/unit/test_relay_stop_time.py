"""Issue 28, the tenant nemesis: a relay invocation never runs past its timeout because of a slow
step or of ``stop``'s waits (a killed relay commits nothing, and its partitions wait for their lease).

The relay starts a step only if the slowest recent one would still end by the deadline, and each of
``stop``'s waits (the lot's calls in flight, the status writer, recovery's final checkpoint, the
parked counters' last write) is bounded by the time the invocation has left.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from sluice.core.bus import EventBus
from sluice.relay import Relay, RelayConfig
from sluice.relay.parked_counts import ParkedCounts
from tests.unit.test_relay import World, run_steps
from tests.unit.test_relay_lot_calls import held_relay

pytestmark = pytest.mark.timeout(20)


def make_relay(w: World, hooks: Any = None) -> Relay:
    return Relay(w.engine, w.store, w.source, w.dispatcher, relay_id="r1",  # type: ignore[arg-type]
                 clock=w.clock, events=EventBus(), config=RelayConfig(poll_ms=10, commit_s=0), hooks=hooks)


def slowed(w: World, relay: Relay, seconds: float) -> list[float]:
    """Each step of ``relay`` takes ``seconds`` more on ``w``'s clock; returns when each started."""
    started: list[float] = []
    step = relay.step

    def slow() -> int:
        started.append(w.clock.t)
        w.clock.t += seconds  # a DynamoDB call on a loaded table: it blocks, the step cannot be cut short
        return step()

    relay.step = slow  # type: ignore[method-assign]
    return started


def test_a_step_is_not_started_when_the_slowest_recent_one_would_not_end_by_the_deadline() -> None:
    w = World(partitions=1)
    relay = make_relay(w)
    started = slowed(w, relay, 2.0)
    deadline = w.clock.now_ms() + 5_000
    relay.run_until(deadline)
    assert len(started) == 2  # at 0 s and 2 s: one at 4 s would end at 6 s, past the deadline
    assert w.clock.now_ms() <= deadline
    assert relay.step_margin_ms() >= 2_000


def test_the_margin_follows_recent_steps_and_is_capped() -> None:
    w = World(partitions=1)
    relay = make_relay(w)
    relay._steps.extend([100.0, 60_000.0])
    assert relay.step_margin_ms() == 30_000  # one pathological step ends no invocation early by a minute
    relay._steps.extend([50.0] * 100)  # forgotten once a window of steps has passed
    assert relay.step_margin_ms() == 50.0


def test_stop_waits_for_the_lots_calls_and_status_writes_no_longer_than_the_time_left() -> None:
    w, _lot, relay, held = held_relay()
    w.engine.set_config("a", paused=True)
    w.add(30, queue="a", partition=0)
    run_steps(relay, 2)
    assert held.waiting  # a park in flight, never to finish
    drained: list[float | None] = []
    status_close = relay.pusher._status.close
    relay.pusher._status.close = lambda s: (drained.append(s), status_close(s))  # type: ignore[method-assign]
    t0 = time.monotonic()
    relay.run_until(w.clock.now_ms(), stop_by_ms=w.clock.now_ms() + 50)  # 50 ms left for stop
    assert time.monotonic() - t0 < 0.4  # not the lot calls' 0.5 s
    assert drained and drained[-1] is not None and drained[-1] <= 0.05
    assert w.source.committed_offsets.get(0, 0) == 0  # the abandoned park's records: not committed past
    assert not relay.ownership.owned


def test_recovery_skips_its_final_checkpoint_when_the_slowest_one_would_not_fit_the_time_left() -> None:
    from sluice.relay.recovery import Recovery
    from sluice_dev.fakes import FakeCheckpoints, FakeEpochs
    from tests.unit.test_relay_reread import Offsets

    w = World(partitions=1)
    saves: list[int] = []

    class Checkpoints(FakeCheckpoints):
        def save(self, ckpt: Any, expect_epoch: str | None) -> bool:
            saves.append(ckpt.partition)
            w.clock.t += 1.0  # a checkpoint takes a second on this table
            return super().save(ckpt, expect_epoch)

    for left_ms, final_saved in ((1_000, False), (10_000, True)):
        recovery = Recovery(w.source.topic, FakeEpochs(), Checkpoints(), Offsets(w), w.store, interval_s=1.0,
                            clock=w.clock.monotonic, events=EventBus())
        relay = make_relay(w, hooks=recovery)
        w.add(3, queue="a", partition=0)
        for _ in range(4):
            relay.step()
            w.clock.t += 0.5
        assert recovery._slowest_s >= 1.0
        saves.clear()
        relay.run_until(w.clock.now_ms(), stop_by_ms=w.clock.now_ms() + left_ms)
        assert bool(saves) == final_saved, left_ms  # only late when skipped: the next owner checkpoints


def test_the_parked_counters_last_write_waits_no_longer_than_it_is_given() -> None:
    class Slow:
        def add_parked(self, counts: Any, at: Any) -> dict[str, int]:
            time.sleep(1.0)
            return dict(counts)

    counts = ParkedCounts(Slow(), background=True)  # type: ignore[arg-type]
    counts._counts["a"] = 3
    t0 = time.monotonic()
    counts.close(0.05)
    assert time.monotonic() - t0 < 0.5
