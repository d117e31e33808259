"""Issue 18: the status writer (``mark_queued``) off the push path: its backlog is measured.

The relay hands over its pushed records as they are; the writer's thread builds the store's
tuples and writes what queued up meanwhile in one call. How far behind it fell, and how long
the relay waited for room, are kept in ``backlog``.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from sluice.core.bus import EventBus
from sluice.core.models import DecodedJob
from sluice.relay.status import StatusWriter


def records(queue: str, *ids: int) -> list[tuple[int, DecodedJob]]:
    return [(i, DecodedJob(f"j{i}", queue, "null", 0, 5, 30_000, 0, 1000 + i)) for i in ids]


class SlowStore:
    def __init__(self) -> None:
        self.calls: list[list[tuple[str, str, int]]] = []
        self.gate, self.entered = threading.Event(), threading.Event()

    def mark_queued(self, jobs: Any) -> None:
        self.entered.set()
        self.gate.wait(5)
        self.calls.append(list(jobs))


def test_the_writer_builds_the_tuples_and_writes_what_queued_up_in_one_call() -> None:
    store = SlowStore()
    writer = StatusWriter(store, EventBus())  # type: ignore[arg-type]
    writer.submit([("q", records("q", 0, 1))])  # the writer takes it and waits on the gate
    assert store.entered.wait(5)
    for i in range(2, 8, 2):
        writer.submit([("q", records("q", i)), ("r", records("r", i + 1))])
    assert writer.backlog.submitted == 8 and writer.backlog.max_waiting >= 6
    store.gate.set()
    writer.close(5)
    assert store.calls[0] == [("j0", "q", 1000), ("j1", "q", 1001)]
    assert [job for call in store.calls for job in call] == [
        (f"j{i}", "q" if i < 2 or i % 2 == 0 else "r", 1000 + i) for i in range(8)]
    assert len(store.calls) == 2  # the three rounds that waited went in together
    assert writer.backlog.written == 8 and writer.backlog.waiting == 0 and writer.backlog.dropped == 0


def test_a_full_backlog_drops_the_oldest_rounds_counted_and_never_makes_the_relay_wait() -> None:
    """At full rate a per-job UpdateItem cannot keep up (relay/status.py): beyond ``max_waiting``
    jobs the oldest waiting rounds go unwritten, counted; the relay's submit returns at once."""
    store = SlowStore()
    writer = StatusWriter(store, EventBus(), max_waiting=3)  # type: ignore[arg-type]
    writer.submit([("q", records("q", 0))])
    assert store.entered.wait(5)  # the writer holds job 0 until the gate opens
    t0 = time.monotonic()
    for i in range(1, 9, 2):
        writer.submit([("q", records("q", i, i + 1))])  # rounds of two: 1-2, 3-4, 5-6, 7-8
    assert time.monotonic() - t0 < 0.5  # nobody waited for the gate
    b = writer.backlog
    assert b.submitted == 9 and b.dropped == 6 and b.waiting == 3 and b.max_waiting <= 3 + 1
    store.gate.set()
    writer.close(5)
    assert [job for call in store.calls for job in call] == [(f"j{i}", "q", 1000 + i) for i in (0, 7, 8)]
    assert b.written == 3 and b.waiting == 0


def test_a_round_larger_than_the_bound_is_still_written() -> None:
    store = SlowStore()
    store.gate.set()
    writer = StatusWriter(store, EventBus(), max_waiting=2)  # type: ignore[arg-type]
    writer.submit([("q", records("q", 0, 1, 2, 3))])
    writer.close(5)
    assert [job[0] for call in store.calls for job in call] == ["j0", "j1", "j2", "j3"]
    assert writer.backlog.dropped == 0


