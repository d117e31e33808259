"""The fanout bench's wait for the stream's countdown to catch up (benchmarks/bench_fanout.py)."""

from __future__ import annotations

import pytest

from benchmarks.bench_fanout import settle


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def test_settle_waits_until_the_count_stops_growing() -> None:
    clock = Clock()
    counts = iter([1000, 1000, 1200, 1500, 2005])  # the stream's writes still arriving

    def read() -> int:
        return next(counts, 2005)

    count, took = settle(read, 100.0, quiet_s=2.0, every_s=0.5, clock=clock, sleep=clock.sleep)
    assert count == 2005
    assert took == 2.0  # the last change was seen at 2.0 s
    assert clock.t == 4.0  # and it stayed put for quiet_s after


def test_settle_gives_up_at_the_deadline() -> None:
    clock = Clock()
    grow = iter(range(10_000))
    with pytest.raises(TimeoutError):
        settle(lambda: next(grow), 10.0, quiet_s=2.0, every_s=0.5, clock=clock, sleep=clock.sleep)
