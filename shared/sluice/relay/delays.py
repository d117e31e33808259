"""The delay lane (issue 28): a record due beyond the relay's horizon waits by run time in the parking
lot, apart from its queue's ordered lane, and goes into Redis's delayed set once due within it.

A record whose run time is more than ``RelayConfig.delay_horizon_ms`` after the relay takes it
(``Intake._aside``) is parked in its queue's delay lane of its partition (``ParkingLot.park(...,
delay=True)``: keyed by run time, then offset), whatever the queue does, and the commit point passes
it once that write succeeded. It never joins the queue's ordered lane, so it holds back none of the
queue's ready records. The partition's owner reads each delay lane whose queue is not held, from the
last record it pushed back, and pushes those due within the horizon into Redis (their run time is
kept: ``push.lua`` puts them in the delayed set, and promotion runs them when due).

The hand-off (docs/relay.md, "The delay lane"): push-backs never go through the queue's relayed
offset of the job topic, which later ordinary records have pushed past them. They are pushed under a
topic of their own (``delay_topic``: a name Kafka cannot have), numbered from that topic's relayed
offset upwards, so ``push.lua``'s offset check never skips one; a copy is caught instead by
``push.lua``'s skip of a job whose hash exists, and by the jobs table's finality (``relay_view``),
as the ordered lane's re-reads after a Redis loss are. Records stay in the lot until their jobs are
final (``Parking.sweep``), and a new owner reads a delay lane from its start.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from functools import partial
from typing import Final

from sluice.core import bus as ev
from sluice.core.bus import EventBus
from sluice.core.errors import LeaseLost, SluiceError
from sluice.core.models import DecodedJob
from sluice.core.ports import JobStore, ParkedRecord
from sluice.relay.config import RelayConfig
from sluice.relay.intake import Intake
from sluice.relay.lot_calls import LotCalls
from sluice.relay.ownership import Ownership
from sluice.relay.ports import ParkingLot, PushItem, SourceRecord
from sluice.relay.pusher import Pusher
from sluice.relay.state import DelayLane, OwnedPartition, RelayReport

DELAY_TOPIC_SUFFIX: Final = "~delay"  # "~" is not allowed in a Kafka topic name: no real topic's offsets
NOT_KNOWN: Final = 2**62  # a lane's next run time when nothing not yet pushed back is known of

Sent = tuple[OwnedPartition, str, DelayLane, list[tuple[ParkedRecord, DecodedJob | None]]]


def delay_topic(topic: str) -> str:
    """The topic name delay-lane push-backs are recorded under in ``push.lua`` (per queue, partition)."""
    return topic + DELAY_TOPIC_SUFFIX


def due_within(page: Sequence[ParkedRecord], until_ms: int) -> int:
    """How many of a delay lane's page (in run-time order) are due by ``until_ms``."""
    n = 0
    while n < len(page) and page[n].run_at_ms <= until_ms:
        n += 1
    return n


def next_due(page: Sequence[ParkedRecord], n: int, limit: int) -> int:
    """A lane's next run time to look for after a read whose first ``n`` records were due: the first
    one not due, or at once if the page was full (more may be due), else none known."""
    if n < len(page):
        return page[n].run_at_ms
    return 0 if len(page) >= limit else NOT_KNOWN


