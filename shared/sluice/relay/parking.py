"""Parking: a held queue's records leave the shared partitions, and come back in order (issue 28).

Kafka orders records per partition, and every queue shares the partitions. A queue that cannot
take its records now (paused, over its rate, a watermark, a cap, the memory guard: "held") would
fill its partitions' buffers and stop them for every queue. Instead, once a held queue buffers
more than ``RelayConfig.park_above`` records in a partition, its newest records there go to the
parking lot (``ports.ParkingLot``: a DynamoDB table), and every new record of that (queue,
partition) follows them until they have drained, so none overtakes a parked one. A record leaves
the buffer only after its park write succeeded: then the commit point may pass it
(``OwnedPartition.commit_point``). When the queue can take records again and its buffer there
runs low, the next page is read back (decoded and seal-checked again, ``Intake.readmit``); a page
that comes back short with nothing parked since puts the lane back to direct pushing.

Parked records are deleted by ``sweep`` only once their jobs are final in the jobs table, never
right after their push: after a Redis loss, recovery replays from checkpoints that may be past a
parked record's offset, and a new owner reads each marked lane from its start (records Redis holds
are skipped by ``push.lua``'s relayed offset, final ones by ``relay_view``). A parked record past
the job life bound ends ``dead`` with the reason (``JobStore.refuse_record``), never dropped.

The decisions (``spill``, ``drained``, ``read_room``) are pure. ``Parking`` decides on the relay's
main thread, between the push round and the commit; the lot's parks and reads run on threads
(relay/lot_calls.py), so a held queue's writes never slow another queue's pushes: a lane has up to
``RelayConfig.park_calls`` parks in flight (``next_cut``), and one read; the sweep runs on a thread
of its own.

A record due beyond the relay's horizon goes to its queue's delay lane instead (relay/delays.py):
keyed by run time, it holds back none of its queue's ready records.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from itertools import takewhile
from typing import Final

from sluice.core import bus as ev
from sluice.core import seal
from sluice.core.bus import EventBus
from sluice.core.errors import SluiceError
from sluice.core.models import DecodedJob
from sluice.core.ports import DELAY_MARKER, JobStore, ParkedRecord
from sluice.relay.config import RelayConfig
from sluice.relay.delays import DelayLanes
from sluice.relay.intake import Intake
from sluice.relay.lot_calls import LotCalls
from sluice.relay.ownership import Ownership
from sluice.relay.ports import ParkingLot, SourceRecord
from sluice.relay.pusher import Pusher
from sluice.relay.state import DelayLane, Lane, OwnedPartition, RelayReport

log = logging.getLogger("sluice.relay")
SWEEP_PAGE: Final = 100  # records of a lane the sweep looks at per maintenance, from its start
SLOW_SWEEP: Final = 60  # a waiting lane is swept every 60th maintenance (5 min at maintenance_s 5)
STOP_WAIT_S: Final = 0.5  # how long a stopping relay waits for the lot's calls in flight


def spill(pending: Sequence[tuple[int, DecodedJob]], raw: Collection[int], above: int) -> int:
    """How many of a held queue's newest buffered records to park: those beyond ``above``, as far
    back as their raw records were kept (the parked ones must all be newer than the kept ones)."""
    n = 0
    for i in range(len(pending) - 1, above - 1, -1):
        if pending[i][0] not in raw:
            break
        n += 1
    return n


def drained(page_len: int, limit: int, parked_since: bool, waiting: int) -> bool:
    """Whether a lane goes back to direct pushing after a read: it came back short, and nothing
    was parked (or is waiting to be) since, so no parked record is left for a new one to overtake."""
    return page_len < limit and not parked_since and waiting == 0


def next_cut(out: Sequence[int], cut: Collection[int], most: int, cut_to: int) -> tuple[int, int]:
    """A lane's next park call, as the slice (start, stop) of ``out`` (the offsets of its records
    not parked yet, in order): the first run of them in no call yet (``cut``), at most ``most`` long
    ((0, 0): none). No two calls' offset ranges may overlap: the lot reads a lane by each segment's
    last offset, and could return a record of one segment after higher offsets of another
    (``ParkingLot.page``). So a run stops at a record cut into another call, and a run below
    ``cut_to`` (the highest offset cut so far: records a spill put ahead of the lane's) never reaches
    past it, where calls may have been written since and left ``out``."""
    start = next((i for i, offset in enumerate(out) if offset not in cut), len(out))
    stop = start
    while (stop < len(out) and stop - start < most and out[stop] not in cut
           and (out[start] > cut_to or out[stop] < cut_to)):
        stop += 1
    return (start, stop) if stop > start else (0, 0)


def read_room(buffered: int, partition_pending: int, config: RelayConfig) -> int:
    """How many parked records of a queue to read back into a partition's buffer now: up to the
    few a held queue keeps (``park_above``), and never so many that the partition's buffer nears the
    point where its fetching pauses (half ``max_pending``, where it resumes): records read back
    must not hold up the other queues either."""
    return max(0, min(config.park_above - buffered, config.max_pending // 2 - partition_pending))


def ahead_of(rest: Sequence[ParkedRecord], bound: int | None) -> list[ParkedRecord]:
    """What a read fetched beyond its room that the next reads may take without the lot: the lot's
    whole range then, so only below ``bound``, the read bound it was made under. Above it a park
    still in flight (or a record Kafka has yet to give again) may land between what it fetched."""
    return list(rest) if bound is None else list(takewhile(lambda r: r.offset < bound, rest))


def parked_record(record: SourceRecord, job: DecodedJob) -> ParkedRecord:
    return ParkedRecord(record.partition, record.offset, record.key, record.value or b"", job.job_id,
                        job.enqueued_at_ms, job.run_at_ms)


class Parking:
    """The relay's side of the parking lot: spill, park, read back, sweep."""

    def __init__(self, lot: ParkingLot, config: RelayConfig, ownership: Ownership, intake: Intake,
                 store: JobStore, pusher: Pusher, *, report: RelayReport, events: EventBus,
                 now_ms: Callable[[], int]) -> None:
        self.lot, self.config, self.ownership, self.intake, self.store = lot, config, ownership, intake, store
        self.report, self.events, self.now_ms = report, events, now_ms
        self.calls = LotCalls(config.park_threads)  # parks and reads, off the step
        self.delays = DelayLanes(lot, config, ownership, intake, store, pusher, report=report, events=events,
                                 now_ms=now_ms, calls=self.calls,
                                 parked_record=parked_record)
        self._sweeper: ThreadPoolExecutor | None = None
        self._sweeps = 0
        self._sweeping: Future[list[tuple[int, str, int]]] | None = None
        # per lane (partition, queue, delay): job ids the sweep found done with, in a segment kept
        # for the rest of its records (only the sweeper thread touches it)
        self._final: dict[tuple[int, str, bool], set[str]] = {}

    def prepare(self) -> None:
        """Load the lanes of partitions just taken, before any of their records is taken: one read
        of the partition's markers. A partition whose markers cannot be read is given back (taken
        again later from its committed offset): without them a new record could overtake a parked one.
        The source's read position then is kept too (``OwnedPartition.read_bound``). Not yet off the
        step (docs/relay.md, "Left to do"): the partition's records would have to wait for it."""
        position = getattr(self.intake.source, "position", None)
        for owned in list(self.ownership.owned.values()):
            if owned.lanes_loaded:
                continue
            try:
                queues = self.lot.marked(owned.number)
                owned.start = None if position is None else position(owned.number)
            except SluiceError as exc:
                self.events.emit(ev.ParkingFailed(queue="", partition=owned.number, error=ev.error_text(exc)))
                self.ownership.give_back([owned.number])
                self.ownership.assign()
                self.ownership.look_again()
                continue
            owned.lanes = {queue: Lane(marked=True) for queue in queues if not queue.startswith(DELAY_MARKER)}
            owned.delays = {queue[len(DELAY_MARKER):]: DelayLane(marked=True)
                            for queue in queues if queue.startswith(DELAY_MARKER)}
            owned.lanes_loaded = True

    def turn(self, held: set[str], blocked: Callable[[str], bool]) -> None:
        """After a push round, before the commit: park the held queues' overflow and what waits to
        be parked, read back the lanes whose queues can take records, keep raw records for the held.
        The lot's calls go to threads (``LotCalls``): a turn waits for none of them, and each lane has
        at most one in flight, whose outcome a later turn applies (or this one, if it is done)."""
        owned_by, calls = self.ownership.owned, self.calls
        calls.collect()
        everyone = list(owned_by.values())
        for owned in everyone:
            self._spill(owned, held, blocked)
        for owned in everyone:
            for queue, lane in owned.lanes.items():
                self._park(owned, queue, lane)
        self.delays.park(everyone)
        calls.collect()
        for owned in everyone:
            partition_bound = owned.read_bound()  # now, not when the page comes: see ``_read``
            for queue, lane in owned.lanes.items():
                if not lane.parking or queue in held or blocked(queue):
                    continue
                if not self._read_back(owned, queue, lane, partition_bound):
                    break  # lost: its new owner reads the lane
        calls.collect()
        # the delay lanes (horizon 0 too: a lane parked under a larger one still comes back), of the
        # partitions still owned (a refusal may give one back)
        self.delays.push_back([o for o in everyone if owned_by.get(o.number) is o], held, blocked)
        for owned in everyone:
            self._drop_raw(owned)

    def _read_back(self, owned: OwnedPartition, queue: str, lane: Lane, partition_bound: int | None) -> bool:
        """The lane's next read back: from what the last read fetched ahead (``Lane.ahead``), at once,
        or from the lot, on a thread. False: the partition was lost meanwhile.

        A read goes beside the lane's park in flight (its own key): a queue that receives records at
        every poll always has some waiting for their park, and a lane read only between parks was
        never read while its queue was busy (a chaos run pushed nothing for 400 s)."""
        key = ("read", owned.number, queue)
        if self.calls.busy(key):
            return True
        read = self._next_read(owned, queue, lane, partition_bound)
        if read is None:
            return self.ownership.owned.get(owned.number) is owned
        after, room, bound = read
        if lane.ahead and lane.ahead[0].offset <= after:  # in Redis already (push.lua's mark passed them)
            lane.ahead = [r for r in lane.ahead if r.offset > after]
        if lane.ahead:
            self._read(owned, queue, lane, room, bound, lane.ahead, ahead=True)
            return self.ownership.owned.get(owned.number) is owned
        self.calls.submit(key, partial(self.lot.page, queue, owned.number, after, room, whole=True),
                          partial(self._read, owned, queue, lane, room, bound))
        return True

    def _next_read(self, owned: OwnedPartition, queue: str, lane: Lane,
                   bound: int | None) -> tuple[int, int, int | None] | None:
        """The lane's next read back, as (after, room, bound), or None if there is none to make now.

        From push.lua's recorded offset: a new owner reads a lane from its start, and the records
        there Redis holds already (pushed, not yet final, so not yet swept) would each be read,
        seal-checked and dropped again, page by page, at every takeover. The page stops below the
        first record still waiting for its park: ``read_to`` must never pass a record parked later
        (the lane is read after ``read_to``, so it would never come back)."""
        room = read_room(len(owned.pending.get(queue, ())), owned.pending_count, self.config)
        if room <= 0:
            return None
        mark = self.intake.relayed_mark(owned, queue)
        if mark is None:
            return None  # lost (``relayed_mark`` gave it back)
        after = max(lane.read_to, mark)
        if lane.out:
            first_out = lane.out[0][0].offset
            if first_out <= after + 1:
                return None  # nothing to read below it until it is parked
            bound = first_out if bound is None else min(bound, first_out)
        return after, room, bound

    def _spill(self, owned: OwnedPartition, held: set[str], blocked: Callable[[str], bool]) -> None:
        """Park a held queue's newest records beyond ``park_above`` (a rate or a cap: a short hold
        keeps a few ready), or all of them while it is blocked (a pause, a watermark, the dead
        cap: a long hold, whose records would hold the commit point back the while)."""
        for queue in held:
            q = owned.pending.get(queue)
            if not q:
                continue
            lane = owned.lanes.get(queue)
            if lane is not None and lane.parking and lane.back_from is not None:
                continue  # its buffer holds records read back: the rest is parked already
            if lane is not None and (lane.flying or self.calls.busy(("read", owned.number, queue))):
                continue  # a park or read in flight: decided again once it is applied
            above = 0 if blocked(queue) else self.config.park_above
            if len(q) <= above:
                continue
            raw = owned.raw.get(queue, {})
            n = spill(q, raw, above)
            if not n:
                continue
            moved = [q.pop() for _ in range(n)]
            moved.reverse()
            if lane is None:
                lane = owned.lanes[queue] = Lane()
            elif not lane.parking:  # parking again: what is buffered now was never parked
                lane.back_from = None
                lane.ahead = []
            lane.parking = True
            lane.out[:0] = [(raw.pop(offset), job) for offset, job in moved]  # still counted as pending

    def _park(self, owned: OwnedPartition, queue: str, lane: Lane) -> None:
        """Send the lane's park calls: those whose write failed, again as they were cut, then new ones
        cut from what waits in ``out``; up to ``park_calls`` in flight, and up to ``parking_max``
        records in flight in the partition (``parking_count``). A call's records leave the partition's
        ``pending_count`` while it flies, so its fetching goes on: with one call at a time, a held
        queue's flood waiting for it filled the buffer, the fetching paused, and every other queue's
        records waited behind the flood in Kafka for a park round trip after another."""
        if not lane.out:
            return
        most = self.config.parking_max
        for first in sorted(lane.calls):  # failed: the oldest first
            if len(lane.flying) >= self.config.park_calls:
                return
            records = lane.calls[first]
            if first in lane.flying or (owned.parking_count and owned.parking_count + len(records) > most):
                continue
            self._send(owned, queue, lane, records)
        while len(lane.flying) < self.config.park_calls and owned.parking_count < most:
            size = min(self.config.park_call_max, most - owned.parking_count)
            start, stop = next_cut([r.offset for r, _ in lane.out], self._cut(lane), size, lane.cut_to)
            if start == stop:
                return
            records = [parked_record(r, job) for r, job in lane.out[start:stop]]
            lane.calls[records[0].offset] = records
            lane.cut_to = max(lane.cut_to, records[-1].offset)
            self._send(owned, queue, lane, records)

    @staticmethod
    def _cut(lane: Lane) -> set[int]:
        return {r.offset for records in lane.calls.values() for r in records}

    def _send(self, owned: OwnedPartition, queue: str, lane: Lane, records: list[ParkedRecord]) -> None:
        first = records[0].offset
        lane.flying.add(first)
        owned.pending_count -= len(records)
        owned.parking_count += len(records)
        # the marker goes with every call until one has written it: an earlier one may fail
        self.calls.submit(("lane", owned.number, queue, first),
                          partial(self.lot.park, queue, owned.number, records, mark=not lane.marked),
                          partial(self._parked, owned, queue, lane, records))

    def _parked(self, owned: OwnedPartition, queue: str, lane: Lane, records: list[ParkedRecord],
                outcome: object) -> None:
        if self.ownership.owned.get(owned.number) is not owned:
            return  # given back meanwhile: not committed past, so its new owner takes them from Kafka
        lane.flying.discard(records[0].offset)
        owned.parking_count -= len(records)
        if isinstance(outcome, SluiceError):  # buffered and counted again, uncommitted: sent at the next turn
            owned.pending_count += len(records)
            self.events.emit(ev.ParkingFailed(queue=queue, partition=owned.number,
                                              error=ev.error_text(outcome)))
            return
        del lane.calls[records[0].offset]
        if lane.ahead and records[0].offset <= lane.ahead[-1].offset:
            lane.ahead = []  # no longer the lot's whole range (never expected: reads stop below ``out``)
        # calls finish in any order: ``out`` keeps the records not durable yet, in order, so its head
        # is still the partition's commit point and the bound of the lane's reads
        done = {r.offset for r in records}
        lane.out[:] = [item for item in lane.out if item[0].offset not in done]
        self.intake.hooks.on_parked(owned.number, [r.offset for r in records])
        lane.parked_since_read = lane.marked = True
        lane.parks += 1
        self.report.parked += len(records)
        self.events.emit(ev.Parked(queue=queue, partition=owned.number, n=len(records)))

    def _read(self, owned: OwnedPartition, queue: str, lane: Lane, limit: int, bound: int | None,
              page: list[ParkedRecord] | SluiceError, *, ahead: bool = False) -> None:
        """Apply a page read back: its first ``limit`` records, those below ``bound`` (the partition's
        read bound when the read was sent: records taken from the source since are newer, and wait
        in ``lane.out`` to be parked; a parked record of the page at or above it, a replay's, must not
        overtake them).

        The lot's page holds every record of the items it read (``whole``): the rest, below
        ``bound`` (``ahead_of``), is kept in ``lane.ahead`` and taken by the next reads with no lot
        call (a segment of 500 records was read again for each room's worth of them, and all of it
        billed each time). It is the lot's whole range then, above ``read_to``: nothing below
        ``out``'s head is parked later (a park that lands below its end drops it: ``_parked``), and
        the records the sweep deletes meanwhile are final, which the push drops. ``ahead``: ``page``
        is ``lane.ahead`` itself; it never says the lane has drained (the lot may hold more beyond
        it), nor resets ``parked_since_read``."""
        if self.ownership.owned.get(owned.number) is not owned:
            return  # given back meanwhile: its new owner reads the lane from its start
        if isinstance(page, SluiceError):
            self.events.emit(ev.ParkingFailed(queue=queue, partition=owned.number, error=ev.error_text(page)))
            return
        parked_since = lane.parked_since_read
        if not ahead:
            lane.parked_since_read = False
        taken = self._take(owned, queue, lane, page, limit, bound)
        if taken is None:
            return  # given back: its new owner reads the lane from its start
        n, used, short = taken
        lane.ahead = [] if short else ahead_of(page[used:], bound)
        owned.pending_count += n
        self.report.unparked += n
        done = not (ahead or short) and drained(len(page), limit, parked_since, len(lane.out))
        if done:
            lane.parking = False
        if n or done:
            self.events.emit(ev.Unparked(queue=queue, partition=owned.number, n=n, drained=done))

    def _take(self, owned: OwnedPartition, queue: str, lane: Lane, page: list[ParkedRecord], limit: int,
              bound: int | None) -> tuple[int, int, bool] | None:
        """Buffer the first ``limit`` records of ``page`` below ``bound``, checked again as when Kafka
        gave them: (buffered, used, whether ``bound`` stopped it), or None if the partition was lost."""
        mark = owned.relayed.get(queue, -1)
        q = owned.pending.get(queue)
        if q is None:
            q = owned.pending[queue] = deque()
        n = used = 0
        for parked in page[:limit]:
            if bound is not None and parked.offset >= bound:
                return n, used, True  # not taken from the source again yet: read back once it is
            used += 1
            if lane.back_from is None:
                lane.back_from = parked.offset
            lane.read_to = parked.offset
            if parked.offset <= mark:
                continue  # in Redis already (read back once before, by this owner or another)
            job = self.intake.readmit(owned, parked.record())
            if self.ownership.owned.get(owned.number) is not owned:
                return None
            if job is not None:  # else refused or dead-lettered: the sweep releases it
                q.append((parked.offset, job))
                n += 1
        return n, used, False

    @staticmethod
    def _drop_raw(owned: OwnedPartition) -> None:
        """Forget the raw records of those pushed since (the oldest of their queue: raw records are
        kept in offset order, and a queue's buffer is pushed from its head)."""
        for queue in list(owned.raw):
            raw, q = owned.raw[queue], owned.pending.get(queue)
            if not q:
                del owned.raw[queue]
                continue
            gone = list(takewhile(q[0][0].__gt__, raw))
            for offset in gone:
                del raw[offset]

    # -- the sweep (every maintenance, on its own thread) -------------------------------------------

    def sweep(self, *, wait: bool = False) -> None:
        """Release the parked records whose jobs are final; end ``dead`` those past their life;
        forget a lane (and its marker) that is direct again and empty in the lot.

        The reads and deletes run on a thread of their own (a sweep of many lanes is many round
        trips, which must not stall the relay's steps); what it found empty is forgotten here, on
        the main thread, at the next call, unless the lane parked again meanwhile. ``wait``: sweep
        now, on this thread (tests, ``stop``)."""
        if self._sweeping is not None:
            if not (wait or self._sweeping.done()):
                return
            self._forget(self._sweeping.result())
            self._sweeping = None
        self._sweeps += 1
        # A lane nothing was read back from yet holds only waiting records: its sweep looks for
        # cancelled and expired ones alone, so it comes round every SLOW_SWEEP maintenances.
        slow = wait or self._sweeps % SLOW_SWEEP == 1
        lanes = [(owned.number, queue, lane.parks) for owned in self.ownership.owned.values()
                 for queue, lane in owned.lanes.items()
                 if slow or not lane.parking or lane.back_from is not None]
        # a delay lane: -1 (never forgotten: its records come due over days); swept from its start,
        # where its records pushed back (or cancelled) are, every maintenance once any was pushed back
        lanes += [(owned.number, queue, -1) for owned in self.ownership.owned.values()
                  for queue, lane in owned.delays.items() if slow or lane.after is not None]
        if not lanes:
            return
        if wait:
            self._forget(self._sweep_all(lanes))
            return
        if self._sweeper is None:
            self._sweeper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sluice-relay-sweep")
        self._sweeping = self._sweeper.submit(self._sweep_all, lanes)

    def close(self, left_s: float | None = None) -> None:
        """``Relay.stop``: apply the lot calls that finish within ``STOP_WAIT_S`` (and ``left_s``, the
        time the invocation has left) and abandon the rest
        (``LotCalls.settle``), and leave a sweep in flight to finish on its own (it only deletes
        records of final jobs): a stop that waited for them could outlast the invocation's timeout,
        and a relay killed there commits nothing at all."""
        if self._sweeper is not None:
            self._sweeper.shutdown(wait=False)
            self._sweeper, self._sweeping = None, None
        self.calls.close(STOP_WAIT_S if left_s is None else min(STOP_WAIT_S, left_s))

    def _forget(self, empty: list[tuple[int, str, int]]) -> None:
        for partition, queue, parks in empty:
            owned = self.ownership.owned.get(partition)
            lane = owned.lanes.get(queue) if owned is not None else None
            if owned is None or lane is None or lane.parking or lane.out or lane.parks != parks:
                continue  # parking again since the sweep looked: its records are in the lot
            try:
                self.lot.unmark(queue, partition)
            except SluiceError as exc:  # the next sweep finds it empty again
                self.events.emit(ev.ParkingFailed(queue=queue, partition=partition, error=ev.error_text(exc)))
                continue
            del owned.lanes[queue]  # a later spill makes a new lane, which writes its marker again

    def _sweep_all(self, lanes: list[tuple[int, str, int]]) -> list[tuple[int, str, int]]:
        """On the sweeper thread: the lot and the store only, no relay state. Returns the lanes
        found empty."""
        empty = []
        for partition, queue, parks in lanes:
            try:
                if not self._sweep(partition, queue, delay=parks < 0) and parks >= 0:
                    empty.append((partition, queue, parks))
            except SluiceError as exc:  # only late: the next maintenance tries again
                self.events.emit(ev.ParkingFailed(queue=queue, partition=partition, error=ev.error_text(exc)))
        return empty

    def _sweep(self, partition: int, queue: str, *, delay: bool = False) -> bool:
        """One page of a lane (``delay``: a delay lane) from its start; False if the lane is empty.
        An ordered lane's page is whole: a segment's records are deleted together, once all are done
        with, so its records found final are remembered (``_final``) and not asked about again while
        the rest of it waits."""
        page = (self.lot.due(queue, partition, None, SWEEP_PAGE) if delay
                else self.lot.page(queue, partition, -1, SWEEP_PAGE, whole=True))
        lane = (partition, queue, delay)
        if not page:
            self._final.pop(lane, None)
            return False
        known = self._final.get(lane, set())
        asked = [r.job_id for r in page if r.job_id not in known]
        final, _ = self.store.relay_view(asked) if asked else (set(), {})
        final |= known & {r.job_id for r in page}
        gone = [r for r in page if r.job_id in final]
        now, refused = self.now_ms(), 0
        ages = self.intake.job_ids is not None  # as the intake: a relay that checks no record, no age
        for r in page:
            why = None if r.job_id in final or not ages else seal.life_refusal(r.enqueued_at_ms, r.run_at_ms,
                                                                                 now)
            if why is None:
                continue
            # Checked when it was taken from Kafka (only the relay writes the lot): genuine.
            self.store.refuse_record(r.job_id, queue, f"refused by the relay: {why}", r.enqueued_at_ms,
                                     queued=True)
            log.warning("parked job %s refused: %s", r.job_id, why)
            gone.append(r)
            refused += 1
        self._final[lane] = {r.job_id for r in gone}  # those still stored, with a segment not done
        if gone:
            released = self.lot.release(queue, gone, delay=delay)
            self.report.parked_released += released
            if released or refused:
                self.events.emit(ev.Unparked(queue=queue, partition=partition, released=released,
                                             refused=refused))
        return True
