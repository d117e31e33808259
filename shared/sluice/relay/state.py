"""What the relay remembers between steps: its report, each owned partition, each queue.

Plain data shared by the relay's parts; each part changes only its own fields (the
comments say whose), and only on the relay's main thread.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from sluice.core.models import DecodedJob, QueueConfig
from sluice.core.ports import Metrics, ParkedRecord, SourceRecord


@dataclass
class RelayReport:
    pushed: int = 0
    skipped: int = 0  # already in Redis: at or below the recorded offset, or the job hash exists
    reread: int = 0  # of those, skipped by the recorded offset before the push (no rate token spent)
    final_dropped: int = 0  # the store said the job is already final (cancelled, done)
    dead_lettered: int = 0
    stale_stops: int = 0  # pushes refused because a newer owner pushed
    partitions_lost: int = 0  # stale stops plus leases lost or expired
    dispatched: int = 0
    reaped: int = 0
    trimmed: int = 0  # old dead jobs deleted from Redis (their endings stay in the jobs table)
    refused: int = 0  # records of a queue the registry refused, sent to the dead-letter topic
    refused_records: int = 0  # records refused for their seal or their age (relay.intake.refusal)
    status_dropped: int = 0  # pushed jobs whose queued status was never written (relay/status.py)
    settled: int = 0  # endings Redis made alone (last-attempt expiry, cancelled lease) written to the store
    bad_ownership_jobs: int = 0  # jobs in the ownership queue that were not a partition's own: removed
    parked: int = 0  # held records written to the parking lot (relay/parking.py)
    unparked: int = 0  # ... read back into the buffers
    parked_released: int = 0  # ... deleted from the lot by the sweep (their jobs final, or refused)
    unexpected_errors: int = 0  # non-Sluice errors a step met (logged, counted; the relay went on)
    loops: int = 0
    errors: int = 0
    lag: int | None = None  # records in Kafka not yet in Redis, worst owned partition, last measured
    partitions_owned: set[int] = field(default_factory=set)

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "partitions_owned"}
        return out | {"partitions_owned": sorted(self.partitions_owned)}

    def publish(self, metrics: Metrics) -> None:
        """Once per invocation: per-step counts would be one log line each in EMF."""
        for name in ("pushed", "skipped", "reread", "final_dropped", "dead_lettered", "dispatched", "reaped",
                     "settled", "trimmed", "refused", "status_dropped"):
            metrics.count("Relay" + name.title().replace("_", ""), getattr(self, name))


@dataclass
class Lane:
    """One queue's parked records in one partition, as the partition's owner sees them (Parking).

    While ``parking``, every new record of the queue is parked behind the ones already there, so
    none overtakes them; records read back come in offset order after ``read_to``. The lane goes
    direct again once a read came back short with nothing parked since; it is forgotten (and its
    marker removed) once the sweep finds it empty."""

    parking: bool = True
    read_to: int = -1  # the last offset read back (a new owner reads the lane from its start)
    back_from: int | None = None  # the first offset read back this session
    parked_since_read: bool = False
    marked: bool = False  # its marker is written (or was loaded): parks need not write it again
    parks: int = 0  # park writes so far (the sweep forgets a lane it found empty only if none since)
    out: list[tuple[SourceRecord, DecodedJob]] = field(default_factory=list)  # taken, not parked yet
    # The park calls cut from ``out``, by their first offset, until their write succeeds: in flight
    # (``flying``) or, after a failed write, to be sent again as they are. A call's records are never
    # cut again: two segments whose offset ranges overlapped could be read back out of order
    # (relay/parking.py, ``next_cut``).
    calls: dict[int, list[ParkedRecord]] = field(default_factory=dict)
    flying: set[int] = field(default_factory=set)
    cut_to: int = -1  # the highest offset cut into a call so far
    # Read ahead: the rest of the items the last read back fetched, beyond its room and below its
    # bound, in offset order (relay/parking.py, ``Parking._read``): the lot's whole records in that
    # range then, served before the lot is read again. A segment holds hundreds of records, and a
    # read of a few of them reads (and bills) all of it.
    ahead: list[ParkedRecord] = field(default_factory=list)

    def returned(self, offset: int) -> bool:
        """Whether a buffered record of the queue came back from the lot (durable there)."""
        return self.back_from is not None and self.back_from <= offset <= self.read_to


@dataclass
class DelayLane:
    """One queue's delay lane in one partition (Parking): records due beyond the relay's horizon
    when taken, parked by run time, pushed back into Redis's delayed set once due within it. It
    never holds the queue's ordered lane, and needs no order with it (docs/relay.md, "The delay lane")."""

    marked: bool = False  # its marker is written (or was loaded)
    out: list[tuple[SourceRecord, DecodedJob]] = field(default_factory=list)  # taken, not parked yet
    after: tuple[int, int] | None = None  # the last (run-at, offset) pushed back this session
    next_due_ms: int = 0  # the earliest run time not pushed back yet, as far as known (0: look)
    seq: int | None = None  # push.lua's relayed offset of the lane's own topic (None: read it again)


