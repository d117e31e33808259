"""The relay's queue-config read emits ``ConfigRead`` (issue 16): what the chaos checker's pause
rule reads as ``config`` lines, now that no wrapper of the engine writes them."""

from __future__ import annotations

from typing import Any

import pytest

from sluice.core import bus as ev
from sluice.core.models import QueueConfig, QueueStats
from sluice.relay.config import RelayConfig
from sluice.relay.queues import QueueStates


class Engine:
    """Answers ``stats`` with the config it holds; counts the reads."""

    def __init__(self, paused: bool) -> None:
        self.config = QueueConfig(paused=paused)
        self.reads = 0

    def stats(self, queue: str) -> QueueStats:
        self.reads += 1
        return QueueStats(queue=queue, ready=0, delayed=0, leased=0, dead=0, oldest_ready_age_ms=None,
                          config=self.config)

    def set_config(self, queue: str, **changes: Any) -> QueueConfig:
        self.config = self.config.model_copy(update=changes)
        return self.config


def states(engine: Engine, bus: ev.EventBus | None, **config: Any) -> QueueStates:
    return QueueStates(engine, RelayConfig(**config), events=bus)  # type: ignore[arg-type]


def test_each_config_read_emits_what_it_said_with_its_times() -> None:
    engine, bus = Engine(paused=True), ev.EventBus()
    seen: list[ev.ConfigRead] = []
    bus.subscribe(seen.append, ev.ConfigRead)
    q = states(engine, bus, refresh_s=0.5)
    before = ev.wall()
    q.get("q", now=0.0)
    q.get("q", now=0.1)  # within refresh_s: no read, no event
    engine.config = QueueConfig(paused=False)
    q.get("q", now=0.6)
    assert engine.reads == 2
    assert [(e.queue, e.paused) for e in seen] == [("q", True), ("q", False)]
    assert all(before <= e.t0 <= e.at <= ev.wall() for e in seen)


def test_the_event_says_what_redis_said_before_the_default_rate_is_written() -> None:
    engine, bus = Engine(paused=False), ev.EventBus()
    seen: list[ev.ConfigRead] = []
    bus.subscribe(seen.append, ev.ConfigRead)
    q = states(engine, bus, default_rate_per_s=10.0)
    q.get("q", now=0.0)
    assert [(e.queue, e.paused) for e in seen] == [("q", False)]
    assert q.states["q"].config.rate_per_s == 10.0


def test_nobody_listening_builds_no_event_and_reads_no_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_clock() -> float:
        raise AssertionError("the wall clock was read with nobody listening")

    monkeypatch.setattr(ev, "wall", no_clock)
    engine = Engine(paused=True)
    q = states(engine, ev.EventBus())
    q.get("q", now=0.0)
    assert engine.reads == 1 and q.states["q"].config.paused


def test_a_relay_hands_its_bus_to_its_config_reads() -> None:
    from tests.unit.test_relay import World

    w = World(partitions=1)
    w.add(2, partition=0)
    bus = ev.EventBus()
    seen: list[ev.Event] = []
    bus.subscribe(seen.append, ev.ConfigRead, ev.Pushed)
    relay = w.relay(events=bus)
    for _ in range(3):
        relay.step()
    kinds = [type(e).__name__ for e in seen]
    assert "ConfigRead" in kinds and "Pushed" in kinds
    assert kinds.index("ConfigRead") < kinds.index("Pushed")  # the push follows a read of the config
    assert next((e.queue, e.paused) for e in seen if isinstance(e, ev.ConfigRead)) == ("q", False)


def test_relay_event_times_stay_on_the_machines_clock_when_time_time_is_skewed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A chaos run skews a relay process's ``time.time`` (``chaos.skew``); the history's ``t0``/``t1``
    of its pushes and config reads must stay on the machine's clock, as every other line's."""
    import time

    from tests.unit.test_relay import World

    w = World(partitions=1)
    w.add(2, partition=0)
    bus = ev.EventBus()
    seen: list[ev.ConfigRead | ev.Pushed] = []
    bus.subscribe(seen.append, ev.ConfigRead, ev.Pushed)
    relay = w.relay(events=bus)
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 3600.0)  # an hour ahead, as skew.set_offset does
    for _ in range(3):
        relay.step()
    monkeypatch.undo()
    assert {type(e).__name__ for e in seen} == {"ConfigRead", "Pushed"}
    assert all(0 <= e.at - e.t0 < 60 for e in seen), [(type(e).__name__, e.t0, e.at) for e in seen]
