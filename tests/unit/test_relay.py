"""The relay use-case against in-memory fakes of its ports (no sockets)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sluice.core import bus as ev
from sluice.core.bus import EventBus
from sluice.core.errors import BackendUnavailable
from sluice.core.models import JobSpec, JobState, SettleEntry
from sluice.relay import RELAY_QUEUE, Relay, RelayConfig, SourceRecord, decode, partition_job_id
from sluice_dev.fakes import RELAY_CALLS, FakeClock, FakeDispatcher, FakeEngine, FakeSource, FakeStore

TOPIC = "sluice.jobs"


class World:
    def __init__(self, partitions: int = 2) -> None:
        self.clock = FakeClock()
        self.engine = FakeEngine(self.clock)
        self.store = FakeStore(only=RELAY_CALLS)
        self.source = FakeSource(topic=TOPIC, n_partitions=partitions, clock=self.clock)
        self.dispatcher = FakeDispatcher()
        self.seq = 0

    def relay(self, relay_id: str = "r1", source: FakeSource | None = None, *, metrics: Any = None,
              job_ids: Any = None, events: Any = None, **knobs: Any) -> Relay:
        config = RelayConfig(**{"poll_ms": 10, "commit_s": 0, **knobs})
        return Relay(self.engine, self.store, source or self.source, self.dispatcher,  # type: ignore[arg-type]
                     relay_id=relay_id, clock=self.clock, metrics=metrics,
                     job_ids=job_ids, events=events or EventBus(), config=config)

    def add(self, n: int, queue: str = "q", partition: int | None = None) -> list[str]:
        ids = []
        for _ in range(n):
            self.seq += 1
            spec = JobSpec(job_id=f"job-{self.seq}", queue=queue, payload={"n": self.seq},
                           enqueued_at_ms=1_700_000_000_000 + self.seq)
            self.source.append_spec(self.seq % self.source.n_partitions if partition is None else partition,
                                    spec)
            ids.append(spec.job_id)
        return ids

    def in_redis(self, queue: str = "q") -> list[str]:
        return list(self.engine.jobs.get(queue, {}))


def run_steps(relay: Relay, n: int) -> None:
    for _ in range(n):
        relay.step()


def test_every_record_is_pushed_once_and_offsets_committed_after_the_push() -> None:
    w = World()
    ids = w.add(50)
    relay = w.relay(batch=7)
    run_steps(relay, 20)
    relay.stop()  # drains the background status writer
    assert sorted(w.in_redis()) == sorted(ids)
    assert len(w.engine.enqueued) == 50
    assert w.source.committed_offsets == {0: 25, 1: 25}
    # with each job's enqueue time: the item the store creates keeps the acceptance time
    assert sorted(w.store.queued) == sorted((i, "q", 1_700_000_000_000 + int(i[4:])) for i in ids)
    # the partition ownership jobs exist and are leased with tokens
    assert set(w.engine.ownership) == {partition_job_id(TOPIC, 0), partition_job_id(TOPIC, 1)}


def test_crash_between_push_and_commit_creates_no_duplicate() -> None:
    w = World(partitions=1)
    ids = w.add(30)

    class Crash(BaseException):  # the bus swallows an Exception from a subscriber, never this
        pass

    pushes = 0

    def die_after_second_push(e: ev.Pushed) -> None:
        nonlocal pushes
        if e.outcome == "ok":
            pushes += 1
            if pushes == 2:
                raise Crash

    bus = EventBus()
    bus.subscribe(die_after_second_push, ev.Pushed)
    relay = w.relay(batch=10, events=bus)
    with pytest.raises(Crash):
        run_steps(relay, 10)
    assert w.source.committed_offsets == {0: 10}  # the second batch is in Redis but not committed
    assert len(w.in_redis()) == 20
    # the dead relay's lease runs out; a new relay (new consumer) starts from the committed offset
    w.clock.t += 60
    fresh = FakeSource(clock=w.clock, topic=TOPIC, n_partitions=1, log=w.source.log,
                       committed_offsets=dict(w.source.committed_offsets))
    relay2 = w.relay("r2", source=fresh, batch=10)
    run_steps(relay2, 10)
    assert sorted(w.in_redis()) == sorted(ids)
    assert len(w.engine.enqueued) == 30  # nothing enqueued twice
    assert relay2.report.skipped == 10 and relay2.report.pushed == 10
    assert fresh.committed_offsets == {0: 30}


def test_a_relay_that_lost_its_partition_stops_pushing_at_once() -> None:
    w = World(partitions=1)
    w.add(10)
    old = w.relay("old", batch=5, lease_ms=3000)
    run_steps(old, 2)  # takes the partition and fetches; pushes while fetching again
    assert len(w.in_redis()) == 5
    # old freezes past its lease; a new relay takes the partition and pushes
    w.clock.t += 10
    new_source = FakeSource(clock=w.clock, topic=TOPIC, n_partitions=1, log=w.source.log,
                            committed_offsets=dict(w.source.committed_offsets))
    new = w.relay("new", source=new_source, batch=5, lease_ms=3000)
    run_steps(new, 2)
    assert new.report.partitions_owned == {0} and len(w.in_redis()) == 10
    w.add(10, partition=0)
    new.step()
    # old wakes up with records still pending: its extend fails, it drops the partition
    w.source.log = new_source.log
    pushes_before = w.engine.calls.count("push")
    old.step()
    assert 0 not in old.ownership.owned
    assert w.engine.calls.count("push") == pushes_before
    run_steps(new, 5)
    assert len(w.engine.enqueued) == len(set(w.engine.enqueued)) == 20


def test_push_refused_with_stale_token_drops_the_partition() -> None:
    w = World(partitions=1)
    w.add(10)
    relay = w.relay(batch=5)
    run_steps(relay, 2)
    # a newer relay leased the partition (ours lapsed: r1 was frozen) and pushed to this queue's
    # record with its higher lease token. (Until session 36 only the key was written here: an owner
    # no relay holds, which is now a forged owner, held: tests/unit/test_relay_forged_owner.py.)
    w.engine.ownership[partition_job_id(TOPIC, 0)][1].deadline = w.clock.t - 1
    newer = w.engine.lease(RELAY_QUEUE, 1, 30_000, "r2")[0]
    w.engine.relayed[("q", TOPIC, 0)]["owner_token"] = newer.lease_token
    relay.step()
    assert relay.report.stale_stops == 1
    assert 0 not in relay.ownership.owned and w.source.assigned == []
    assert len(w.in_redis()) == 5
    assert w.source.committed_offsets == {0: 5}  # nothing committed for the lost partition


def test_poison_records_go_to_the_dead_letter_topic_and_the_partition_keeps_flowing() -> None:
    w = World(partitions=1)
    w.add(2, partition=0)
    w.source.append(0, b"x", b"\xff\xfe not json")
    w.source.append(0, b"v3", json.dumps({"schema_version": 3, "job_id": "v3", "queue": "q"}).encode())
    w.source.append(0, b"bad", json.dumps({"job_id": "bad", "queue": "NOT A QUEUE"}).encode())
    w.source.append(0, None, None)
    w.source.append(0, b"other", JobSpec(job_id="mismatch", queue="q").model_dump_json().encode())
    ok = w.add(2, partition=0)
    relay = w.relay()
    run_steps(relay, 3)
    reasons = [reason for _, reason in w.source.dead]
    assert [r.offset for r, _ in w.source.dead] == [2, 3, 4, 5, 6]
    assert reasons[0].startswith("undecodable")
    assert reasons[1] == "unknown schema_version 3"  # 1 (unsealed) and 2 (sealed, issue 27) are known
    assert reasons[2].startswith("invalid job spec") and "queue" in reasons[2]
    assert reasons[3].startswith("undecodable")
    assert "does not match" in reasons[4]
    assert ok[-1] in w.in_redis() and len(w.in_redis()) == 4
    assert w.source.committed_offsets == {0: 9}
    assert w.source.events.index("flush") < w.source.events.index("commit")


def test_decode_accepts_a_valid_record_and_names_each_poison() -> None:
    spec = JobSpec(job_id="a1", queue="q", payload=[1, 2])
    assert decode(SourceRecord(0, 0, b"a1", spec.model_dump_json().encode())) == spec
    assert decode(SourceRecord(0, 0, None, spec.model_dump_json().encode())) == spec
    assert decode(SourceRecord(0, 0, None, b"[1,2]")) == "invalid: not a JSON object"
    assert decode(SourceRecord(0, 0, None, b"{\"schema_version\": \"x\"}")).startswith("unknown")
    deep = b"[" * 100_000 + b"]" * 100_000
    assert decode(SourceRecord(0, 0, None, deep)).startswith(("undecodable", "invalid"))


def test_jobs_the_store_says_are_final_are_not_pushed() -> None:
    w = World(partitions=1)
    ids = w.add(10)
    w.store.final = {ids[2], ids[7]}  # cancelled before the relay got there, or done before a replay
    relay = w.relay()
    run_steps(relay, 3)
    assert sorted(w.in_redis()) == sorted(set(ids) - w.store.final)
    assert relay.report.final_dropped == 2
    assert w.source.committed_offsets == {0: 10}


def test_a_redriven_job_is_pushed_with_the_redrive_generation_the_store_minted() -> None:
    """A redriven job's record (its first one replayed, or the one the redrive appended) carries no
    generation: the store's goes with it into Redis, for the grant (docs/redis-loss.md)."""
    w = World(partitions=1)
    ids = w.add(3)
    w.store.generations[ids[1]] = 2
    relay = w.relay()
    run_steps(relay, 3)
    assert sorted(w.in_redis()) == sorted(ids)
    assert w.engine.gens == {ids[1]: 2}


