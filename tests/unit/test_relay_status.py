"""Issue 18: the status writer (``mark_queued``) off the push path: its backlog is measured.

The relay hands over its pushed records as they are; the writer's thread builds the store's
tuples and writes what queued up meanwhile in one call. How far behind it fell, and how long
the relay waited for room, are kept in ``backlog``.
"""

from __future__ import annotations

import threading
from typing import Any

from sluice.events import EventBus
from sluice.models import DecodedJob
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
    assert writer.backlog.written == 8 and writer.backlog.waiting == 0 and writer.backlog.waited_s == 0


def test_a_full_backlog_makes_the_relay_wait_and_says_how_long() -> None:
    store = SlowStore()
    writer = StatusWriter(store, EventBus(), max_batches=1)  # type: ignore[arg-type]
    writer.submit([("q", records("q", 0))])
    assert store.entered.wait(5)
    writer.submit([("q", records("q", 1))])  # waits in the queue while the first is written
    threading.Timer(0.2, store.gate.set).start()
    writer.submit([("q", records("q", 2))])  # no room until the writer takes the second
    writer.close(5)
    assert writer.backlog.waited_s >= 0.1
    assert [job for call in store.calls for job in call] == [(f"j{i}", "q", 1000 + i) for i in range(3)]
