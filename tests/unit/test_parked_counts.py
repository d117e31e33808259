"""The relay's parked counters from the bus (``relay/parked_counts.py``): summed per queue, written
once per step on ``Committed``, kept after a failed write, nothing written when nothing changed."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

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


def test_the_relay_lambda_keeps_the_counters_when_it_has_a_queues_table(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        event_json: Callable[[str], dict[str, Any]]) -> None:
    """``run_scheduled`` attaches the observer to the relay's bus, and detaches it (writing what
    is left) at the end of the invocation; without a queues table it keeps none."""
    from sluice.core.config import Settings
    from sluice.entry import relay as relay_entry
    from sluice.entry import root as wiring

    for table, expected in (("sluice-queues", [{"a": 3}]), ("", [])):
        bus, counter = EventBus(), Counter()

        class Relay:
            events = bus
            relay_id = "r"

            def run_for_lambda(self, remaining_ms: int, stop_before_ms: int) -> Any:
                self.events.emit(Parked(queue="a", partition=0, n=3))  # the last step's: written at the end
                return Report()

        class Report:
            def publish(self, metrics: Any) -> None:
                pass

            def as_dict(self) -> dict[str, Any]:
                return {}

        monkeypatch.setattr(wiring, "settings", lambda t=table: Settings(queues_table=t))
        monkeypatch.setattr(wiring, "parked_counter", lambda s=None, c=counter: c)
        monkeypatch.setattr(relay_entry, "scheduled_relay", lambda s, c, metrics=None: (Relay(), None))
        capsys.readouterr()
        relay_entry.run_scheduled(event_json("scheduled_relay.json"), Ctx())
        assert [counts for counts, _at in counter.calls] == expected, table
        assert ('"QueueParked":[3.0]' in capsys.readouterr().out) == bool(table)
        assert bus.listening is False


class Ctx:
    aws_request_id = "req"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


def test_in_the_background_a_slow_write_holds_up_no_step_and_what_comes_meanwhile_goes_next() -> None:
    import threading

    gate, entered = threading.Event(), threading.Event()

    class Slow(Counter):
        def add_parked(self, counts: Mapping[str, int], at_ms: Mapping[str, int]) -> dict[str, int]:
            entered.set()
            assert gate.wait(10)
            return super().add_parked(counts, at_ms)

    counter, bus = Slow(), EventBus()
    undo = observe(bus, counter, background=True)
    bus.emit(Parked(queue="a", partition=0, n=3))
    bus.emit(step())  # returns at once: the write waits for the gate on its own thread
    assert entered.wait(5)
    bus.emit(Parked(queue="a", partition=0, n=4))
    bus.emit(step())  # one write at a time: the 4 wait for the next
    assert counter.calls == []
    gate.set()
    undo()
    assert [counts for counts, _ in counter.calls] == [{"a": 3}, {"a": 4}]