def test_the_relay_reports_the_dropped_status_writes() -> None:
    from sluice.core.models import JobSpec
    from sluice.relay import Relay, RelayConfig
    from sluice_dev.fakes import RELAY_CALLS, FakeClock, FakeEngine, FakeSource, FakeStore

    class Blocked(FakeStore):
        def mark_queued(self, jobs: Any) -> None:
            entered.set()
            gate.wait(5)

    # The writer takes its first round before more are submitted: otherwise a writer thread
    # scheduled late takes two rounds at once, and those in flight count as waiting (a race
    # that failed this test under load, max_waiting 20).
    gate, entered = threading.Event(), threading.Event()
    clock = FakeClock()
    source = FakeSource(n_partitions=1, clock=clock)
    for i in range(40):
        source.append_spec(0, JobSpec(job_id=f"j{i}", queue="q"))
    relay = Relay(FakeEngine(clock), Blocked(only=RELAY_CALLS), source, None,  # type: ignore[arg-type]
                  relay_id="r", clock=clock, config=RelayConfig(poll_ms=10, commit_s=0, batch=5,
                                                                status_max_waiting=10),
                  events=EventBus())
    steps = 0
    while not relay.report.pushed and steps < 20:
        relay.step()
        steps += 1
    assert entered.wait(5)
    for _ in range(20 - steps):
        relay.step()
    gate.set()
    assert relay.report.pushed == 40
    b = relay.pusher.status.backlog
    assert relay.report.status_dropped == b.dropped > 0 and b.max_waiting <= 10 + 5
    relay.stop()
    assert b.written + b.dropped == 40


def test_the_writer_keeps_to_its_rate_and_drops_what_waits_beyond_the_bound() -> None:
    """``max_per_s`` bounds the writer's botocore CPU (relay/status.py): a call carries a second's
    worth at most, and the next waits; meanwhile the backlog stays within ``max_waiting``."""
    calls: list[tuple[float, int]] = []

    class Store:
        def mark_queued(self, jobs: Any) -> None:
            calls.append((time.monotonic(), len(jobs)))

    writer = StatusWriter(Store(), EventBus(), max_waiting=20, max_per_s=50)  # type: ignore[arg-type]
    for i in range(0, 200, 10):
        t0 = time.monotonic()
        writer.submit([("q", records("q", *range(i, i + 10)))])
        assert time.monotonic() - t0 < 0.1  # the relay never waits
        time.sleep(0.02)  # 500 jobs a second offered, ten times the writer's rate
    writer.close(5)
    b = writer.backlog
    assert all(n <= 50 for _, n in calls)
    assert len(calls) >= 2 and calls[1][0] - calls[0][0] >= calls[0][1] / 50 * 0.9
    assert b.written + b.dropped == 200 and b.dropped >= 100 and b.max_waiting <= 20 + 10 + 50


def test_a_round_larger_than_a_second_s_worth_is_written_in_paced_calls() -> None:
    calls: list[tuple[float, int]] = []

    class Store:
        def mark_queued(self, jobs: Any) -> None:
            calls.append((time.monotonic(), len(jobs)))

    writer = StatusWriter(Store(), EventBus(), max_per_s=40)  # type: ignore[arg-type]
    writer.submit([("q", records("q", *range(50)))])
    deadline = time.monotonic() + 5
    while writer.backlog.written < 50 and time.monotonic() < deadline:
        time.sleep(0.05)
    writer.close(5)
    assert [n for _, n in calls] == [40, 10] and calls[1][0] - calls[0][0] >= 0.9


def test_a_keyed_id_is_spared_its_queued_write_and_a_keyless_or_unshaped_one_is_not() -> None:
    """Issue 33 (cheaper per job): an id a gateway minted with a key answers GET and DELETE by itself
    until its grant writes the item, so its ``queued`` write (1 WRU a job) is spared, and counted; a
    schedule firing's keyless id, and an id of any other shape, is written as before."""
    from sluice.core import ids
    from sluice.relay.status import needs_item

    key = b"k" * 32
    keyed, child = ids.mint(1000, "q", key), ids.derive(ids.mint(1000, "q", key), "q", "c1", key)
    keyless = ids.keyless(1000, "q", b"e" * 10, b"firing")
    assert not needs_item(keyed) and not needs_item(child)
    assert needs_item(keyless) and needs_item("j1") and needs_item(ids.ulid(1000))
    calls: list[list[tuple[str, str, int]]] = []

    class Store:
        def mark_queued(self, jobs: Any) -> None:
            calls.append(list(jobs))

    writer = StatusWriter(Store(), EventBus())  # type: ignore[arg-type]
    jobs = [(i, DecodedJob(j, "q", "null", 0, 5, 30_000, 0, 1000 + i))
            for i, j in enumerate((keyed, keyless, child, "j3"))]
    writer.submit([("q", jobs)])
    writer.close(5)
    assert [job for call in calls for job in call] == [(keyless, "q", 1001), ("j3", "q", 1003)]
    b = writer.backlog
    assert (b.submitted, b.written, b.spared, b.waiting) == (4, 2, 2, 0)
