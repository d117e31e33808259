"""In-memory fakes of the ports the relay uses (``sluice.relay.ports``), with the contracts' semantics.

The fake engine's push follows push.lua's contract (owner-token check, offset skip,
idempotent by job id); the fake source behaves like a manually assigned Kafka consumer.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import takewhile
from typing import TYPE_CHECKING, Any, cast

from sluice.backends.dynamodb import parking
from sluice.core import policy
from sluice.core.errors import BackendUnavailable, LeaseLost, StaleToken
from sluice.core.listing import SCAN_MOST
from sluice.core.models import Extended, JobSpec, LeasedJob, QueueConfig, QueueStats, SettleEntry
from sluice.core.ports import DELAY_MARKER, ParkedPage, ParkedRecord
from sluice.relay import SourceRecord
from sluice_dev.fakes.ports import FakeClock


@dataclass
class Pushed:
    pushed: int
    skipped: int
    left: int = 0  # records not taken: over the queue's byte budget, or paused (push.lua)
    paused: bool = False  # none taken: the queue's config says paused


@dataclass
class _Lease:
    token: int = 0
    holder: str | None = None
    deadline: float = 0.0
    attempts: int = 0


class FakeEngine:
    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.jobs: dict[str, dict[str, JobSpec]] = {}  # queue -> job id -> spec, in push order
        self.enqueued: list[tuple[str, str]] = []
        self.relayed: dict[tuple[str, str, int], dict[str, int]] = {}
        self.configs: dict[str, QueueConfig] = {}
        self.buckets: dict[str, policy.Bucket] = {}
        self.ownership: dict[str, tuple[JobSpec, _Lease]] = {}
        self.consumed: dict[str, int] = {}  # workers took this many off the ready count
        self.idle: dict[str, int] = {}  # workers waiting for work (their linger), per queue
        self.calls: list[str] = []
        self.down = False
        self.reaped: list[str] = []
        self.endings: dict[str, list[SettleEntry]] = {}  # what Redis ended alone (keys.settle)
        self.residue: list[SettleEntry] = []  # settled entries whose dead jobs left the dead set
        self.gens: dict[str, int] = {}  # job id -> the redrive generation push stored on it
        self.used: dict[str, int] = {}  # bytes counted per queue (keys.used); job_size bytes a job
        self.job_size = 1_000  # what each fake job counts against its queue's max_bytes

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if self.down:
            raise BackendUnavailable("redis is down")

    # ownership jobs (queue sluice-relay)
    def enqueue(self, spec: JobSpec) -> bool:
        """A job in the ownership queue by any path (a test plants what a caller once could)."""
        self._call("enqueue")
        if spec.job_id in self.ownership:
            return False
        self.ownership[spec.job_id] = (spec, _Lease())
        return True

    def enqueue_internal(self, spec: JobSpec) -> bool:
        assert spec.queue.startswith("sluice-"), spec.queue
        return self.enqueue(spec)

    def enqueue_internal_many(self, specs: Sequence[JobSpec]) -> list[bool]:
        return [self.enqueue_internal(spec) for spec in specs]

    def lease(self, queue: str, n: int, lease_ms: int | None, worker_id: str) -> list[LeasedJob]:
        self._call("lease")
        out: list[LeasedJob] = []
        for job_id, (spec, lease) in self.ownership.items():
            if len(out) >= n:
                break
            if lease.holder is not None and lease.deadline > self.clock.t:
                continue
            lease.token += 1
            lease.attempts += 1
            lease.holder, lease.deadline = worker_id, self.clock.t + cast(int, lease_ms) / 1000
            out.append(LeasedJob(job_id=job_id, queue=queue, payload=spec.payload, lease_token=lease.token,
                                 deadline_ms=int(lease.deadline * 1000), attempt=lease.attempts,
                                 max_attempts=spec.max_attempts, lease_ms=lease_ms,
                                 traceparent=getattr(spec, "traceparent", None)))
        return out

    def extend(self, queue: str, job_id: str, token: int, lease_ms: int) -> Extended:
        self._call("extend")
        _, lease = self.ownership[job_id]
        if lease.token != token or lease.holder is None:
            raise LeaseLost(job_id)
        lease.deadline = self.clock.t + lease_ms / 1000
        return Extended(deadline_ms=int(lease.deadline * 1000))

    def release(self, queue: str, job_id: str, token: int) -> None:
        self._call("release")
        _, lease = self.ownership[job_id]
        if lease.token != token or lease.holder is None:
            raise LeaseLost(job_id)
        lease.holder = None
        lease.attempts -= 1

    def ack(self, queue: str, job_id: str, token: int) -> None:
        self._call("ack")
        _, lease = self.ownership[job_id]
        if lease.token != token or lease.holder is None:
            raise LeaseLost(job_id)
        del self.ownership[job_id]

    def redrive(self, queue: str, job_id: str | None = None, generation: int = 0) -> int:
        self._call("redrive")
        return 0

    def unsettled(self, queue: str, limit: int = 100) -> list[SettleEntry]:
        self._call("unsettled")
        return list(self.endings.get(queue, []))[:limit]

    def settled(self, queue: str, jobs: Sequence[SettleEntry], residue: Sequence[SettleEntry] = ()) -> int:
        self._call("settled")
        self.residue.extend(residue)
        before = self.endings.get(queue, [])
        self.endings[queue] = [j for j in before if j not in jobs]
        return len(before) - len(self.endings[queue])

    def reap(self, queue: str, limit: int) -> int:
        self._call("reap")
        self.reaped.append(queue)
        return 0

    # queues
    def depth(self, queue: str) -> int:
        return len(self.jobs.get(queue, {})) - self.consumed.get(queue, 0)

    def stats(self, queue: str) -> QueueStats:
        self._call("stats")
        return QueueStats(queue=queue, ready=self.depth(queue), delayed=0, leased=0, dead=0,
                          oldest_ready_age_ms=None, config=self.get_config(queue),
                          idle_workers=self.idle.get(queue, 0), used_bytes=self.used.get(queue, 0))

    def get_config(self, queue: str) -> QueueConfig:
        return self.configs.get(queue, QueueConfig())

    def set_config(self, queue: str, **changes: Any) -> QueueConfig:
        self.configs[queue] = self.get_config(queue).model_copy(update=changes)
        return self.configs[queue]

    def queues(self) -> list[str]:
        return sorted(self.jobs)

    def push(self, queue: str, topic: str, partition: int, owner_token: int,
             records: list[tuple[int, JobSpec]], gens: Any = None) -> Pushed:
        self._call("push")
        rec = self.relayed.setdefault((queue, topic, partition), {"offset": -1, "owner_token": 0})
        if owner_token < rec["owner_token"]:
            raise StaleToken(mine=owner_token, current=rec["owner_token"])
        rec["owner_token"] = owner_token
        pushed = skipped = 0
        jobs = self.jobs.setdefault(queue, {})
        config = self.get_config(queue)
        if config.paused and any(o > rec["offset"] and spec.job_id not in jobs for o, spec in records):
            return Pushed(0, 0, len(records), paused=True)  # push.lua: a paused queue takes nothing
        budget = config.max_bytes
        for n, (offset, spec) in enumerate(records):
            if offset <= rec["offset"] or spec.job_id in jobs:
                skipped += 1
                continue
            used = self.used.get(queue, 0)
            if budget and used and used + self.job_size > budget:  # push.lua stops here
                rec["offset"] = max([rec["offset"], *(o for o, _ in records[:n])])
                return Pushed(pushed, skipped, len(records) - n)
            self.used[queue] = used + self.job_size
            jobs[spec.job_id] = spec
            self.enqueued.append((queue, spec.job_id))
            if gens and gens.get(spec.job_id):
                self.gens[spec.job_id] = gens[spec.job_id]
            pushed += 1
        rec["offset"] = max([rec["offset"], *(o for o, _ in records)])
        return Pushed(pushed, skipped)

    def push_many(self, topic: str, items: Any, gens: Any = None) -> list[Any]:
        """As ``RedisQueue.push_many``: one round trip (down: it raises), then per item ``push``'s
        outcome or the error that refused that item alone."""
        self._call("push_many")
        out: list[Any] = []
        for queue, partition, token, records in items:
            try:
                out.append(self.push(queue, topic, partition, token, list(records), gens))
            except Exception as exc:
                out.append(exc)
        return out

    def relayed_offset(self, queue: str, topic: str, partition: int, owner_token: int) -> int:
        self._call("relayed_offset")
        return self.relayed.get((queue, topic, partition), {"offset": -1})["offset"]

    # the limits' questions (sluice.core.limits): no allow-list, no dead-job trimming, no memory reading
    def register(self, queue: str, *, admitted: bool = False) -> bool:
        return False

    def trim_dead(self, queue: str, keep: int, max_age_ms: int, limit: int = 1000) -> tuple[int, int]:
        return 0, 0

    def memory_percent(self) -> float | None:
        return None

    def take_rate(self, queue: str, wanted: int) -> int:
        self._call("take_rate")
        cfg = self.get_config(queue)
        now_ms = self.clock.now_ms()
        bucket = self.buckets.get(queue, policy.Bucket(tokens=max(1, cfg.burst), updated_ms=now_ms))
        bucket = policy.refill(bucket, now_ms, cfg.rate_per_s, cfg.burst)
        granted, self.buckets[queue] = policy.take(bucket, wanted)
        return granted


@dataclass
class FakeSource:
    topic: str = "sluice.jobs"
    n_partitions: int = 2
    log: dict[int, list[SourceRecord]] = field(default_factory=dict)
    committed_offsets: dict[int, int] = field(default_factory=dict)
    positions: dict[int, int] = field(default_factory=dict)
    assigned: list[int] = field(default_factory=list)
    paused: set[int] = field(default_factory=set)
    dead: list[tuple[SourceRecord, str]] = field(default_factory=list)
    unflushed_dead: int = 0
    commits: list[dict[int, int]] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    clock: FakeClock | None = None  # an empty poll waits out its timeout on this clock

    def append(self, partition: int, key: bytes | None, value: bytes | None) -> int:
        records = self.log.setdefault(partition, [])
        records.append(SourceRecord(partition, len(records), key, value))
        return len(records) - 1

    def append_spec(self, partition: int, spec: JobSpec) -> int:
        return self.append(partition, spec.job_id.encode(), spec.model_dump_json().encode())

    def partitions(self) -> list[int]:
        return list(range(self.n_partitions))

    def assign(self, partitions: Sequence[int]) -> None:
        self.assigned = list(partitions)
        self.paused &= set(partitions)
        for p in partitions:
            self.positions.setdefault(p, self.committed_offsets.get(p, 0))

    def rewind_to_committed(self, partitions: Sequence[int]) -> None:
        for p in partitions:
            assert p in self.assigned
            self.positions[p] = self.committed_offsets.get(p, 0)

    def position(self, partition: int) -> int | None:
        return self.positions.get(partition) if partition in self.assigned else None

    def poll(self, timeout_ms: int, max_records: int) -> list[SourceRecord]:
        out: list[SourceRecord] = []
        for p in self.assigned:
            if p in self.paused:
                continue
            records = self.log.get(p, [])
            pos = self.positions[p]
            chunk = records[pos:pos + max_records - len(out)]
            self.positions[p] = pos + len(chunk)
            out.extend(chunk)
        if not out and self.clock is not None:
            self.clock.sleep(timeout_ms / 1000)
        return out

    def pause(self, partitions: Sequence[int]) -> None:
        self.paused |= set(partitions)

    def resume(self, partitions: Sequence[int]) -> None:
        self.paused -= set(partitions)

    def commit(self, offsets: Mapping[int, int]) -> None:
        self.events.append("commit")
        self.commits.append(dict(offsets))
        assert self.unflushed_dead == 0, "committed past a dead letter that was not flushed"
        self.committed_offsets.update(offsets)

    def dead_letter(self, record: SourceRecord, reason: str) -> None:
        self.dead.append((record, reason))
        self.unflushed_dead += 1

    def flush_dead_letters(self) -> None:
        self.events.append("flush")
        self.unflushed_dead = 0

    def highwater(self, partition: int) -> int | None:
        return None  # a test that measures lag sets its own


class FakeParkingLot:
    """``ParkingLot`` in memory, with the DynamoDB adapter's ordering: per (queue, partition) by
    offset, a marker per (partition, queue). ``fail``: the next calls raise BackendUnavailable.

    ``segments``: as the DynamoDB lot keeps a park call's records in one item, a ``whole`` page
    holds the rest of the call its last record was parked in (a re-park moves a record to its new
    call); else every record is an item of its own."""

    def __init__(self, *, segments: bool = True) -> None:
        self.segments = segments
        self.calls: dict[tuple[str, int], dict[int, int]] = {}  # per lane: offset -> its park call's first
        self.lanes: dict[tuple[str, int], dict[int, ParkedRecord]] = {}
        self.delays: dict[tuple[str, int], dict[tuple[int, int], ParkedRecord]] = {}  # by due_key
        self.markers: set[tuple[int, str]] = set()
        self.fail = 0
        self.writes = 0  # records written (a re-park counts again: an idempotent put)
        self.pages = 0
        self._lock = threading.Lock()  # the relay sweeps on a thread of its own

    def _maybe_fail(self) -> None:
        if self.fail:
            self.fail -= 1
            raise BackendUnavailable("the fake parking lot is down")

    def park(self, queue: str, partition: int, records: Sequence[ParkedRecord], *, mark: bool = True,
             delay: bool = False) -> None:
        self._maybe_fail()
        with self._lock:
            self._park(queue, partition, records, mark, delay)

    def _park(self, queue: str, partition: int, records: Sequence[ParkedRecord], mark: bool,
              delay: bool = False) -> None:
        marker = DELAY_MARKER + queue if delay else queue
        if records and mark:
            self.markers.add((partition, marker))
        assert not records or (partition, marker) in self.markers, "a record parked with no marker"
        if delay:
            lane = self.delays.setdefault((queue, partition), {})
            for r in records:
                lane[r.due_key] = r
        else:
            ordered = self.lanes.setdefault((queue, partition), {})
            calls = self.calls.setdefault((queue, partition), {})
            for r in records:
                ordered[r.offset] = r
                calls[r.offset] = records[0].offset
        self.writes += len(records)

    def page(self, queue: str, partition: int, after: int, limit: int, *,
             whole: bool = False) -> list[ParkedRecord]:
        self._maybe_fail()
        with self._lock:
            self.pages += 1
            lane = self.lanes.get((queue, partition), {})
            above = [lane[o] for o in sorted(lane) if o > after]
            if not (whole and self.segments) or len(above) <= limit:
                return above[:limit]  # one record an item: whole as it is
            calls = self.calls[(queue, partition)]
            call = calls[above[limit - 1].offset]
            return above[:limit] + list(takewhile(lambda r: calls[r.offset] == call, above[limit:]))

    def due(self, queue: str, partition: int, after: tuple[int, int] | None,
            limit: int) -> list[ParkedRecord]:
        self._maybe_fail()
        with self._lock:
            self.pages += 1
            lane = self.delays.get((queue, partition), {})
            return [lane[k] for k in sorted(lane) if after is None or k > after][:limit]

    def release(self, queue: str, records: Sequence[ParkedRecord], *, delay: bool = False) -> int:
        self._maybe_fail()
        gone = 0
        with self._lock:
            for r in records:
                if delay:
                    gone += self.delays.get((queue, r.partition), {}).pop(r.due_key, None) is not None
                else:
                    gone += self.lanes.get((queue, r.partition), {}).pop(r.offset, None) is not None
        return gone

    def marked(self, partition: int) -> list[str]:
        self._maybe_fail()
        return sorted(q for p, q in self.markers if p == partition)

    def unmark(self, queue: str, partition: int) -> None:
        self._maybe_fail()
        self.markers.discard((partition, queue))

    def count(self, queue: str) -> int:
        with self._lock:
            return sum(len(lane) for lanes in (self.lanes, self.delays)
                       for (q, _), lane in lanes.items() if q == queue)

    def newest(self, queue: str, after: tuple[str, int] | None, limit: int,
               prefix: str | None = None) -> ParkedPage:
        """``ParkedJobs.newest`` as the DynamoDB lot answers it, one record an item: the items' keys
        read backwards, strictly after ``after``'s, at most ``SCAN_MOST`` examined."""
        self._maybe_fail()
        hi = None if after is None else parking.item_key(after[0])
        with self._lock:
            self.pages += 1
            items = [(parking.lane_key(r.partition, r.offset), r, False)
                     for (q, _), lane in self.lanes.items() if q == queue for r in lane.values()]
            items += [(parking.delay_key(r.partition, r.run_at_ms, r.offset), r, True)
                      for (q, _), lane in self.delays.items() if q == queue for r in lane.values()]
        rest = sorted((i for i in items if hi is None or i[0] < hi), key=lambda i: i[0], reverse=True)
        picked, examined = [], 0
        for sk, r, delayed in rest:
            examined += 1
            if prefix is None or r.job_id.startswith(prefix):
                picked.append((sk, r, delayed))
                if len(picked) == limit + 1:
                    last = picked[limit - 1]
                    return ParkedPage([(r, d) for _, r, d in picked[:limit]],
                                      (parking.compact_key(last[0]), last[1].offset), examined)
            if examined >= SCAN_MOST:
                place = (parking.compact_key(sk), r.offset)
                return ParkedPage([(r, d) for _, r, d in picked], place, examined)
        return ParkedPage([(r, d) for _, r, d in picked], None, examined)


if TYPE_CHECKING:  # each fake is its port's: mypy --strict checks these, nothing runs them
    from sluice.relay import ports

    _ENGINE: ports.RelayEngine = FakeEngine(FakeClock())
    _SOURCE: ports.RecordSource = FakeSource()
    _LOT: ports.ParkingLot = FakeParkingLot()
    from sluice.core.ports import ParkedJobs

    _PARKED: ParkedJobs = FakeParkingLot()
