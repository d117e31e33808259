"""The relay's parked counters from the bus (``relay/parked_counts.py``): summed per queue, written
once per step on ``Committed``, kept after a failed write, nothing written when nothing changed."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from sluice.core.bus import Committed, EventBus, Parked, ParkingFailed, Unparked
from sluice.core.errors import BackendUnavailable
from sluice.relay.parked_counts import ParkedCounts, observe

pytestmark = pytest.mark.timeout(10)


class Counter:
    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, int], dict[str, int]]] = []
        self.down = False
        self.values: dict[str, int] = {}

    def add_parked(self, counts: Mapping[str, int], at_ms: Mapping[str, int]) -> dict[str, int]:
        if self.down:
            raise BackendUnavailable("registry down")
        self.calls.append((dict(counts), dict(at_ms)))
        for q, n in counts.items():
            self.values[q] = self.values.get(q, 0) + n
        return {q: self.values[q] for q in counts}


class Metrics:
    def __init__(self) -> None:
        self.lines: list[tuple[str, float, dict[str, str]]] = []

    def count(self, name: str, value: float = 1, **dimensions: str) -> None:
        self.lines.append((name, value, dimensions))


def step() -> Committed:
    return Committed(topic="t", partition=0, offset=1)


def test_sums_per_queue_are_written_on_the_steps_commit_and_only_then() -> None:
    counter, bus, clock = Counter(), EventBus(), iter([100, 200])
    bus.subscribe(ParkedCounts(counter, lambda: next(clock)), Parked, Unparked, Committed)
    bus.emit(Parked(queue="a", partition=0, n=3))
    bus.emit(Parked(queue="a", partition=1, n=4))
    bus.emit(Unparked(queue="b", partition=0, n=9, released=2, refused=1))  # read back: still in the lot
    bus.emit(ParkingFailed(queue="a", partition=0, error="x"))
    assert counter.calls == []
    bus.emit(step())
    bus.emit(step())  # the step's other partitions: nothing new, nothing written
    assert counter.calls == [({"a": 7, "b": -2}, {"a": 200})]


def test_a_failed_write_keeps_its_sums_for_the_next_step() -> None:
    counter, bus, metrics = Counter(), EventBus(), Metrics()
    undo = observe(bus, counter, metrics)
    counter.down = True
    bus.emit(Parked(queue="a", partition=0, n=3))
    bus.emit(step())
    counter.down = False
    bus.emit(Unparked(queue="a", partition=0, released=1))
    bus.emit(Parked(queue="c", partition=0, n=1))
    undo()  # the relay's stop writes what is left, and listens no more
    bus.emit(Parked(queue="a", partition=0, n=50))
    bus.emit(step())
    assert len(counter.calls) == 1
    counts, at = counter.calls[0]
    assert counts == {"a": 2, "c": 1} and set(at) == {"a", "c"}
    assert sorted(metrics.lines) == [("QueueParked", 1, {"queue": "c"}), ("QueueParked", 2, {"queue": "a"})]


def test_the_metric_is_the_counter_after_the_write_never_below_zero() -> None:
    counter, metrics = Counter(), Metrics()
    counts = ParkedCounts(counter, metrics=metrics)
    counter.values = {"a": 1}
    counts(Unparked(queue="a", partition=0, released=3))  # released more than counted: a re-park
    counts.flush()
    assert metrics.lines == [("QueueParked", 0, {"queue": "a"})]