def test_store_outage_blocks_pushing_and_loses_nothing() -> None:
    w = World(partitions=1)
    ids = w.add(10)
    w.store.down = True
    relay = w.relay()
    relay.step()  # fetched
    with pytest.raises(BackendUnavailable):
        relay.step()  # the push round needs the store first
    assert w.in_redis() == [] and w.source.committed_offsets == {}
    w.store.down = False
    run_steps(relay, 3)
    assert sorted(w.in_redis()) == sorted(ids)


def test_run_until_survives_a_redis_outage_and_releases_its_partitions() -> None:
    w = World(partitions=2)
    ids = w.add(20)
    relay = w.relay()
    relay.step()
    w.engine.down = True
    w.add(5)
    outage_end = w.clock.t + 1.0

    original_sleep = w.clock.sleep

    def sleep(seconds: float) -> None:
        original_sleep(seconds)
        if w.clock.t >= outage_end:
            w.engine.down = False

    w.clock.sleep = sleep  # type: ignore[method-assign]
    report = relay.run_until(w.clock.now_ms() + 5_000)
    assert report.errors > 0
    assert len(w.in_redis()) == 25 and set(ids) <= set(w.in_redis())
    assert all(lease.holder is None for _, lease in w.engine.ownership.values())
    assert w.source.assigned == []


