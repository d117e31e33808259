"""Issue 28, item 1: a held queue's records are parked outside the shared partitions (relay/parking.py).

Pure decisions first (``spill``, ``drained``, the commit point), then the relay on the fakes: a
paused or rate-limited queue no longer stalls the queues sharing its partitions, its records come
back in order when it resumes, a new owner never pushes a new record ahead of parked ones, a failed
park write keeps the record (and the commit point), and the sweep releases or ends parked records.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest

from sluice.core import bus as ev
from sluice.core.bus import EventBus
from sluice.core.limits import JOB_LIFE_MS
from sluice.core.models import DecodedJob, JobSpec, JobState
from sluice.relay import Relay, RelayConfig, SourceRecord
from sluice.relay.lot_calls import LotCalls
from sluice.relay.parking import SWEEP_PAGE, drained, read_room, spill
from sluice.relay.state import Lane, OwnedPartition
from sluice_dev.fakes import FakeParkingLot
from tests.unit.test_relay import World, run_steps


def job(n: int, queue: str = "a") -> DecodedJob:
    return DecodedJob(f"job-{n}", queue, "{}", 0, 3, 30_000, 0, 0)


def parked_world(partitions: int = 1) -> tuple[World, FakeParkingLot]:
    return World(partitions=partitions), FakeParkingLot()


def relay_with(w: World, lot: FakeParkingLot, relay_id: str = "r1", events: Any = None, job_ids: Any = None,
               **knobs: Any) -> Relay:
    config = RelayConfig(**{"poll_ms": 10, "commit_s": 0, "batch": 10, "max_pending": 50, "park_threads": 0,
                            **knobs})
    return Relay(w.engine, w.store, w.source, w.dispatcher, relay_id=relay_id,  # type: ignore[arg-type]
                 clock=w.clock, events=events or EventBus(), config=config, parking=lot, job_ids=job_ids)


def offsets_in_redis(w: World, queue: str, ids: list[str]) -> list[int]:
    order = {job_id: i for i, job_id in enumerate(ids)}
    return [order[j] for j in w.in_redis(queue)]


# -- pure decisions ---------------------------------------------------------------------------------


def test_spill_parks_the_newest_beyond_the_threshold_as_far_as_raw_records_were_kept() -> None:
    pending = [(o, job(o)) for o in range(10)]
    assert spill(pending, set(range(10)), 4) == 6
    assert spill(pending, set(range(10)), 10) == 0
    assert spill(pending, {7, 8, 9}, 4) == 3  # offset 6 has no raw record: the kept ones stay older
    assert spill(pending, {5, 6, 7, 8}, 4) == 0  # the newest has none: nothing can be parked behind it


def test_a_lane_goes_direct_only_after_a_short_read_with_nothing_parked_since() -> None:
    assert drained(3, 10, parked_since=False, waiting=0)
    assert not drained(10, 10, parked_since=False, waiting=0)  # a full page: more may follow
    assert not drained(3, 10, parked_since=True, waiting=0)
    assert not drained(0, 10, parked_since=False, waiting=2)


def test_a_page_read_back_keeps_the_queue_to_its_few_and_the_partition_fetching() -> None:
    config = RelayConfig(batch=25, park_threshold=10, max_pending=50)
    assert read_room(0, 0, config) == 10  # a held queue keeps a few buffered, no more
    assert read_room(4, 4, config) == 6
    assert read_room(0, 20, config) == 5  # the partition's fetching resumes below 25
    assert read_room(0, 30, config) == 0 and read_room(12, 12, config) == 0


def test_records_read_back_do_not_pull_the_commit_point_back() -> None:
    owned = OwnedPartition(number=0, job_id="p0", token=1, leased_at=0.0, next_offset=500)
    owned.pending["b"] = deque([(450, job(450, "b"))])
    lane = owned.lanes["a"] = Lane(parking=True, read_to=120, back_from=100)
    owned.pending["a"] = deque([(100, job(100)), (120, job(120))])
    assert owned.commit_point() == 450  # a's buffered records are durable in the lot
    owned.pending["a"].appendleft((40, job(40)))  # one kept in memory before the spill: it counts
    assert owned.commit_point() == 40
    owned.pending["a"].popleft()
    lane.out.append((SourceRecord(0, 300, None, b"{}"), job(300)))  # taken, not parked yet: it counts
    assert owned.commit_point() == 300
    lane.out.clear()
    owned.pending["b"].clear()
    assert owned.commit_point() == 500


# -- the relay on the fakes -------------------------------------------------------------------------


def test_a_paused_queue_far_beyond_max_pending_never_stalls_another_and_comes_back_in_order() -> None:
    w, lot = parked_world()
    w.engine.set_config("a", paused=True)
    seen: list[ev.Event] = []
    bus = EventBus()
    bus.subscribe(seen.append, ev.Incident)
    relay = relay_with(w, lot, events=bus, refresh_s=0.0)
    a_ids: list[str] = []
    b_ids: list[str] = []
    for _ in range(20):  # 400 of A against max_pending 50, B's jobs among them
        a_ids += w.add(20, queue="a", partition=0)
        b_ids += w.add(1, queue="b", partition=0)
        run_steps(relay, 3)
        assert sorted(w.in_redis("b")) == sorted(b_ids)  # B flows throughout
    assert w.in_redis("a") == [] and w.source.paused == set()
    owned = relay.ownership.owned[0]
    assert not owned.pending["a"]  # paused: a long hold parks it all
    assert lot.count("a") == 400 and lot.marked(0) == ["a"]
    assert w.source.committed_offsets[0] > 400  # committed past what was parked
    assert any(isinstance(e, ev.Parked) for e in seen)
    w.engine.set_config("a", paused=False)
    w.add(5, queue="a", partition=0)  # arrives while the lane drains: behind the parked ones
    a_ids = [i for i in a_ids] + [f"job-{w.seq - k}" for k in range(4, -1, -1)]
    run_steps(relay, 80)
    assert offsets_in_redis(w, "a", a_ids) == list(range(len(a_ids)))  # all, once, in order
    assert not relay.ownership.owned[0].lanes["a"].parking
    assert any(isinstance(e, ev.Unparked) and e.drained for e in seen)
    w.add(3, queue="a", partition=0)  # direct again
    run_steps(relay, 3)
    assert len(w.in_redis("a")) == len(a_ids) + 3
    # The sweep releases parked records only once their jobs are final, then forgets the lane.
    relay.parking.sweep(wait=True)  # type: ignore[union-attr]
    assert lot.count("a") > 0
    w.store.final.update(a_ids)
    for _ in range(6):  # a page of 100 a sweep, then the empty lane's marker
        relay.parking.sweep(wait=True)  # type: ignore[union-attr]
    assert lot.count("a") == 0 and lot.marked(0) == [] and "a" not in relay.ownership.owned[0].lanes


def test_without_a_lot_a_paused_queue_still_fills_the_buffer_as_before() -> None:
    w = World(partitions=1)
    w.engine.set_config("a", paused=True)
    w.add(100, queue="a", partition=0)
    relay = w.relay(max_pending=50, batch=10)
    run_steps(relay, 10)
    assert w.source.paused == {0}


def b_flows_beside_a_rate_limited_a(w: World, lot: FakeParkingLot, relay: Relay, rounds: int) -> None:
    """B's records, one a round behind A's backlog in the same partition, all reach Redis, and the
    partition never stops fetching for A."""
    b_ids: list[str] = []
    for _ in range(rounds):
        b_ids += w.add(1, queue="b", partition=0)
        run_steps(relay, 2)
        w.clock.t += 0.05
        assert w.source.paused == set()  # never stops fetching for A
    run_steps(relay, 2)
    assert sorted(w.in_redis("b")) == sorted(b_ids) and lot.writes > 0


def test_a_rate_limited_queue_parks_its_overflow_and_keeps_its_rate() -> None:
    w, lot = parked_world()
    w.engine.set_config("a", rate_per_s=20.0, burst=1)
    a_ids = w.add(300, queue="a", partition=0)
    relay = relay_with(w, lot)
    b_flows_beside_a_rate_limited_a(w, lot, relay, 30)  # polls of 20 records: B's after A's 300
    start_t, start_n = w.clock.t, len(w.in_redis("a"))
    while len(w.in_redis("a")) < 300 and w.clock.t - start_t < 30:
        relay.step()
        w.clock.t += 0.01
    rate = (len(w.in_redis("a")) - start_n) / (w.clock.t - start_t)
    assert offsets_in_redis(w, "a", a_ids) == list(range(300)) and rate <= 22


def test_a_rate_limited_queue_parks_its_overflow_when_the_buffer_is_smaller_than_twice_a_batch() -> None:
    """``max_pending`` below the default ``park_above`` (twice ``batch``): A's records kept buffered
    would fill the partition's buffer, whose fetching would pause for B too (the tenant nemesis's
    scaled case: a buffer of 500 against twice 500)."""
    w, lot = parked_world()
    w.engine.set_config("a", rate_per_s=20.0, burst=1)
    w.add(300, queue="a", partition=0)
    relay = relay_with(w, lot, max_pending=16)
    assert relay.config.park_above == 4
    b_flows_beside_a_rate_limited_a(w, lot, relay, 40)


def paused_and_parked(n: int) -> tuple[World, FakeParkingLot, Relay, list[str]]:
    """Queue a paused, ``n`` of its records taken and parked by a relay."""
    w, lot = parked_world()
    w.engine.set_config("a", paused=True)
    relay = relay_with(w, lot, refresh_s=0.0)
    ids = w.add(n, queue="a", partition=0)
    run_steps(relay, 6)
    assert lot.count("a") == n
    return w, lot, relay, ids


def test_a_new_owner_never_pushes_a_new_record_ahead_of_parked_ones() -> None:
    w, lot, first, a_ids = paused_and_parked(100)
    first.stop()
    w.engine.set_config("a", paused=False)
    a_ids += w.add(10, queue="a", partition=0)  # new records the next owner reads from Kafka
    second = relay_with(w, lot, relay_id="r2", refresh_s=0.0)
    run_steps(second, 60)
    assert offsets_in_redis(w, "a", a_ids) == list(range(110))


def test_a_new_owner_reads_a_lane_back_from_what_redis_holds_not_from_its_start() -> None:
    """Pushed records stay in the lot until their jobs are final. A new owner read them all back
    from the lane's start, seal-checked and dropped each one again as in Redis already, a page at a
    time: in a 10,000-job operator chaos run the relay read back ~7 records for each it pushed after
    a pause and resume, and drained at a third of the offered rate."""
    w, lot, first, a_ids = paused_and_parked(100)
    w.engine.set_config("a", paused=False)
    run_steps(first, 60)
    assert w.in_redis("a") == a_ids and lot.count("a") == 100  # pushed, not final: kept
    first.stop()
    a_ids += w.add(10, queue="a", partition=0)
    second = relay_with(w, lot, relay_id="r2", refresh_s=0.0)
    run_steps(second, 20)
    assert offsets_in_redis(w, "a", a_ids) == list(range(110))
    # only the 10 new ones, parked behind the lane's records and read back: none of the 100 again
    assert second.report.unparked == 10 and second.report.reread == 0
    assert not second.ownership.owned[0].lanes["a"].parking  # nothing above the mark: direct again


def test_a_failed_park_keeps_the_records_and_the_commit_point() -> None:
    w, lot = parked_world()
    w.engine.set_config("a", paused=True)
    relay = relay_with(w, lot, refresh_s=0.0)
    run_steps(relay, 1)
    w.add(60, queue="a", partition=0)
    lot.fail = 10**6
    run_steps(relay, 5)
    assert lot.count("a") == 0
    assert w.source.committed_offsets.get(0, 0) == 0  # nothing past an unparked record
    lot.fail = 0
    run_steps(relay, 3)
    assert lot.count("a") > 0 and w.source.committed_offsets[0] > 0


KEY = b"this-deployment-key-0123456789"


def sealed_world(n: int) -> tuple[World, FakeParkingLot, list[str]]:
    """A world on a wall clock, with ``n`` minted and sealed records of the paused queue a."""
    from sluice.core import ids, seal

    w, lot = parked_world()
    w.clock.t = 1_700_000_000.0
    w.engine.set_config("a", paused=True)
    specs = [seal.seal_spec(JobSpec(job_id=ids.mint(w.clock.now_ms(), "a", KEY), queue="a", payload={"n": i},
                                    enqueued_at_ms=w.clock.now_ms()), KEY) for i in range(n)]
    for spec in specs:
        w.source.append_spec(0, spec)
    return w, lot, [spec.job_id for spec in specs]


def test_the_sweep_ends_a_parked_record_past_its_life_dead_with_the_reason() -> None:
    from sluice.core import ids

    w, lot, job_ids = sealed_world(60)
    relay = relay_with(w, lot, refresh_s=0.0, job_ids=ids.Verifier(KEY, []))
    run_steps(relay, 5)
    assert lot.count("a") == 60
    relay.parking.sweep(wait=True)  # type: ignore[union-attr]
    assert lot.count("a") == 60  # alive and not final: kept
    w.clock.t += JOB_LIFE_MS / 1000 + 1
    for _ in range(3):
        relay.parking.sweep(wait=True)  # type: ignore[union-attr]
    item = w.store.items[job_ids[0]]
    assert item["status"] == JobState.DEAD and "expired" in item["last_error"]
    assert lot.count("a") == 0 and w.in_redis("a") == []


def test_a_record_altered_in_the_lot_fails_its_seal_when_it_comes_back() -> None:
    from sluice.core import ids

    w, lot, job_ids = sealed_world(30)
    relay = relay_with(w, lot, refresh_s=0.0, job_ids=ids.Verifier(KEY, []))
    run_steps(relay, 5)
    lane = lot.lanes["a", 0]
    first = lane[min(lane)]
    lane[first.offset] = first._replace(value=first.value.replace(b'"n":0', b'"n":9'))
    w.engine.set_config("a", paused=False)
    run_steps(relay, 20)
    assert w.in_redis("a") == job_ids[1:]
    item = w.store.items[job_ids[0]]
    assert item["status"] == JobState.DEAD and "seal" in item["last_error"]


def test_a_queue_that_flows_again_still_parks_its_new_records_behind_the_parked_ones() -> None:
    w, _lot, relay, ids = paused_and_parked(100)
    w.engine.set_config("a", paused=False)
    for _ in range(12):  # a page read back at a time, each granted in full (flowing), new ones arriving
        ids += w.add(3, queue="a", partition=0)
        run_steps(relay, 1)
    run_steps(relay, 40)
    assert offsets_in_redis(w, "a", ids) == list(range(len(ids)))


def test_a_lane_that_parks_again_counts_its_kept_records_in_the_commit_point() -> None:
    owned = OwnedPartition(number=0, job_id="p0", token=1, leased_at=0.0, next_offset=900)
    owned.lanes["a"] = Lane(parking=False, read_to=120, back_from=100)
    owned.pending["a"] = deque([(700, job(700)), (800, job(800))])
    owned.raw["a"] = {700: SourceRecord(0, 700, None, b"{}"), 800: SourceRecord(0, 800, None, b"{}")}
    from sluice.relay.parking import Parking

    parking = Parking.__new__(Parking)
    parking.config = RelayConfig(park_threshold=1)
    parking.calls = LotCalls(0)
    parking._spill(owned, {"a"}, lambda _q: False)
    assert [r.offset for r, _ in owned.lanes["a"].out] == [800]
    owned.lanes["a"].out.clear()
    owned.lanes["a"].read_to = 900  # a later read back: 700, kept in memory, is not durable
    assert owned.commit_point() == 700


def test_after_a_redis_loss_the_replay_reads_each_parked_lane_from_its_start() -> None:
    """Parked records are deleted only once final: a replay after a Redis loss (its checkpoint
    may be past their offsets) gets them back from the lot, once each and in order."""
    from sluice.relay.recovery import Recovery
    from sluice_dev.fakes import FakeCheckpoints, FakeEpochs
    from tests.unit.test_relay_reread import Offsets

    w, lot = parked_world()
    epochs, ckpts = FakeEpochs(), FakeCheckpoints()

    def recovering(relay_id: str) -> Relay:
        recovery = Recovery(w.source.topic, epochs, ckpts, Offsets(w), w.store, interval_s=1.0,
                            clock=w.clock.monotonic, events=EventBus())
        config = RelayConfig(poll_ms=10, commit_s=0, batch=10, max_pending=50, refresh_s=0.0, park_threads=0)
        return Relay(w.engine, w.store, w.source, w.dispatcher, relay_id=relay_id, clock=w.clock,  # type: ignore[arg-type]
                     hooks=recovery, config=config, events=EventBus(), parking=lot)

    w.engine.set_config("a", paused=True)
    a_ids = w.add(60, queue="a", partition=0)
    b_ids = w.add(5, queue="b", partition=0)
    first = recovering("r1")
    for _ in range(10):
        first.step()
        w.clock.t += 0.5
    assert lot.count("a") == 60 and sorted(w.in_redis("b")) == sorted(b_ids)
    w.engine.set_config("a", paused=False)
    for _ in range(30):
        first.step()
        w.clock.t += 0.5
    assert w.in_redis("a") == a_ids
    first.stop()
    assert lot.count("a") == 60  # pushed, not final: kept
    # Redis loses everything (its epoch too): the next owner replays from the checkpoint.
    w.engine.jobs.clear()
    w.engine.relayed.clear()
    epochs.epoch = None
    second = recovering("r2")
    for _ in range(40):
        second.step()
        w.clock.t += 0.5
    assert w.in_redis("a") == a_ids and sorted(w.in_redis("b")) == sorted(b_ids)
    assert lot.count("a") == 60  # re-parked from Kafka in the replay: the same items


def test_recovery_checks_parked_jobs_finality_only_at_its_longest_back_off_and_keeps_them_tracked() -> None:
    """A flood of parked records, each checked again at 1, 2, 4 ... checkpoint intervals, made the
    checkpoint's finality reads 13 of 120 s of a loaded relay's main thread. A parked job cannot end
    before it is read back: its checks wait the longest back-off at once. It stays tracked (the low
    water stays below it: a replay rebases the relayed offset just below the low water)."""
    from sluice.relay.recovery import Recovery
    from sluice.relay.recovery.tracker import BACKOFF_EXP
    from sluice_dev.fakes import FakeCheckpoints, FakeEpochs
    from tests.unit.test_relay_reread import Offsets

    w, lot = parked_world()
    asked: list[str] = []
    view = w.store.relay_view
    w.store.relay_view = lambda ids: (asked.extend(ids), view(ids))[1]  # type: ignore[method-assign]
    ckpts = FakeCheckpoints()
    recovery = Recovery(w.source.topic, FakeEpochs(), ckpts, Offsets(w), w.store, interval_s=1.0,
                        clock=w.clock.monotonic, events=EventBus())
    config = RelayConfig(poll_ms=10, commit_s=0, batch=10, max_pending=50, refresh_s=0.0, park_threads=0)
    relay = Relay(w.engine, w.store, w.source, w.dispatcher, relay_id="r1", clock=w.clock,  # type: ignore[arg-type]
                  hooks=recovery, config=config, events=EventBus(), parking=lot)
    w.engine.set_config("a", paused=True)
    a_ids = w.add(40, queue="a", partition=0)
    b_ids = w.add(5, queue="b", partition=0)
    for _ in range(60):  # 30 s: checkpoints every second
        relay.step()
        w.clock.t += 0.5
    assert lot.count("a") == 40
    assert not set(asked) & set(a_ids)  # not one finality read of a parked job yet
    assert set(b_ids) <= set(asked)
    assert ckpts.items[0].low_water == 0  # still tracked: the replay would start at or below them
    w.clock.t += 2**BACKOFF_EXP
    recovery.checkpoint(force=True)
    assert set(a_ids) <= set(asked)  # checked again, at the longest back-off


@pytest.mark.parametrize("park_fails", [False, True])
def test_a_replay_reads_a_lane_back_only_as_far_as_kafka_has_been_read_again(park_fails: bool) -> None:
    """The chaos run that lost 2 jobs: records 0..13 of a were pushed directly, 14..33 were parked
    during a pause and pushed after it, then Redis lost its data. The replaying owner's first poll
    came back empty (Kafka's fetch after the seek to 0 was still under way), so its first turn read
    the lane (14..33) back and the lane went direct; 14..33 were pushed (push.lua's relayed offset
    33), and 0..13, taken from Kafka the step after, were then below it: skipped as "in Redis
    already", lost. A lane is read back only below the partition's read position of the session,
    and not while its park failed (``park_fails``: 0..13 would be parked below what was read back)."""
    from sluice.core.errors import BackendUnavailable
    from sluice.relay.recovery import Recovery
    from sluice_dev.fakes import FakeCheckpoints, FakeEpochs, FakeSource
    from tests.unit.test_relay import TOPIC
    from tests.unit.test_relay_reread import Offsets

    class Lagging(FakeSource):
        """Kafka's first fetches after a take-over come back empty (the fetch is under way)."""

        lag = 0

        def poll(self, timeout_ms: int, max_records: int) -> list[SourceRecord]:
            if self.lag:
                self.lag -= 1
                return []
            return super().poll(timeout_ms, max_records)

    class Failing(FakeParkingLot):
        """Its next ``fail_parks`` park writes fail (the lot's other calls go through)."""

        fail_parks = 0

        def park(self, queue: str, partition: int, records: Any, *, mark: bool = True,
                 delay: bool = False) -> None:
            if self.fail_parks and records:
                self.fail_parks -= 1
                raise BackendUnavailable("the lot refuses this park")
            super().park(queue, partition, records, mark=mark, delay=delay)

    w, lot = World(partitions=1), Failing()
    source = w.source = Lagging(topic=TOPIC, n_partitions=1, clock=w.clock)
    epochs, ckpts = FakeEpochs(), FakeCheckpoints()

    def recovering(relay_id: str) -> Relay:
        recovery = Recovery(TOPIC, epochs, ckpts, Offsets(w), w.store, interval_s=1.0,
                            clock=w.clock.monotonic, events=EventBus())
        config = RelayConfig(poll_ms=10, commit_s=0, batch=10, max_pending=50, refresh_s=0.0, park_threads=0)
        return Relay(w.engine, w.store, source, w.dispatcher, relay_id=relay_id, clock=w.clock,
                     hooks=recovery, config=config, events=EventBus(), parking=lot)

    def steps(relay: Relay, n: int) -> None:
        for _ in range(n):
            relay.step()
            w.clock.t += 0.5

    first = recovering("r1")
    a_ids = w.add(14, queue="a", partition=0)
    steps(first, 5)
    w.engine.set_config("a", paused=True)
    a_ids += w.add(20, queue="a", partition=0)
    steps(first, 6)
    assert lot.count("a") == 20  # 14..33
    w.engine.set_config("a", paused=False)
    steps(first, 20)
    a_ids += w.add(5, queue="a", partition=0)
    steps(first, 5)
    assert w.in_redis("a") == a_ids and not first.ownership.owned[0].lanes["a"].parking
    first.stop()
    w.engine.jobs.clear()  # Redis loses everything, its epoch too: the next owner replays from 0
    w.engine.relayed.clear()
    epochs.epoch = None
    source.lag = 0 if park_fails else 2
    lot.fail_parks = 1 if park_fails else 0
    second = recovering("r2")
    steps(second, 40)
    assert offsets_in_redis(w, "a", a_ids) == list(range(39))  # all, once, in order


class SegmentedLot(FakeParkingLot):
    """A lot that keeps records in fours (as the DynamoDB lot keeps a park call's records in one
    segment) and deletes a four only once all of it is released; ``asked`` records the sweep's
    questions to the store."""

    def page(self, queue: str, partition: int, after: int, limit: int, *,
             whole: bool = False) -> list[Any]:
        got = super().page(queue, partition, after, 10**9 if whole else limit)
        if whole and got:
            last = got[min(limit, len(got)) - 1].offset // 4
            got = [r for r in got if r.offset // 4 <= last]
        return [r._replace(item=(f"seg{r.offset // 4}", 4)) for r in got]

    def release(self, queue: str, records: Any, *, delay: bool = False) -> int:
        groups: dict[str, list[Any]] = {}
        for r in records:
            groups.setdefault(r.item[0], []).append(r)
        return super().release(queue, [r for g in groups.values() if len(g) == 4 for r in g])


def test_the_sweep_deletes_a_segment_once_all_its_records_are_done_and_asks_of_each_once() -> None:
    w, lot = World(partitions=1), SegmentedLot()
    w.engine.set_config("a", paused=True)
    released: list[int] = []
    bus = EventBus()
    bus.subscribe(lambda e: released.append(e.released) if isinstance(e, ev.Unparked) else None, ev.Unparked)
    relay = relay_with(w, lot, refresh_s=0.0, events=bus)
    ids = w.add(8, queue="a", partition=0)  # offsets 0..7: two fours
    run_steps(relay, 6)
    assert lot.count("a") == 8
    asked: list[str] = []
    view = w.store.relay_view
    w.store.relay_view = lambda job_ids: (asked.extend(job_ids), view(job_ids))[1]  # type: ignore[method-assign]
    w.store.final.update(ids[:6])  # the first four and half the second are done with
    relay.parking.sweep(wait=True)  # type: ignore[union-attr]
    assert lot.count("a") == 4 and released == [4]  # the half-done four stays, whole, and is not counted
    assert sorted(asked) == sorted(ids)
    asked.clear()
    relay.parking.sweep(wait=True)  # type: ignore[union-attr]
    assert sorted(asked) == sorted(ids[6:]) and released == [4]  # only the two not known done
    w.store.final.update(ids[6:])
    relay.parking.sweep(wait=True)  # type: ignore[union-attr]
    assert lot.count("a") == 0 and released == [4, 4]


def test_a_pause_the_relay_has_not_read_yet_still_keeps_new_jobs_out_of_redis() -> None:
    """The relay reads a queue's config every ``refresh_s``; push.lua refuses a paused queue's fresh
    jobs whatever the relay last read, and the relay then holds the queue as paused (its records
    parked like any paused queue's) until its next read of the config."""
    w, lot = parked_world()
    relay = relay_with(w, lot, refresh_s=3600.0)
    ids = w.add(2, queue="a", partition=0)
    run_steps(relay, 2)
    assert w.in_redis("a") == ids
    w.engine.set_config("a", paused=True)  # the relay's view: not paused, for an hour
    later = w.add(20, queue="a", partition=0)
    run_steps(relay, 6)
    assert w.in_redis("a") == ids  # none of the 20 pushed
    assert relay.report.pushed == 2 and lot.count("a") == 20  # held as paused: parked
    w.engine.set_config("a", paused=False)
    relay.queues.states["a"].refreshed_at = float("-inf")  # the next read of its config
    run_steps(relay, 40)
    assert offsets_in_redis(w, "a", ids + later) == list(range(22))


class CountedLot(FakeParkingLot):
    """Counts the relay's reads back (the sweep's, of ``SWEEP_PAGE`` from a lane's start, apart)."""

    def __init__(self) -> None:
        super().__init__(segments=True)
        self.reads: list[int] = []  # each read back's room

    def page(self, queue: str, partition: int, after: int, limit: int, *,
             whole: bool = False) -> list[Any]:
        if limit != SWEEP_PAGE:
            self.reads.append(limit)
        return super().page(queue, partition, after, limit, whole=whole)


def test_a_lane_is_read_back_a_segment_at_a_time_not_a_room_at_a_time() -> None:
    """A segment holds a park call's records (hundreds), and a read of a room's worth of them (a
    few: ``park_above``) fetches and bills all of it: the rest is served from ``Lane.ahead``."""
    w, lot = World(partitions=1), CountedLot()
    w.engine.set_config("a", paused=True)
    relay = relay_with(w, lot, refresh_s=0.0, batch=50, max_pending=200, park_threshold=10)
    ids = w.add(600, queue="a", partition=0)
    run_steps(relay, 20)
    assert lot.count("a") == 600 and not lot.reads
    segments = len(set(lot.calls[("a", 0)].values()))
    assert segments <= 8  # a poll's records (twice a batch) a park call
    w.engine.set_config("a", paused=False)
    run_steps(relay, 150)
    assert offsets_in_redis(w, "a", ids) == list(range(600))  # all, once, in order
    assert max(lot.reads) <= 10  # park_above: a room at a time, as before (60 reads of 10)
    assert len(lot.reads) <= segments + 1, lot.reads  # a read per segment, and the short one at the end
    assert not relay.ownership.owned[0].lanes["a"].parking