class DelayLanes:
    """Parks the delay lanes' records and pushes them back when due (on the relay's main thread)."""

    def __init__(self, lot: ParkingLot, config: RelayConfig, ownership: Ownership, intake: Intake,
                 store: JobStore, pusher: Pusher, *, report: RelayReport, events: EventBus,
                 now_ms: Callable[[], int], calls: LotCalls,
                 parked_record: Callable[[SourceRecord, DecodedJob], ParkedRecord]) -> None:
        self.lot, self.config, self.ownership, self.intake, self.store = lot, config, ownership, intake, store
        self.pusher, self.report, self.events, self.now_ms = pusher, report, events, now_ms
        self.parked_record, self.calls = parked_record, calls
        # pages read off the step, by lane key, until ``push_back`` applies them on the relay's thread
        self._pages: dict[Hashable, tuple[OwnedPartition, str, DelayLane, list[ParkedRecord]]] = {}
        self.topic = delay_topic(pusher.topic)

    def park(self, everyone: Sequence[OwnedPartition]) -> None:
        """Write what waits for each delay lane, off the step (``LotCalls``, one write per lane in
        flight); a record leaves memory only once written."""
        for owned in everyone:
            for queue, lane in owned.delays.items():
                key = ("delay", owned.number, queue)
                if lane.out and not self.calls.busy(key) and key not in self._pages:
                    records = [self.parked_record(r, job) for r, job in lane.out[:self.config.park_call_max]]
                    self.calls.submit(key, partial(self.lot.park, queue, owned.number, records,
                                                   mark=not lane.marked, delay=True),
                                      partial(self._parked, owned, queue, lane, records))

    def _parked(self, owned: OwnedPartition, queue: str, lane: DelayLane, records: list[ParkedRecord],
                outcome: object) -> None:
        if self.ownership.owned.get(owned.number) is not owned:
            return  # given back meanwhile: not committed past, so its new owner takes them from Kafka
        if isinstance(outcome, SluiceError):  # they stay in memory, uncommitted: tried at the next turn
            self.events.emit(ev.ParkingFailed(queue=queue, partition=owned.number,
                                              error=ev.error_text(outcome)))
            return
        del lane.out[:len(records)]
        self.intake.hooks.on_parked(owned.number, [r.offset for r in records])
        lane.marked = True
        lane.next_due_ms = min(lane.next_due_ms, min(r.run_at_ms for r in records))
        owned.pending_count -= len(records)
        self.report.parked += len(records)
        self.events.emit(ev.Parked(queue=queue, partition=owned.number, n=len(records)))

    def push_back(self, everyone: Sequence[OwnedPartition], held: set[str],
                  blocked: Callable[[str], bool]) -> None:
        """Push the records now due within the horizon of the lanes whose queues can take records.

        A lane's read runs off the step (``LotCalls``, one call in flight per lane, as the ordered
        lanes' reads): its page waits in ``_pages`` until this applies it on the relay's thread, and
        meanwhile nothing else is read or parked in the lane. With the lot's calls inline (``park_threads``
        0) a page is read and pushed in the same turn, as before."""
        self._apply(held, blocked)
        until, limit = self.now_ms() + self.config.delay_horizon_ms, self.config.batch
        for owned in everyone:
            for queue, lane in owned.delays.items():
                key = ("delay", owned.number, queue)
                if lane.next_due_ms <= until and queue not in held and not blocked(queue) \
                        and not self.calls.busy(key) and key not in self._pages:
                    self.calls.submit(key, partial(self.lot.due, queue, owned.number, lane.after, limit),
                                      partial(self._read, key, owned, queue, lane))
        self.calls.collect()
        self._apply(held, blocked)

    def _read(self, key: Hashable, owned: OwnedPartition, queue: str, lane: DelayLane,
              page: list[ParkedRecord] | SluiceError) -> None:
        """A lane's page, read on a thread: kept for ``_apply`` (the push is one ``push_many`` of every
        lane's due records of the turn)."""
        if self.ownership.owned.get(owned.number) is not owned:
            return  # given back meanwhile: its new owner reads the lane from its start
        if isinstance(page, SluiceError):  # the cursor did not move: read again at the next turn
            self.events.emit(ev.ParkingFailed(queue=queue, partition=owned.number, error=ev.error_text(page)))
            return
        self._pages[key] = (owned, queue, lane, page)

    def _apply(self, held: set[str], blocked: Callable[[str], bool]) -> None:
        """Push the due records of the pages read by now. A page of a lane given back, or whose queue
        is held by now, is dropped: its cursor did not move, so it is read again once the queue can
        take records."""
        pages, self._pages = self._pages, {}
        until, limit = self.now_ms() + self.config.delay_horizon_ms, self.config.batch
        sent: list[Sent] = []
        for owned, queue, lane, page in pages.values():
            if self.ownership.owned.get(owned.number) is not owned or queue in held or blocked(queue):
                continue
            n = due_within(page, until)
            lane.next_due_ms = next_due(page, n, limit)
            jobs = self._readmit(owned, page[:n])
            if jobs:
                sent.append((owned, queue, lane, jobs))
        if sent:
            self._push(sent)

    def _readmit(self, owned: OwnedPartition,
                 page: Sequence[ParkedRecord]) -> list[tuple[ParkedRecord, DecodedJob | None]]:
        """Each record decoded and checked again, as from Kafka (None: refused, recorded dead)."""
        jobs: list[tuple[ParkedRecord, DecodedJob | None]] = []
        for parked in page:
            job = self.intake.readmit(owned, parked.record())
            if self.ownership.owned.get(owned.number) is not owned:
                return []  # given back: its new owner reads the lane from its start
            jobs.append((parked, job))
        return jobs

    def _push(self, sent: list[Sent]) -> None:
        ids = [job.job_id for *_, jobs in sent for _, job in jobs if job is not None]
        try:
            final, gens = self.store.relay_view(ids) if ids else (set[str](), dict[str, int]())
        except SluiceError as exc:  # nothing pushed, no cursor moved: tried at the next turn
            for owned, queue, lane, _ in sent:
                lane.next_due_ms = 0
                self.events.emit(ev.ParkingFailed(queue=queue, partition=owned.number,
                                                  error=ev.error_text(exc)))
            return
        items: list[PushItem] = []
        pushing: list[tuple[Sent, list[tuple[int, DecodedJob]]]] = []
        for s in sent:
            owned, queue, lane, jobs = s
            live = [job for _, job in jobs if job is not None and job.job_id not in final]
            self.report.final_dropped += sum(job is not None and job.job_id in final for _, job in jobs)
            if not live:  # all final or refused: past them (the sweep releases them)
                lane.after = jobs[-1][0].due_key
                continue
            if self.ownership.owned.get(owned.number) is not owned:
                continue  # lost with another of its lanes (``_token``): the new owner's now
            token = self._token(owned, queue, lane)
            if token is None:
                continue
            assert lane.seq is not None
            records = [(lane.seq + 1 + i, job) for i, job in enumerate(live)]
            items.append((queue, owned.number, token, records))
            pushing.append((s, records))
        if not items:
            return
        t0 = ev.wall()
        try:
            outcomes = self.pusher.engine.push_many(self.topic, items, gens)
        except SluiceError as exc:  # it may have landed: each lane reads its relayed offset again
            self.pusher.announce(items, [exc] * len(items), t0, self.topic)
            for (owned, queue, lane, _), _records in pushing:
                lane.seq, lane.next_due_ms = None, 0
                self.events.emit(ev.ParkingFailed(queue=queue, partition=owned.number,
                                                  error=ev.error_text(exc)))
            return
        self.pusher.announce(items, outcomes, t0, self.topic)  # the chaos run's rules and kill point see it
        for ((owned, queue, lane, jobs), records), outcome in zip(pushing, outcomes, strict=True):
            self._pushed(owned, queue, lane, jobs, records, outcome)

    def _token(self, owned: OwnedPartition, queue: str, lane: DelayLane) -> int | None:
        """The owner token to push ``queue``'s lane with (the hooks fence first), having read the
        lane topic's relayed offset once a session (and after an unanswered push); None: not now."""
        try:
            token = self.pusher.hooks.before_push(queue, owned.number, owned.token)
            if lane.seq is None:
                lane.seq = self.pusher.engine.relayed_offset(queue, self.topic, owned.number, token)
        except LeaseLost as exc:  # a newer owner, or Redis's epoch changed
            self._lose(owned, exc)
            return None
        except SluiceError as exc:
            lane.next_due_ms = 0
            self.events.emit(ev.ParkingFailed(queue=queue, partition=owned.number,
                                              error=ev.error_text(exc)))
            return None
        return token

    def _lose(self, owned: OwnedPartition, exc: Exception) -> None:
        if self.ownership.owned.get(owned.number) is owned:
            self.report.stale_stops += 1
            self.ownership.lose(owned.number, str(exc))
            self.ownership.assign()

    def _pushed(self, owned: OwnedPartition, queue: str, lane: DelayLane,
                jobs: list[tuple[ParkedRecord, DecodedJob | None]], records: list[tuple[int, DecodedJob]],
                outcome: object) -> None:
        if isinstance(outcome, LeaseLost):
            if self.pusher.forged(owned, queue, outcome, False, {}, self.topic):
                # the lane's queue's key names an owner no relay holds: this lane alone waits, read
                # again in refresh_s (push_back reads a lane once its next run time is within the horizon)
                lane.seq = None
                wait_ms = self.config.delay_horizon_ms + int(self.config.refresh_s * 1000)
                lane.next_due_ms = self.now_ms() + wait_ms
                return
            self._lose(owned, outcome)
            return
        if isinstance(outcome, Exception):  # nothing of this item written: tried again, offset re-read
            lane.seq, lane.next_due_ms = None, 0
            self.events.emit(ev.ParkingFailed(queue=queue, partition=owned.number,
                                              error=ev.error_text(outcome)))
            return
        self.pusher.forged_gone(queue, owned.number, self.topic)
        pushed, skipped, left = (int(getattr(outcome, name)) for name in ("pushed", "skipped", "left"))
        taken = len(records) - left
        assert lane.seq is not None
        lane.seq += taken  # push.lua raised the offset to the last one taken (a prefix)
        self.report.pushed += pushed
        self.report.skipped += skipped
        self.report.unparked += taken
        if taken:
            self.pusher.status.submit([(queue, records[:taken])])
        if left:  # over the byte budget: from the first one left, at a later turn
            first_left = records[taken][1]
            stop = next(i for i, (_, job) in enumerate(jobs) if job is first_left)
            if stop:
                lane.after = jobs[stop - 1][0].due_key
            lane.next_due_ms = 0
        else:
            lane.after = jobs[-1][0].due_key
        self.events.emit(ev.Unparked(queue=queue, partition=owned.number, n=taken))