def test_two_relays_share_partitions_without_duplicates() -> None:
    w = World(partitions=4)
    ids = w.add(400)
    sources = [FakeSource(clock=w.clock, topic=TOPIC, n_partitions=4, log=w.source.log,
                          committed_offsets=w.source.committed_offsets) for _ in range(2)]
    a = w.relay("a", source=sources[0], max_partitions=2, batch=20)
    b = w.relay("b", source=sources[1], max_partitions=2, batch=20)
    for _ in range(30):
        a.step()
        b.step()
    assert a.report.partitions_owned.isdisjoint(b.report.partitions_owned)
    assert len(a.report.partitions_owned) == len(b.report.partitions_owned) == 2
    assert sorted(w.in_redis()) == sorted(ids)
    assert len(w.engine.enqueued) == 400


def test_handover_at_the_end_of_an_invocation() -> None:
    w = World(partitions=2)
    first = w.add(20)
    a = w.relay("a")
    a.run_until(w.clock.now_ms() + 500)
    assert sorted(w.in_redis()) == sorted(first)
    second = w.add(20)
    b = w.relay("b", source=FakeSource(clock=w.clock, topic=TOPIC, n_partitions=2, log=w.source.log,
                                       committed_offsets=w.source.committed_offsets))
    b.run_until(w.clock.now_ms() + 500)
    assert b.report.partitions_owned == {0, 1}
    assert sorted(w.in_redis()) == sorted(first + second)
    assert b.report.skipped == 0  # a committed everything before handing over


def test_rate_limit_is_shared_through_the_engine_bucket() -> None:
    w = World(partitions=2)
    w.add(1000)
    w.engine.set_config("q", rate_per_s=100.0, burst=10)
    relay = w.relay()
    relay.step()  # takes ownership; the bucket starts with its burst
    start_t, start_n = w.clock.t, len(w.in_redis())
    while w.clock.t - start_t < 5:
        relay.step()
        w.clock.t += 0.01
    rate = (len(w.in_redis()) - start_n) / (w.clock.t - start_t)
    assert 90 <= rate <= 110
    # an empty bucket is not polled in a tight loop: at most ~50 asks a second
    assert w.engine.calls.count("take_rate") <= 5 * 50
    assert w.source.committed_offsets[0] < 400  # held back: the rest waits in Kafka


def test_manual_pause_and_resume_are_picked_up_from_config() -> None:
    w = World(partitions=1)
    w.engine.set_config("q", paused=True)
    w.add(10)
    relay = w.relay(refresh_s=0.5)
    run_steps(relay, 5)
    assert w.in_redis() == [] and w.source.committed_offsets == {}
    w.engine.set_config("q", paused=False)
    w.clock.t += 1
    run_steps(relay, 3)
    assert len(w.in_redis()) == 10


def test_paused_queue_does_not_block_other_queues_until_the_buffer_is_full() -> None:
    w = World(partitions=1)
    w.engine.set_config("slow", paused=True)
    w.add(5, queue="slow", partition=0)
    fast = w.add(5, queue="fast", partition=0)
    relay = w.relay(max_pending=50)
    run_steps(relay, 3)
    assert sorted(w.in_redis("fast")) == sorted(fast)
    assert w.source.committed_offsets == {}  # the first paused record holds the commit point
    w.add(100, queue="slow", partition=0)
    run_steps(relay, 5)
    assert w.source.paused == {0}  # buffer full: fetching stops, Kafka holds the rest


def test_watermark_pauses_above_high_and_resumes_below_low() -> None:
    w = World(partitions=1)
    w.engine.set_config("q", high_watermark=50, low_watermark=20)
    w.add(300)
    relay = w.relay(batch=10, refresh_s=0.1)
    for _ in range(40):
        relay.step()
        w.clock.t += 0.1
    depth = w.engine.depth("q")
    assert 50 <= depth <= 51  # stops at the mark, not a batch past it
    # workers drain to 30: still above low, stays paused (hysteresis)
    w.engine.consumed["q"] = len(w.in_redis()) - 30
    for _ in range(10):
        relay.step()
        w.clock.t += 0.1
    assert w.engine.depth("q") == 30
    w.engine.consumed["q"] = len(w.in_redis()) - 10
    for _ in range(10):
        relay.step()
        w.clock.t += 0.1
    assert 50 <= w.engine.depth("q") <= 51


