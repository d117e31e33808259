"""The relay's metrics and incident logs are subscribers of its incidents (issue 16)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from sluice.core import bus as ev
from sluice.relay.observers import RelayLog, RelayMetrics
from tests.unit.test_relay import World


class Recorded:
    def __init__(self) -> None:
        self.counts: list[tuple[str, float, dict[str, str]]] = []

    def count(self, name: str, value: float = 1, **dimensions: str) -> None:
        self.counts.append((name, value, dimensions))


@pytest.mark.parametrize(("incident", "counts"), [
    (ev.RelayStepFailed(error="redis down"), [("RelayErrors", 1, {})]),
    (ev.RelayStepFailed(error="KeyError", unexpected=True),
     [("RelayErrors", 1, {}), ("RelayUnexpectedErrors", 1, {})]),
    (ev.PartitionLost(partition=3, why="stale"), [("RelayPartitionLost", 1, {})]),
    (ev.PushFailed(partition=2, queue="q", error="KeyError"), [("RelayUnexpectedErrors", 1, {})]),
    (ev.StatusWriteFailed(jobs=7, error="throttled"), [("RelayMarkQueuedFailed", 7, {})]),
    (ev.OwnershipJobRemoved(job="x", why="not ours"), [("RelayBadOwnershipJob", 1, {})]),
    (ev.QueueHeld(queue="q", gate="dead_cap", held=True, depth=9), [("RelayDeadCapHeld", 1, {"queue": "q"})]),
    (ev.QueueHeld(queue="q", gate="dead_cap", held=False, depth=1),
     [("RelayDeadCapReleased", 1, {"queue": "q"})]),
    (ev.QueueHeld(queue="q", gate="watermark", held=True, depth=50),
     [("RelayWatermarkPaused", 1, {"queue": "q"})]),
    (ev.QueueHeld(queue="q", gate="watermark", held=False, depth=20),
     [("RelayWatermarkResumed", 1, {"queue": "q"})]),
    (ev.MemoryGuard(on=True, percent=91.0), [("RelayMemoryGuardOn", 1, {})]),
    (ev.MemoryGuard(on=False, percent=60.0), [("RelayMemoryGuardOff", 1, {})]),
    (ev.DispatchLimited(wanted=9, granted=4), [("RelayDispatchBudgetSpent", 1, {})]),
    (ev.Parked(queue="q", partition=1, n=40), [("RelayParked", 40, {"queue": "q"})]),
    (ev.Unparked(queue="q", partition=1, n=10, drained=True), [("RelayUnparked", 10, {"queue": "q"})]),
    (ev.Unparked(queue="q", partition=1, released=7, refused=2),
     [("RelayParkedReleased", 7, {"queue": "q"}), ("RelayParkedRefused", 2, {"queue": "q"})]),
    (ev.ParkingFailed(queue="q", partition=1, error="throttled"), [("RelayParkingFailed", 1, {})]),
    (ev.DispatchFailed(queue="q", error="throttled"), [("RelayDispatchFailed", 1, {"queue": "q"})]),
    (ev.DispatchRefused(queue="q", function="f", why="not the map's"),
     [("RelayDispatchRefused", 1, {"queue": "q"})]),
    (ev.LagMeasured(lag=30), [("RelayLag", 30, {})]),
    (ev.Replayed(topic="t", partition=0, start=5, committed=9, old_epoch="a", epoch="b"),
     [("RelayReplays", 1, {})]),
    (ev.CheckpointFailed(error="throttled", retry_in_s=5.0), [("RelayCheckpointFailed", 1, {})]),
    (ev.OwnerForged(queue="q", partition=0, owner="9007199254740991", held=True),
     [("RelayForgedOwner", 1, {"queue": "q"})]),
    (ev.OwnerForged(queue="q", partition=0, owner="", held=False), []),
])
def test_each_incident_is_the_count_it_always_was(incident: ev.Incident, counts: list[Any]) -> None:
    m = Recorded()
    RelayMetrics(m)(incident)
    assert m.counts == counts


def test_incidents_log_the_lines_they_always_did(caplog: pytest.LogCaptureFixture) -> None:
    obs = RelayLog("r1")
    with caplog.at_level(logging.INFO, logger="sluice.relay"):
        obs(ev.PartitionLost(partition=3, why="a newer owner pushed"))
        obs(ev.QueueHeld(queue="q", gate="dead_cap", held=True, depth=9))
        obs(ev.QueueHeld(queue="q", gate="watermark", held=False, depth=20))
        obs(ev.MemoryGuard(on=True, percent=91.4))
        obs(ev.DispatchFailed(queue="q", error="throttled"))
        obs(ev.DispatchRefused(queue="q", function="st-worker-evil", why="the team map says no"))
        obs(ev.Replayed(topic="t", partition=0, start=5, committed=9, old_epoch="a", epoch="b"))
        obs(ev.CheckpointFailed(error="throttled", retry_in_s=5.0))
        obs(ev.LagMeasured(lag=3))  # a count, no line
    assert [r.getMessage() for r in caplog.records] == [
        "relay r1 stops pushing partition 3: a newer owner pushed", "queue q held back at 9 dead jobs",
        "queue q resumed at ready depth 20", "Redis at 91% of maxmemory: the memory guard is on",
        "dispatch to q failed: throttled", "queue q not dispatched to st-worker-evil: the team map says no",
        "Redis lost data (epoch a -> b): replaying partition 0 of t from offset 5 (committed 9), "
        "skipping jobs already final", "checkpoint failed, next one in 5.0s: throttled"]


def test_a_bus_heard_only_for_incidents_is_not_listening_yet_delivers_them() -> None:
    """So the relay's observers leave the hot path's events (Pushed, RecordsRead) unbuilt."""
    bus, seen = ev.EventBus(), []
    bus.subscribe(seen.append, ev.Incident)
    assert not bus.listening
    bus.emit(ev.LagMeasured(lag=1))
    assert seen == [ev.LagMeasured(lag=1, at=seen[0].at)]
    bus.subscribe(seen.append, ev.Pushed)
    assert bus.listening


def test_the_relay_counts_through_its_observer_and_detaches_it_when_it_stops() -> None:
    w = World(partitions=1)
    w.engine.set_config("q", high_watermark=5, low_watermark=2)
    w.add(30, partition=0)
    bus, m = ev.EventBus(), Recorded()
    relay = w.relay(metrics=m, events=bus, batch=10, refresh_s=0.1)
    assert not bus.listening  # nobody but the relay's own observers: no Pushed is built
    for _ in range(10):
        relay.step()
        w.clock.t += 0.1
    assert ("RelayWatermarkPaused", 1, {"queue": "q"}) in m.counts
    relay.stop()
    before = len(m.counts)
    bus.emit(ev.LagMeasured(lag=1))
    assert len(m.counts) == before and not bus._subs
