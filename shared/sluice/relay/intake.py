"""Records in: each Kafka record decoded once, then buffered, skipped or dead-lettered.

A record of an owned partition is decoded here and nowhere else; the relay's hooks get
the decoded records too (recovery tracks their job ids). A poison record, or an unminted one
of a queue the registry refuses, goes to the dead-letter topic; a minted, sealed record's queue
is registered without the limit (its gateway reserved it before answering 202). Records Redis already holds
(at or below ``push.lua``'s recorded offset) leave the buffers before they cost a rate
token. A partition whose buffer is full stops fetching until it drains.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from typing import NamedTuple

from sluice.core import bus as ev
from sluice.core import ids, seal
from sluice.core.bus import EventBus
from sluice.core.errors import LeaseLost, QueueNotAllowed, SluiceError
from sluice.core.ids import Verifier
from sluice.core.models import DecodedJob
from sluice.core.ports import JobStore
from sluice.relay.config import RelayConfig
from sluice.relay.hooks import RelayHooks
from sluice.relay.ownership import Ownership
from sluice.relay.ports import RecordSource, RelayEngine, SourceRecord
from sluice.relay.records import Sealing, decode_sealed
from sluice.relay.state import DelayLane, OwnedPartition, RelayReport

log = logging.getLogger("sluice.relay")  # one logger for the whole relay, as before the package split


def unminted(spec: DecodedJob, job_ids: Verifier) -> str | None:
    """Why ``spec``'s id was not minted by a gateway holding these keys for its queue, or None.

    Kafka may be reachable by more than the gateways: a record whose id does not verify was
    written by someone else. A keyless id (a schedule's firing, ``ids.keyless``) is anyone's to
    compute: it passes here when it names the record's queue, and its record's seal decides.
    """
    found = job_ids.verify(spec.job_id)
    if found is None:
        if ids.is_keyless(spec.job_id) and spec.job_id.split(".")[1] == spec.queue:
            return None
        return f"unminted: job id {spec.job_id!r} was not minted by this deployment's gateway"
    if found.queue != spec.queue:
        return f"unminted: job id {spec.job_id!r} is for queue {found.queue!r}, not {spec.queue!r}"
    return None


class Refusal(NamedTuple):
    """Why a record whose id passed ``unminted`` is not pushed, and whether its job ends ``dead``
    with that reason in the jobs table (``JobStore.refuse_record``). Not for a keyless id whose seal
    fails: anyone can name one, and must not be able to end a firing before it happens."""

    reason: str
    record_dead: bool
    genuine: bool = False  # the seal verified: refused for its age only (``JobStore.refuse_record``'s queued)


def refusal(job: DecodedJob, sealing: Sealing, job_ids: Verifier, now_ms: int) -> Refusal | None:
    """The seal and life checks of a record whose id is ours (docs/security.md, "Records")."""
    if sealing.schema_version != seal.VERSION:
        return Refusal(f"unsealed: a record of format {sealing.schema_version}; this relay pushes only "
                       f"sealed records (format {seal.VERSION})", not ids.is_keyless(job.job_id))
    kid = seal.seal_key_id(sealing.seal)
    signed = seal.message(job.job_id, job.queue, job.payload, job.priority, job.max_attempts, job.lease_ms,
                          job.run_at_ms, job.enqueued_at_ms, sealing.idempotency_key, job.group,
                          job.traceparent)
    if kid is None or not seal.verify(sealing.seal, signed, job_ids.keys_for(kid)):
        return Refusal("seal: the record does not match its seal (its payload, priority, attempts, lease, "
                       "run-at or acceptance time was altered, or no key of this deployment sealed it)",
                       not ids.is_keyless(job.job_id))
    expired = seal.life_refusal(job.enqueued_at_ms, job.run_at_ms, now_ms)
    if expired is not None:
        return Refusal(expired, True, genuine=True)
    return None


def check_record(job: DecodedJob, sealing: Sealing, job_ids: Verifier, now_ms: int) -> Refusal | None:
    """Every check of a record before its push, cheapest path first: a record whose seal verifies
    was made whole by a holder of the job id key, its id included, so only its age is checked then
    (the id's own MAC would say nothing more). Otherwise the id decides what a refusal does: not
    ours (``unminted``), dead-letter only; ours, its job ends dead with the reason (``refusal``)."""
    if sealing.schema_version == seal.VERSION and (kid := seal.seal_key_id(sealing.seal)) is not None:
        signed = seal.message(job.job_id, job.queue, job.payload, job.priority, job.max_attempts,
                              job.lease_ms, job.run_at_ms, job.enqueued_at_ms, sealing.idempotency_key,
                              job.group, job.traceparent)
        if seal.verify(sealing.seal, signed, job_ids.keys_for(kid)):
            expired = seal.life_refusal(job.enqueued_at_ms, job.run_at_ms, now_ms)
            return None if expired is None else Refusal(expired, True, genuine=True)
    why = unminted(job, job_ids)
    if why is not None:
        return Refusal(why, False)
    return refusal(job, sealing, job_ids, now_ms)


class Intake:
    """Takes polled records into the owned partitions' buffers.

    ``job_ids`` (the job id keys) makes every record prove a gateway of this deployment minted
    its id and sealed the whole record (``refusal``); a record that cannot goes to the dead-letter
    topic, and one whose id is ours ends its job ``dead`` with the reason in ``store`` first. None
    trusts every record (harnesses that name jobs themselves). ``now_ms``: the wall clock the
    records' life bound is checked on."""

    def __init__(self, engine: RelayEngine, source: RecordSource, config: RelayConfig, ownership: Ownership,
                 *, report: RelayReport, hooks: RelayHooks, monotonic: Callable[[], float],
                 job_ids: Verifier | None = None, events: EventBus, store: JobStore | None = None,
                 now_ms: Callable[[], int] | None = None) -> None:
        self.engine, self.source, self.config, self.ownership = engine, source, config, ownership
        self.report, self.hooks, self.monotonic, self.job_ids = report, hooks, monotonic, job_ids
        self.events, self.store = events, store
        self.now_ms = now_ms or (lambda: int(monotonic() * 1000))
        # the relay parks (relay/parking.py): each buffered record's raw record is kept, so that it
        # can be parked as Kafka had it if its queue is held
        self.parking = False
        self._admitted: set[str] = set()
        self._refused: dict[str, tuple[float, str]] = {}  # queue -> (until, why)

    def take(self, records: Sequence[SourceRecord]) -> None:  # noqa: C901 - the per-record hot loop, inlined
        self._read(records)
        owned_by, parking = self.ownership.owned, self.parking
        horizon = self.config.delay_horizon_ms
        beyond = self.now_ms() + horizon if parking and horizon else None  # due later: the delay lane
        decoded: list[tuple[SourceRecord, DecodedJob | str]] = []
        # A poll's records come in runs of one partition (the source sorts them): a run reads
        # its partition's state into locals once, and writes it back at its end.
        owned: OwnedPartition | None = None
        partition, next_offset, taken = -1, None, 0
        for record in records:
            if record.partition != partition:
                if owned is not None:
                    owned.next_offset, owned.pending_count = next_offset, owned.pending_count + taken
                partition, taken = record.partition, 0
                owned = owned_by.get(partition)
                next_offset = owned.next_offset if owned is not None else None
            if owned is None:
                continue  # not ours any more
            offset = record.offset
            if next_offset is None:  # we started at the committed offset: nothing to commit yet
                owned.committed = offset
            elif offset < next_offset:
                continue  # a re-delivery of something already taken
            next_offset = offset + 1
            job = self._decode(owned, record, decoded)
            if job is None:
                if owned_by.get(partition) is not owned:  # given back (``_refuse``): read again later
                    owned = None
                continue
            taken += 1
            if parking and self._aside(owned, record, job, beyond):
                continue  # to be parked behind its queue's parked records (relay/parking.py)
            pending = owned.pending.get(job.queue)
            if pending is None:
                pending = owned.pending[job.queue] = deque()
            pending.append((offset, job))
        if owned is not None:
            owned.next_offset, owned.pending_count = next_offset, owned.pending_count + taken
        if decoded:
            self.hooks.on_records(decoded)

    @staticmethod
    def _aside(owned: OwnedPartition, record: SourceRecord, job: DecodedJob, beyond: int | None) -> bool:
        """Parking: a record due after ``beyond`` goes to its queue's delay lane (True); one of a
        queue whose lane is parking is parked too, behind the others (True), whatever the queue
        does now; any other is buffered with its raw record kept, so that it can be parked if its
        queue is held (the raw records of those pushed are dropped at the end of the step:
        ``Parking.turn``)."""
        if beyond is not None and job.run_at_ms > beyond:
            delays = owned.delays.get(job.queue)
            if delays is None:
                delays = owned.delays[job.queue] = DelayLane()
            delays.out.append((record, job))
            return True
        lane = owned.lanes.get(job.queue)
        if lane is not None and lane.parking:
            lane.out.append((record, job))
            return True
        raw = owned.raw.get(job.queue)
        if raw is None:
            raw = owned.raw[job.queue] = {}
        raw[record.offset] = record
        return False

    def readmit(self, owned: OwnedPartition, record: SourceRecord) -> DecodedJob | None:
        """A record read back from the parking lot: decoded and checked again as when Kafka gave it
        (a record altered in the lot fails its seal; one past its life ends dead), or None."""
        return self._decode(owned, record, [])

    def _decode(self, owned: OwnedPartition, record: SourceRecord,
                decoded: list[tuple[SourceRecord, DecodedJob | str]]) -> DecodedJob | None:
        """``record``'s job if it goes into the buffers (added to ``decoded`` either way), else None:
        poison, unminted, refused (``_admit``)."""
        found = decode_sealed(record)
        if isinstance(found, str):
            decoded.append((record, found))
            self._dead_letter(owned, record, found)
            return None
        job, sealing = found
        decoded.append((record, job))
        checked = self.job_ids is not None or job.queue not in self._admitted
        return job if not checked or self._admit(owned, record, job, sealing) else None

    def _admit(self, owned: OwnedPartition, record: SourceRecord, job: DecodedJob, sealing: Sealing) -> bool:
        """Whether ``job`` goes into the buffers; one no gateway minted or sealed, or one of a queue
        the registry refuses, goes to the dead-letter topic instead (a minted one of a refused
        queue ending its job ``dead`` with the reason first)."""
        # Minted and sealed first: a record no gateway made must not register its queue name.
        if self.job_ids is not None:
            refused = check_record(job, sealing, self.job_ids, self.now_ms())
            if refused is not None:
                if refused.record_dead:
                    self.report.refused_records += self._refuse(owned, record, job, refused)
                else:  # not ours (unminted), or a keyless id whose seal fails: nothing to record
                    self.report.refused_records += not refused.reason.startswith("unminted")
                    self._dead_letter(owned, record, refused.reason)
                return False
        minted = self.job_ids is not None
        if job.queue not in self._admitted and (why := self._refusal(job.queue, minted)) is not None:
            self.report.refused += 1
            if minted:
                # Minted and sealed by a gateway of this deployment, yet refused for something other
                # than the limit (an allow-list changed since): it answered 202, so the job ends visibly dead
                # with the reason (GET, events), never dropped in silence.
                self._refuse(owned, record, job, Refusal(f"queue refused: {why}", record_dead=True))
            else:
                self._dead_letter(owned, record, f"queue refused: {why}")
            return False
        return True

    def _refuse(self, owned: OwnedPartition, record: SourceRecord, job: DecodedJob, refused: Refusal) -> bool:
        """A record refused for its seal or its age: its job ends ``dead`` with the reason (unless its
        item is already past ``accepted``: a copy must not end a job that runs), then the record goes
        to the dead-letter topic: True. If the jobs table cannot be written, the partition is given
        back and taken again from its committed offset (before this record), never dropped: False."""
        if refused.record_dead and self.store is not None:
            try:
                written = self.store.refuse_record(job.job_id, job.queue,
                                                   f"refused by the relay: {refused.reason}",
                                                   job.enqueued_at_ms, queued=refused.genuine)
            except SluiceError as exc:
                log.warning("could not record refused job %s (%s); partition %s is read again from its "
                            "committed offset", job.job_id, exc, owned.number)
                self.ownership.give_back([owned.number])
                self.ownership.assign()
                self.ownership.look_again()  # take it again at the next step
                return False
            log.warning("job %s refused (%s): %s", job.job_id,
                        "recorded dead" if written else "its item had moved on, left as is", refused.reason)
        self._dead_letter(owned, record, refused.reason)
        return True

    def _dead_letter(self, owned: OwnedPartition, record: SourceRecord, reason: str) -> None:
        self.source.dead_letter(record, reason)
        owned.dead_since_commit = True
        self.report.dead_lettered += 1
        log.warning("poison record %s/%s -> dead-letter topic: %s", record.partition, record.offset, reason)

    def _read(self, records: Sequence[SourceRecord]) -> None:
        """``RecordsRead`` per partition of a poll (before any is taken: what Kafka gave), when
        anyone listens."""
        if not records or not self.events.listening:
            return
        by_partition: dict[int, list[int]] = {}
        for r in records:
            by_partition.setdefault(r.partition, []).append(r.offset)
        for p, offsets in by_partition.items():
            self.events.emit(ev.RecordsRead(topic=self.source.topic, partition=p, first=min(offsets),
                                            last=max(offsets), n=len(offsets)))

    def skip_relayed(self) -> None:
        """Drop from the buffers the records Redis already holds: at or below push.lua's recorded
        offset (read again after a restart, or a resume from an older checkpoint). They leave
        here, before they cost a rate token, a finality read, a push or a status write."""
        for owned in list(self.ownership.owned.values()):
            for queue, q in owned.pending.items():
                if not q:
                    continue
                mark = self.relayed_mark(owned, queue)
                if mark is None:
                    break
                n = 0
                while q and q[0][0] <= mark:
                    q.popleft()
                    n += 1
                owned.pending_count -= n
                self.report.skipped += n
                self.report.reread += n

    def relayed_mark(self, owned: OwnedPartition, queue: str) -> int | None:
        """push.lua's recorded offset for ``queue`` in ``owned``'s partition: every record of the
        queue at or below it is in Redis already. Read once per owner and queue, then kept up by the
        pushes. None: the partition was lost meanwhile (a newer owner, or Redis's epoch changed)."""
        mark = owned.relayed.get(queue)
        if mark is not None:
            return mark
        try:
            # as for a push: the hooks fence (and may rebase) before the read
            token = self.hooks.before_push(queue, owned.number, owned.token)
            mark = self.engine.relayed_offset(queue, self.source.topic, owned.number, token)
        except LeaseLost as exc:
            self.report.stale_stops += 1
            self.ownership.lose(owned.number, str(exc))
            self.ownership.assign()
            return None
        owned.relayed[queue] = mark
        return mark

    def _refusal(self, queue: str, minted: bool = False) -> str | None:
        """Why the registry refuses ``queue`` (allow-list, or full), else None; asked once per queue
        (a refusal is remembered for ``maintenance_s``). Such a record goes to the dead-letter
        topic: held back it would stop its partition's commits for good. Any other error admits
        the record: its push registers the queue again, and fails and retries as pushes do.

        ``minted``: the record is minted and sealed, so a gateway reserved its queue before its 202
        (issue 28): the queue is registered without the limit, so never refused for it here, even
        when Redis lost the registry's cache and the limit would now refuse it (an allow-list the
        operator changed since the 202 still can: the job then ends dead with the reason)."""
        if queue in self._admitted:
            return None
        now = self.monotonic()
        refused = self._refused.get(queue)
        if refused is not None and now < refused[0]:
            return refused[1]
        try:
            if minted:
                if self.engine.register(queue, admitted=True):
                    self.events.emit(ev.QueueRegistered(queue=queue))
            else:
                self.engine.register(queue)
        except QueueNotAllowed as exc:
            if len(self._refused) > 10_000:  # random names must not grow a relay without bound
                self._refused.clear()
            self._refused[queue] = (now + self.config.maintenance_s, str(exc))
            return str(exc)
        except SluiceError as exc:
            log.warning("could not register queue %s before pushing: %s", queue, exc)
            return None
        self._admitted.add(queue)
        return None

    def flow_control(self) -> None:
        """Stop fetching partitions whose backlog is held up (paused or rate-limited queues)."""
        owned, most = self.ownership.owned.values(), self.config.max_pending
        stop = [o for o in owned if not o.fetch_paused and o.pending_count >= most]
        go = [o for o in owned if o.fetch_paused and o.pending_count < most // 2]
        if stop:
            self.source.pause([o.number for o in stop])
        if go:
            self.source.resume([o.number for o in go])
        for o in stop:
            o.fetch_paused = True
        for o in go:
            o.fetch_paused = False