def test_dispatch_after_push_sized_from_backlog_and_in_flight_limit() -> None:
    w = World(partitions=1)
    w.engine.set_config("q", max_in_flight=30)
    w.add(100)
    relay = w.relay(worker_batch=10)
    run_steps(relay, 2)
    assert w.dispatcher.calls and w.dispatcher.calls[0] == ("q", 3, 10)
    n = len(w.dispatcher.calls)
    run_steps(relay, 2)  # nothing new pushed and under a second: no new invocations
    assert len(w.dispatcher.calls) == n


def test_no_worker_is_started_for_jobs_a_waiting_worker_takes_and_only_the_rest_get_workers() -> None:
    """Issue 18: a worker waiting for work in a queue (its linger) is woken by push.lua and takes
    what was pushed, so the relay starts none for it; it starts workers only for what the waiting
    ones cannot take, and once nobody waits any more (the next refresh), for what is left."""
    w = World(partitions=1)
    w.engine.idle["q"] = 1
    w.add(5)  # one invocation's worth: the waiting worker's
    relay = w.relay(worker_batch=10, dispatch_interval_s=0.0)
    run_steps(relay, 3)
    assert w.dispatcher.calls == []
    w.engine.idle["q"] = 0  # it left without taking them (a crash): the queue is still due
    w.clock.t += 1.0  # the next refresh sees it
    run_steps(relay, 2)
    assert w.dispatcher.calls == [("q", 1, 10)]
    w.engine.idle["q"] = 2
    w.add(100)  # 11 invocations' worth in all, 2 of them already waiting
    w.clock.t += 1.0
    run_steps(relay, 3)
    assert w.dispatcher.calls[1:] == [("q", 9, 10)]


def test_a_queue_whose_jobs_waiting_workers_took_gets_a_worker_at_once_for_its_next_push() -> None:
    """Issue 18: deciding that a queue needs no worker (waiting workers took its jobs) must not
    hold back its next dispatch by the dispatch interval: if those workers have gone meanwhile
    (their linger, or their time, ran out), the next job would wait up to a second."""
    w = World(partitions=1)
    w.engine.idle["q"] = 1
    w.add(3)
    relay = w.relay(worker_batch=10)  # dispatch_interval_s: the default second
    run_steps(relay, 3)
    assert w.dispatcher.calls == []
    w.engine.consumed["q"], w.engine.idle["q"] = 3, 0  # taken; that worker then left
    w.clock.t += 0.1
    run_steps(relay, 2)  # the recount: nothing ready, nothing to start
    assert w.dispatcher.calls == []
    w.clock.t += 0.1
    w.add(1)
    run_steps(relay, 3)
    assert w.dispatcher.calls == [("q", 1, 10)]


def test_maintenance_reaps_every_queue_and_nudges_undrained_backlogs() -> None:
    w = World(partitions=1)
    w.engine.jobs["idle"] = {"x": JobSpec(job_id="x", queue="idle")}
    relay = w.relay(maintenance_s=5)
    relay.step()
    assert "idle" in w.engine.reaped and RELAY_QUEUE not in w.engine.reaped
    assert ("idle", 1, 10) in w.dispatcher.calls


def test_maintenance_settles_what_redis_ended_and_forgets_only_what_was_written() -> None:
    """A lease that expired on its last attempt (or after a cancel request) ended the job in
    Redis with no worker left to say so: the relay writes it to the store, then forgets it."""
    w = World(partitions=1)
    w.engine.jobs["q"] = {}
    dead = SettleEntry(job_id="d1", queue="q", status=JobState.DEAD, ended_at_ms=5,
                    last_error="lease expired on attempt 3")
    gone = SettleEntry(job_id="c1", queue="q", status=JobState.CANCELLED, ended_at_ms=6)
    w.engine.endings["q"] = [dead, gone]
    w.store.refuse_settle = {"c1"}
    relay = w.relay(maintenance_s=5)
    relay.step()
    assert w.store.settled == [dead]
    assert w.engine.endings["q"] == [gone]  # not written, so kept for the next round
    assert relay.report.settled == 1
    w.store.refuse_settle = set()
    w.clock.t += 6
    relay.step()
    assert w.store.settled == [dead, gone] and w.engine.endings["q"] == []


