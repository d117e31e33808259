"""The relay's metrics and incident logs: subscribers of its incidents, not calls in its parts.

A part says what turned (``events.Incident``: a partition lost, a queue's gate closed, a
dispatch refused, the lag measured); ``RelayMetrics`` counts it under the EMF names the
alarms and docs/relay.md use, ``RelayLog`` writes the line. ``Relay`` attaches both to its
bus and detaches them in ``stop``. Incidents are rare, so observing them leaves the bus's
hot-path events unbuilt (``EventBus.listening``).

Still counted where it happens: the invocation's totals (``RelayReport.publish``, once at
the end).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from sluice.core import bus as ev
from sluice.core.ports import Metrics
from sluice.relay.ownership import RELAY_QUEUE

log = logging.getLogger("sluice.relay")

GATE_METRICS = {("dead_cap", True): "RelayDeadCapHeld", ("dead_cap", False): "RelayDeadCapReleased",
                ("watermark", True): "RelayWatermarkPaused", ("watermark", False): "RelayWatermarkResumed",
                ("budget", True): "RelayBudgetHeld", ("budget", False): "RelayBudgetReleased"}

# Incidents counted once each, with no dimension.
ONCE: dict[type[ev.Event], str] = {
    ev.PushFailed: "RelayUnexpectedErrors", ev.PartitionLost: "RelayPartitionLost",
    ev.OwnershipJobRemoved: "RelayBadOwnershipJob", ev.DispatchLimited: "RelayDispatchBudgetSpent",
    ev.Replayed: "RelayReplays", ev.CheckpointFailed: "RelayCheckpointFailed"}


class RelayMetrics:
    """Each incident as the count it has always been (names and dimensions unchanged)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def __call__(self, e: ev.Event) -> None:
        m = self.metrics
        once = ONCE.get(type(e))
        if once is not None:
            m.count(once)
        elif isinstance(e, ev.RelayStepFailed):
            m.count("RelayErrors")
            if e.unexpected:
                m.count("RelayUnexpectedErrors")
        elif isinstance(e, ev.StatusWriteFailed):
            m.count("RelayMarkQueuedFailed", e.jobs)
        elif isinstance(e, ev.QueueHeld):
            m.count(GATE_METRICS[e.gate, e.held], queue=e.queue)
        elif isinstance(e, ev.MemoryGuard):
            m.count("RelayMemoryGuardOn" if e.on else "RelayMemoryGuardOff")
        elif isinstance(e, ev.DispatchFailed):
            m.count("RelayDispatchFailed", queue=e.queue)
        elif isinstance(e, ev.DispatchRefused):
            m.count("RelayDispatchRefused", queue=e.queue)
        elif isinstance(e, ev.LagMeasured):
            m.count("RelayLag", e.lag)
        elif isinstance(e, ev.Parked | ev.Unparked | ev.ParkingFailed):
            parking_counts(m, e)
        elif isinstance(e, ev.OwnerForged) and e.held:
            m.count("RelayForgedOwner", queue=e.queue)


def parking_counts(m: Metrics, e: ev.Parked | ev.Unparked | ev.ParkingFailed) -> None:
    """Per queue: records parked, read back, released by the sweep, ended past their life; and the
    lot's failures (no dimension)."""
    if isinstance(e, ev.ParkingFailed):
        m.count("RelayParkingFailed")
        return
    if isinstance(e, ev.Parked):
        m.count("RelayParked", e.n, queue=e.queue)
        return
    counts = (("RelayUnparked", e.n), ("RelayParkedReleased", e.released), ("RelayParkedRefused", e.refused))
    for name, n in counts:
        if n:
            m.count(name, n, queue=e.queue)


class RelayLog:
    """The incident's log line. A failed step logs itself (``loop.py``): it has the traceback."""

    def __init__(self, relay_id: str) -> None:
        self.relay_id = relay_id

    def __call__(self, e: ev.Event) -> None:
        if isinstance(e, ev.PartitionLost):
            log.warning("relay %s stops pushing partition %s: %s", self.relay_id, e.partition, e.why)
        elif isinstance(e, ev.OwnershipJobRemoved):
            log.warning("relay %s removes job %r from %s: %s", self.relay_id, e.job[:140], RELAY_QUEUE, e.why)
        elif isinstance(e, ev.QueueHeld):
            if e.gate == "dead_cap":
                log.warning("queue %s %s at %s dead jobs", e.queue, "held back" if e.held else "released",
                            e.depth)
            elif e.gate == "budget":
                log.warning("queue %s %s at %s bytes in Redis (its byte budget, or the total)", e.queue,
                            "held back" if e.held else "released", e.depth)
            else:
                log.info("queue %s %s at ready depth %s", e.queue, "paused" if e.held else "resumed", e.depth)
        elif isinstance(e, ev.MemoryGuard):
            log.warning("Redis at %.0f%% of maxmemory: the memory guard is %s", e.percent,
                        "on" if e.on else "off")
        elif isinstance(e, ev.DispatchFailed):
            log.warning("dispatch to %s failed: %s", e.queue, e.error)
        elif isinstance(e, ev.DispatchRefused):
            log.error("queue %s not dispatched to %s: %s", e.queue, e.function, e.why)
        elif isinstance(e, ev.Replayed):
            log.warning("Redis lost data (epoch %s -> %s): replaying partition %s of %s from offset %s "
                        "(committed %s), skipping jobs already final", e.old_epoch, e.epoch, e.partition,
                        e.topic, e.start, e.committed)
        elif isinstance(e, ev.CheckpointFailed):
            log.warning("checkpoint failed, next one in %ss: %s", e.retry_in_s, e.error)
        elif isinstance(e, ev.ParkingFailed | ev.Unparked):
            parking_log(e)


def parking_log(e: ev.ParkingFailed | ev.Unparked) -> None:
    if isinstance(e, ev.ParkingFailed):
        log.warning("parking lot unavailable (queue %r, partition %s): %s; tried again", e.queue,
                    e.partition, e.error)
    elif e.drained:
        log.info("queue %s: partition %s's parked records drained; its records go straight to Redis "
                 "again", e.queue, e.partition)


def observe(bus: ev.EventBus, metrics: Metrics, relay_id: str) -> Callable[[], None]:
    """Attach both to ``bus`` (incidents only); returns the detach."""
    detach = (bus.subscribe(RelayMetrics(metrics), ev.Incident),
              bus.subscribe(RelayLog(relay_id), ev.Incident))

    def undo() -> None:
        for d in detach:
            d()

    return undo