@dataclass
class OwnedPartition:
    """One partition this relay holds the lease of (made by ``Ownership``)."""

    number: int
    job_id: str
    token: int
    leased_at: float  # monotonic; Ownership
    # Intake: records taken from the source and not pushed yet, per queue, in offset order
    pending: dict[str, deque[tuple[int, DecodedJob]]] = field(default_factory=dict)
    pending_count: int = 0
    # Parking: records handed to park calls in flight. They stay uncommitted (``Lane.out``) but leave
    # ``pending_count``, so the partition's fetching goes on while they are written; at most
    # ``RelayConfig.parking_max`` of them (relay/parking.py): memory stays bounded
    parking_count: int = 0
    next_offset: int | None = None  # one past the last record taken from the source
    fetch_paused: bool = False
    committed: int | None = None  # Committer
    dead_since_commit: bool = False
    # per queue: push.lua's recorded offset for this partition, read once per session; records at
    # or below it are in Redis already (a re-read after a restart) and are skipped before they
    # cost a rate token, a finality read or a status write
    relayed: dict[str, int] = field(default_factory=dict)
    # Parking: the lanes of the queues with records parked from this partition (loaded from the
    # lot's markers when it is taken: ``lanes_loaded``), and the buffered records' raw records per
    # queue, in offset order, kept so that a held queue's overflow can be parked as Kafka had it
    lanes: dict[str, Lane] = field(default_factory=dict)
    delays: dict[str, DelayLane] = field(default_factory=dict)
    lanes_loaded: bool = False
    raw: dict[str, dict[int, SourceRecord]] = field(default_factory=dict)
    # Parking: the source's read position when the lanes were loaded (None: not known)
    start: int | None = None

    def read_bound(self) -> int | None:
        """How far a lane may be read back now: below the first offset the intake has not taken
        from the source this session (None: no bound known). A parked record at or beyond it waits:
        Kafka gives it again (to be parked behind whatever of its queue comes before it), and a
        record read back ahead of one still to come from Kafka would raise push.lua's relayed
        offset above that one, which would then be skipped as in Redis already. A replay after a
        Redis loss (from below the lane) or a kept record of a rate-limited queue is such a one."""
        return self.next_offset if self.next_offset is not None else self.start

    def commit_point(self) -> int | None:
        """The first offset not yet durable elsewhere: records read back from the lot have offsets
        below what was committed when they were parked, and never pull the commit back."""
        lanes = self.lanes
        if not lanes:
            heads = [q[0][0] for q in self.pending.values() if q]
            heads += [lane.out[0][0].offset for lane in self.delays.values() if lane.out]
        else:
            heads = []
            for queue, q in self.pending.items():
                lane = lanes.get(queue)
                if lane is None or lane.back_from is None:
                    if q:
                        heads.append(q[0][0])
                    continue
                for offset, _ in q:
                    if not lane.returned(offset):
                        heads.append(offset)
                        break
            heads += [lane.out[0][0].offset for lane in lanes.values() if lane.out]
            heads += [lane.out[0][0].offset for lane in self.delays.values() if lane.out]
        return min(heads) if heads else self.next_offset


@dataclass
class QueueState:
    """What the relay knows of one queue (``QueueStates`` refreshes it from Redis)."""

    config: QueueConfig = field(default_factory=QueueConfig)
    ready: int = 0
    leased: int = 0
    delayed: int = 0  # since the last refresh, plus the delayed jobs pushed since (sluice.core.limits)
    dead: int = 0
    refreshed_at: float = float("-inf")
    watermark_paused: bool = False
    pushed_since_refresh: int = 0
    pushed_since_dispatch: int = 0
    dispatched_at: float = float("-inf")
    idle_workers: int = 0  # workers waiting for its jobs (worker linger): push.lua wakes them

    dead_full: bool = False  # at its dead cap: held back in Kafka (sluice.core.limits)
    used_bytes: int = 0  # what its jobs count against its byte budget, as of the last refresh
    # over its byte budget, or among the largest when every queue's use reached the total (QueueStates;
    # the pusher sets it too when push.lua left records over the budget)
    budget_full: bool = False
    # its last read or push failed on its own keys (QueueStates.refresh_or_hold; the pusher too, and
    # for a forged relayed owner): held until a read succeeds, every refresh_s
    unreadable: bool = False

    @property
    def ready_estimate(self) -> int:
        return self.ready + self.pushed_since_refresh

    @property
    def blocked(self) -> bool:
        return (self.config.paused or self.watermark_paused or self.dead_full or self.budget_full
                or self.unreadable)


Item = tuple[OwnedPartition, str, list[tuple[int, DecodedJob]]]  # a partition's next records for one queue