def test_the_relay_emits_pushed_committed_settled_and_job_ended_for_the_endings_it_settles() -> None:
    from sluice.core import bus as events

    w = World(partitions=1)
    ids = w.add(3, partition=0)
    dead = SettleEntry(job_id="d1", queue="q", status=JobState.DEAD, ended_at_ms=5, redrive_gen=2)
    gone = SettleEntry(job_id="c1", queue="q", status=JobState.CANCELLED, ended_at_ms=6)
    refused = SettleEntry(job_id="x1", queue="q", status=JobState.DEAD, ended_at_ms=7)
    w.engine.endings["q"] = [dead, gone, refused]
    w.store.refuse_settle = {"x1"}  # not written: no ending to announce
    bus = events.EventBus()
    seen: list[events.Event] = []
    bus.subscribe(seen.append)
    relay = w.relay(maintenance_s=5, events=bus)
    run_steps(relay, 3)
    w.clock.t += 6  # the next maintenance, now that "q" exists
    relay.step()
    pushed = [e for e in seen if isinstance(e, events.Pushed)]
    assert [(e.partition, e.first, e.last, e.pushed, e.outcome) for e in pushed] == [(0, 0, 2, 3, "ok")]
    assert list(pushed[0].jobs) == ids and pushed[0].owner == relay.ownership.owned[0].token
    committed = [e for e in seen if isinstance(e, events.Committed)]
    assert committed and committed[-1].partition == 0 and committed[-1].offset == 3
    ended = [(e.job, e.state, e.source, e.redrive_gen) for e in seen if isinstance(e, events.JobEnded)]
    assert ended == [("d1", "dead", "settle", 2), ("c1", "cancelled", "settle", 0)]
    assert [(e.queue, e.n) for e in seen if isinstance(e, events.Settled)] == [("q", 2)]
    # the order a subscriber sees: a job's ending before the queue's settled count
    kinds = [type(e).__name__ for e in seen if isinstance(e, events.JobEnded | events.Settled)]
    assert kinds == ["JobEnded", "JobEnded", "Settled"]


def test_lost_redrive_and_foreign_topic_jobs_are_released() -> None:
    w = World(partitions=1)
    w.engine.enqueue(JobSpec(job_id="other.0", queue=RELAY_QUEUE, payload={"topic": "other", "partition": 0}))
    relay = w.relay()
    relay.step()
    assert relay.report.partitions_owned == {0}
    assert w.engine.ownership["other.0"][1].holder is None
    assert "redrive" in w.engine.calls


def test_extends_its_partition_leases_while_running() -> None:
    w = World(partitions=1)
    relay = w.relay(lease_ms=3000)
    relay.step()
    token = relay.ownership.owned[0].token
    for _ in range(100):
        w.clock.t += 0.1
        relay.step()
    assert relay.ownership.owned[0].token == token  # kept the same lease for 10 s with a 3 s lease
    assert w.engine.calls.count("extend") >= 9


def test_kafka_commits_are_spaced_out_and_the_last_one_is_forced_at_stop() -> None:
    w = World(partitions=1)
    w.add(100)
    relay = w.relay(batch=10, commit_s=1.0)
    run_steps(relay, 12)  # the fake clock barely moves: one commit at most
    assert len(w.source.commits) <= 1
    assert len(w.in_redis()) == 100
    relay.stop()
    assert w.source.committed_offsets == {0: 100}


def test_a_push_round_that_fails_half_way_keeps_the_rest_pending() -> None:
    w = World(partitions=2)
    ids = w.add(20)
    relay = w.relay(batch=10)
    relay.step()  # fetched both partitions
    original = w.engine.push
    calls = 0

    def flaky(*args: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise BackendUnavailable("connection reset")
        return original(*args)

    w.engine.push = flaky  # type: ignore[method-assign]
    with pytest.raises(BackendUnavailable):
        relay.step()
    assert len(w.in_redis()) == 10  # the first partition's batch landed and was taken off
    assert sum(o.pending_count for o in relay.ownership.owned.values()) == 10
    run_steps(relay, 3)
    relay.stop()
    assert sorted(w.in_redis()) == sorted(ids) and len(w.engine.enqueued) == 20


def test_status_updates_never_hold_up_or_break_pushing() -> None:
    import threading

    w = World(partitions=1)
    w.add(30)
    gate = threading.Event()
    calls: list[int] = []

    def slow_then_broken(jobs: Any) -> None:
        calls.append(len(jobs))
        gate.wait(5)
        raise BackendUnavailable("table throttled")

    w.store.mark_queued = slow_then_broken  # type: ignore[method-assign]
    relay = w.relay(batch=10)
    run_steps(relay, 6)
    assert len(w.in_redis()) == 30  # pushed while the first status write still hangs
    gate.set()
    relay.stop()
    assert sum(calls) == 30


def test_unconfigured_queues_get_the_deployment_default_rate_once() -> None:
    w = World(partitions=1)
    w.engine.set_config("tuned", rate_per_s=5.0, burst=1)
    w.engine.set_config("secret", sensitive=("/password",))  # what the listing hides sets no flow knob
    w.add(5, queue="fresh", partition=0)
    w.add(5, queue="tuned", partition=0)
    w.add(5, queue="secret", partition=0)
    relay = w.relay(default_rate_per_s=50.0)
    run_steps(relay, 3)
    assert w.engine.get_config("fresh").rate_per_s == 50.0 and w.engine.get_config("fresh").burst == 50
    assert w.engine.get_config("secret").rate_per_s == 50.0
    assert w.engine.get_config("tuned").rate_per_s == 5.0  # an operator's own setting stands
    assert "take_rate" in w.engine.calls


def test_a_partition_whose_start_cannot_be_found_is_given_back_not_pushed() -> None:
    w = World(partitions=1)
    w.add(5)

    def broken(partitions: Any) -> None:
        raise BackendUnavailable("broker unreachable")

    w.source.rewind_to_committed = broken  # type: ignore[method-assign]
    relay = w.relay()
    with pytest.raises(BackendUnavailable):
        relay.step()
    assert relay.ownership.owned == {} and w.in_redis() == []
    assert all(lease.holder is None for _, lease in w.engine.ownership.values())


def test_relays_started_together_take_their_share_then_whatever_is_left_free() -> None:
    w = World(partitions=4)
    a = w.relay("a", partition_groups=2, share_grace_s=10)
    b = w.relay("b", partition_groups=2, share_grace_s=10)
    a.step()
    b.step()
    assert len(a.ownership.owned) == 2 and len(b.ownership.owned) == 2
    c = w.relay("c", partition_groups=2, share_grace_s=10)
    b.stop()  # b's group ends early: its partitions are free, and c takes its share of them
    c.step()
    assert len(c.ownership.owned) == 2
    w.clock.t += 11  # past the grace period a relay takes any partition nobody holds
    c.stop()
    run_steps(a, 2)
    assert len(a.ownership.owned) == 4


class Counted:
    def __init__(self) -> None:
        self.counts: list[tuple[str, float]] = []

    def count(self, name: str, value: float = 1, **dimensions: str) -> None:
        self.counts.append((name, value))


def test_relay_lag_is_the_worst_partition_behind_kafka() -> None:
    w = World(partitions=2)
    w.engine.set_config("q", paused=True)
    w.add(30, partition=0)
    w.add(10, partition=1)
    metrics = Counted()
    ends = {0: 30, 1: 10}
    w.source.highwater = ends.get  # type: ignore[method-assign]
    relay = w.relay(metrics=metrics, lag_every_s=1)
    run_steps(relay, 3)
    w.clock.t += 2
    relay.step()
    assert ("RelayLag", 30) in metrics.counts  # nothing pushed: all of partition 0 is behind
    w.engine.set_config("q", paused=False)
    w.clock.t += 1
    report = relay.run_until(w.clock.now_ms() + 2000)
    assert report.lag == 0 and metrics.counts[-1] == ("RelayLag", 0)


# ------------------------------------------------------------------ issue 19, item 9: unminted records


def test_a_record_no_gateway_minted_goes_to_the_dead_letter_topic() -> None:
    from sluice.core import ids, seal

    key, old = b"this-deployment-key-0123456789", b"the-previous-key-0123456789"
    stranger = b"someone-else-key-0123456"
    w = World(partitions=1)
    now = 1_700_000_000_000
    good = [ids.mint(now, "q", key), ids.mint(now, "q", old)]  # the current and the previous key
    stamp, queue, mac = ids.mint(now, "q", key).split(".")
    bad = {
        "plain-id": "a job id that is no minted id at all",
        ids.mint(now, "q", stranger): "another deployment's key",
        f"{stamp}.{queue}.{mac[:-1]}{'A' if mac[-1] != 'A' else 'B'}": "a forged mac",
        ids.mint(now, "other", key): "minted for another queue than the record's",
    }
    for job_id in [good[0], *bad, good[1]]:  # sealed by whoever wrote them: ours with our keys
        signer = old if job_id == good[1] else key if job_id == good[0] else stranger
        w.source.append_spec(0, seal.seal_spec(JobSpec(job_id=job_id, queue="q", payload=None,
                                                       enqueued_at_ms=w.clock.now_ms()), signer))
    relay = w.relay(job_ids=ids.Verifier(key, [old]))
    run_steps(relay, 3)
    assert w.in_redis() == good
    dead = {record.key.decode(): reason for record, reason in w.source.dead}  # type: ignore[union-attr]
    assert set(dead) == set(bad)
    assert all(reason.startswith("unminted") for reason in dead.values())
    other_queue = next(job_id for job_id in bad if ".other." in job_id)
    assert "for queue 'other'" in dead[other_queue]
    assert w.source.committed_offsets == {0: 6} and relay.report.dead_lettered == 4


def test_without_keys_the_relay_trusts_every_record() -> None:
    w = World(partitions=1)
    w.add(2, partition=0)
    run_steps(w.relay(), 3)
    assert len(w.in_redis()) == 2 and w.source.dead == []


# ------------------------------------------------------------------ issue 19, item 5: dispatch budget


def _flooded_world(queues: int, jobs_each: int) -> World:
    w = World(partitions=1)
    for i in range(queues):
        w.add(jobs_each, queue=f"q{i:02d}", partition=0)
    return w


def test_one_relay_starts_at_most_its_budget_of_workers_across_all_queues() -> None:
    w = _flooded_world(queues=40, jobs_each=200)  # unbudgeted: 40 queues x 20 invocations
    relay = w.relay(worker_batch=10, dispatch_per_s=5, dispatch_burst=10)
    for _ in range(20):  # 2 s of relay time
        relay.step()
        w.clock.t += 0.1
    started = sum(n for _, n, _ in w.dispatcher.calls)
    assert 10 <= started <= 10 + 5 * 2 + 1  # the burst, then the rate
    # Shared out: no queue took more than two, so most queues with a backlog got a worker.
    per_queue: dict[str, int] = {}
    for queue, n, _ in w.dispatcher.calls:
        per_queue[queue] = per_queue.get(queue, 0) + n
    assert max(per_queue.values()) <= 2 and len(per_queue) >= 10


def test_without_a_budget_every_queue_gets_its_per_queue_share() -> None:
    w = _flooded_world(queues=5, jobs_each=200)
    run_steps(w.relay(worker_batch=10), 3)
    assert sorted(n for _, n, _ in w.dispatcher.calls) == [20] * 5


def test_the_settings_default_is_a_budget() -> None:
    from sluice.core.config import Settings

    s = Settings()
    assert s.dispatch_budget_per_s > 0 and s.dispatch_budget_burst > 0
    w = World(partitions=1)
    relay = Relay(w.engine, w.store, w.source, w.dispatcher, relay_id="r1",  # type: ignore[arg-type]
                  config=RelayConfig.from_settings(s), events=EventBus())
    assert (relay.config.dispatch_per_s, relay.config.dispatch_burst) == (s.dispatch_budget_per_s,
                                                                          s.dispatch_budget_burst)


def test_a_sealed_record_altered_in_kafka_ends_its_job_dead_with_the_reason_and_is_never_pushed() -> None:
    """Issue 27: a record whose id verifies but whose seal does not match (payload, priority, attempts
    or run-at changed) is refused: its job ends visibly dead with the reason, the record goes to the
    dead-letter topic; a copy of a job already queued leaves that job alone."""
    from sluice.core import ids, seal

    key = b"this-deployment-key-0123456789"
    w = World(partitions=1)
    now = w.clock.now_ms()

    def sealed(**change: Any) -> JobSpec:
        return seal.seal_spec(JobSpec(job_id=ids.mint(now, "q", key), queue="q", payload={"n": 1},
                                      enqueued_at_ms=now, **change), key)

    good = sealed()
    altered = {name: sealed().model_copy(update=change) for name, change in [
        ("payload", {"payload": {"n": 2}}), ("priority", {"priority": 9}),
        ("attempts", {"max_attempts": 100}), ("run_at", {"run_at_ms": now + 3_600_000})]}
    queued = sealed()
    w.store.items[queued.job_id] = {"queue": "q", "status": "queued", "token": 0, "attempts": 0}
    for spec in [good, *altered.values(), queued.model_copy(update={"priority": 9})]:
        w.source.append_spec(0, spec)
    relay = w.relay(job_ids=ids.Verifier(key))
    run_steps(relay, 3)
    relay.stop()
    assert w.in_redis() == [good.job_id]
    for name, spec in altered.items():
        item = w.store.items[spec.job_id]
        assert item["status"] == "dead" and "seal" in item["last_error"], name
    assert w.store.items[queued.job_id]["status"] == "queued"  # a copy never ends a job that was pushed
    assert len(w.source.dead) == 5 and all(reason.startswith("seal:") for _, reason in w.source.dead)
    assert relay.report.refused_records == 5
    # what GET /v1/jobs/<id> answers for one of them: dead, and why
    from sluice.gateway.api import Api, Backends, IdMinting
    from sluice_dev.fakes import FakeLog, FakeQueue

    w.store.only = None
    api = Api(Backends(FakeLog(), w.store, FakeQueue(), events=EventBus()), IdMinting(key))  # type: ignore[arg-type]
    view = api.status(altered["priority"].job_id)
    assert view.status is JobState.DEAD and (view.last_error or "").startswith("refused by the relay: seal:")


def test_a_genuine_record_past_the_life_bound_ends_its_job_dead_even_when_its_item_says_queued() -> None:
    """Issue 27: a record replayed past the life bound (after a Redis loss) is not pushed; its job's
    queued item, which no push will move on any more, ends dead with the reason. An altered copy
    (the seal fails) never touches a queued item (the test above)."""
    from sluice.core import ids, limits, seal

    key = b"this-deployment-key-0123456789"
    w = World(partitions=1)
    w.clock.t = 1_700_000_000.0
    now = w.clock.now_ms()
    old = seal.seal_spec(JobSpec(job_id=ids.mint(now, "q", key), queue="q", payload=1,
                                 enqueued_at_ms=now - limits.JOB_LIFE_MS), key)
    w.store.items[old.job_id] = {"queue": "q", "status": "queued", "token": 0, "attempts": 0}
    w.source.append_spec(0, old)
    relay = w.relay(job_ids=ids.Verifier(key))
    run_steps(relay, 3)
    relay.stop()
    assert w.in_redis() == [] and w.store.items[old.job_id]["status"] == "dead"
    assert w.store.items[old.job_id]["last_error"].startswith("refused by the relay: expired")


def test_a_refused_record_the_jobs_table_cannot_record_yet_is_read_again_not_dropped() -> None:
    """Issue 27: 'never dropped silently'. With the jobs table down, a refused record's partition is
    given back and read again from its committed offset; once the table answers, the job ends dead
    with the reason, once, and the records around it flow."""
    from sluice.core import ids, seal
    from sluice.core.errors import BackendUnavailable

    key = b"this-deployment-key-0123456789"
    w = World(partitions=1)
    now = w.clock.now_ms()

    def sealed(n: int) -> JobSpec:
        return seal.seal_spec(JobSpec(job_id=ids.mint(now, "q", key), queue="q", payload=n,
                                      enqueued_at_ms=now), key)

    before, altered, after = sealed(1), sealed(2).model_copy(update={"priority": 9}), sealed(3)
    for spec in (before, altered, after):
        w.source.append_spec(0, spec)
    real, calls = w.store.refuse_record, []

    def refuse(*args: Any, **kw: Any) -> bool:
        calls.append(args[0])
        if len(calls) == 1:
            raise BackendUnavailable("dynamodb is down")
        return real(*args, **kw)

    w.store.refuse_record = refuse  # type: ignore[method-assign]
    relay = w.relay(job_ids=ids.Verifier(key))
    run_steps(relay, 12)
    relay.stop()
    assert sorted(w.in_redis()) == sorted([before.job_id, after.job_id])
    assert calls == [altered.job_id, altered.job_id] and w.store.items[altered.job_id]["status"] == "dead"
    assert [r.offset for r, _ in w.source.dead] == [1] and relay.report.refused_records == 1
    assert w.source.committed_offsets == {0: 3}


def test_a_minted_job_of_a_queue_the_registry_refuses_ends_dead_with_the_reason_not_in_silence() -> None:
    """Issue 28's race, as far as the relay goes: two gateways each admitted the first job of a new
    queue when the registry had room for one. The refused queue's job was answered 202: it now ends
    visibly dead with the reason (its record still goes to the dead-letter topic), never dropped."""
    from sluice.core import ids, seal

    key = b"this-deployment-key-0123456789"
    from sluice.core.errors import QueueNotAllowed

    w = World(partitions=1)
    register = w.engine.register

    def full_for_second(queue: str, **kw: Any) -> None:
        if queue == "second":
            raise QueueNotAllowed("the queue registry is full (MaxQueues)")
        register(queue)

    w.engine.register = full_for_second  # type: ignore[method-assign]
    now = w.clock.now_ms()
    first, second = (seal.seal_spec(JobSpec(job_id=ids.mint(now, q, key), queue=q, payload=1,
                                            enqueued_at_ms=now), key) for q in ("first", "second"))
    for spec in (first, second):
        w.source.append_spec(0, spec)
    relay = w.relay(job_ids=ids.Verifier(key))
    run_steps(relay, 3)
    relay.stop()
    assert w.in_redis("first") == [first.job_id] and w.in_redis("second") == []
    item = w.store.items[second.job_id]
    assert item["status"] == "dead" and item["last_error"].startswith("refused by the relay: queue refused")
    assert [reason.startswith("queue refused") for _, reason in w.source.dead] == [True]
    assert (relay.report.refused, relay.report.refused_records) == (1, 0)


def test_a_minted_sealed_record_registers_its_queue_without_the_limit() -> None:
    """Issue 28: its gateway reserved the queue before the 202, so the relay registers it admitted
    (register.lua's mode: no limit), never refused for the limit, even after a Redis loss; a
    record no gateway minted (a harness's, no job id keys) is still checked against the limit."""
    from sluice.core import ids, seal

    key = b"this-deployment-key-0123456789"
    w = World(partitions=1)
    asked: list[tuple[str, bool]] = []

    def register(queue: str, *, admitted: bool = False) -> bool:
        asked.append((queue, admitted))
        return True

    w.engine.register = register  # type: ignore[method-assign]
    now = w.clock.now_ms()
    minted = seal.seal_spec(JobSpec(job_id=ids.mint(now, "paid", key), queue="paid", payload=1,
                                    enqueued_at_ms=now), key)
    w.source.append_spec(0, minted)
    bus, registered = EventBus(), []
    bus.subscribe(lambda e: registered.append(e.queue), ev.QueueRegistered)
    relay = w.relay(job_ids=ids.Verifier(key), events=bus)
    run_steps(relay, 3)
    relay.stop()
    assert asked == [("paid", True)] and w.in_redis("paid") == [minted.job_id]
    assert registered == ["paid"]  # new to the cache: the root writes it through to DynamoDB
    harness = World(partitions=1)
    harness.engine.register = register  # type: ignore[method-assign]
    harness.add(1, queue="free")
    relay = harness.relay()
    run_steps(relay, 3)
    relay.stop()
    assert asked[1:] == [("free", False)]
