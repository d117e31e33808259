"""Issue 19, item 1, in the relay: reserved queues, hostile ownership jobs, unexpected errors.

The relay's partition ownership lives in the internal queue ``sluice-relay``. Before the
prefix was reserved a caller could put jobs there; these tests plant such jobs (the fake
engine's ``enqueue`` takes any queue, as Redis did) and records for reserved queues, and
check that the relay removes or dead-letters them and keeps every partition flowing.
"""

from __future__ import annotations

from typing import Any

import pytest

from sluice.core.models import JobSpec
from sluice.relay import RELAY_QUEUE, Relay, partition_job, partition_job_id
from tests.unit.test_relay import TOPIC, Counted, World, run_steps

HOSTILE_ID = "01JD6Z8Q4YQ8N5V6R1K2M3N4P5.sluice-relay.ABCDEFGHJKMNPQRS"  # shaped like a minted id


def plant(w: World, job_id: str, payload: Any, priority: int = 9) -> None:
    w.engine.enqueue(JobSpec(job_id=job_id, queue=RELAY_QUEUE, payload=payload, priority=priority))


def test_the_issues_two_hostile_ownership_jobs_are_removed_and_every_partition_flows() -> None:
    """`{"partition": "x"}` crashed `_acquire` for good; a well-formed fake claimed partition 0 twice."""
    w = World(partitions=2)
    plant(w, HOSTILE_ID, {"topic": TOPIC, "partition": "x"})
    plant(w, HOSTILE_ID.replace("01JD", "01JE"), {"topic": TOPIC, "partition": 0})
    ids = w.add(20)
    metrics = Counted()
    relay = w.relay(metrics=metrics)
    run_steps(relay, 5)
    relay.stop()
    assert sorted(w.in_redis()) == sorted(ids)
    assert relay.report.bad_ownership_jobs == 2
    assert ("RelayBadOwnershipJob", 1) in metrics.counts
    assert set(w.engine.ownership) == {partition_job_id(TOPIC, 0), partition_job_id(TOPIC, 1)}
    assert relay.report.partitions_owned == {0, 1}


@pytest.mark.parametrize(("job_id", "payload"), [
    (partition_job_id(TOPIC, 0), {"topic": TOPIC, "partition": "0"}),  # a string
    (partition_job_id(TOPIC, 1), {"topic": TOPIC, "partition": True}),  # a bool is not a partition
    (partition_job_id(TOPIC, 1), {"topic": TOPIC, "partition": 1.0}),
    (f"{TOPIC}.-1", {"topic": TOPIC, "partition": -1}),
    (f"{TOPIC}.99999999", {"topic": TOPIC, "partition": 99_999_999}),
    (partition_job_id(TOPIC, 0), {"topic": TOPIC, "partition": 0, "extra": 1}),
    (partition_job_id(TOPIC, 0), {"topic": 7, "partition": 0}),
    (partition_job_id(TOPIC, 0), ["sluice.jobs", 0]),
    (partition_job_id(TOPIC, 0), None),
    ("sluice.jobs.00", {"topic": TOPIC, "partition": 0}),  # not the partition's own id
    (partition_job_id(TOPIC, 1), {"topic": TOPIC, "partition": 0}),  # another partition's id
])
def test_a_leased_ownership_job_that_is_not_its_partitions_own_is_removed(job_id: str, payload: Any) -> None:
    w = World(partitions=2)
    plant(w, job_id, payload)
    ids = w.add(10)
    relay = w.relay()
    report = relay.run_until(w.clock.now_ms() + 3000)  # the partition job is enqueued again
    assert set(w.engine.ownership) == {partition_job_id(TOPIC, 0), partition_job_id(TOPIC, 1)}
    assert sorted(w.in_redis()) == sorted(ids)
    assert report.bad_ownership_jobs == 1


def test_another_topics_well_formed_job_is_released_not_removed() -> None:
    w = World(partitions=1)
    w.engine.enqueue(partition_job("other", 0, 15_000))
    relay = w.relay()
    relay.step()
    assert relay.report.bad_ownership_jobs == 0 and "other.0" in w.engine.ownership


def test_a_record_for_a_reserved_queue_goes_to_the_dead_letter_topic_and_is_never_pushed() -> None:
    w = World(partitions=1)
    ids = w.add(3)
    hostile = w.add(1, queue=RELAY_QUEUE) + w.add(1, queue="sluice-other")
    ids += w.add(3)
    relay = w.relay()
    run_steps(relay, 4)
    relay.stop()
    assert sorted(w.in_redis()) == sorted(ids)
    assert not any(q.startswith("sluice-") for q in w.engine.jobs)
    assert [r.key.decode() for r, _ in w.source.dead if r.key] == hostile
    assert all(reason.startswith("reserved queue") and "'sluice-'" in reason for _, reason in w.source.dead)
    assert relay.report.dead_lettered == 2 and w.source.committed_offsets == {0: 8}


def test_one_partitions_push_failing_unexpectedly_never_stops_the_others() -> None:
    w = World(partitions=2)
    ids = w.add(40)
    original = w.engine.push

    def broken_for_partition_0(queue: str, topic: str, partition: int, token: int, records: Any,
                               gens: Any = None) -> Any:
        if partition == 0:
            raise KeyError("a bug that only partition 0's records trigger")
        return original(queue, topic, partition, token, records, gens)

    w.engine.push = broken_for_partition_0  # type: ignore[method-assign]
    metrics = Counted()
    relay = w.relay(metrics=metrics, batch=5)
    report = relay.run_until(w.clock.now_ms() + 3000)  # must not raise
    on_1 = [i for i in ids if int(i[4:]) % 2 == 1]
    assert sorted(w.in_redis()) == sorted(on_1)  # partition 1 flowed to the end
    assert report.unexpected_errors > 0 and ("RelayUnexpectedErrors", 1) in metrics.counts
    assert w.source.committed_offsets.get(0, 0) == 0  # nothing of partition 0 is committed
    w.engine.push = original  # type: ignore[method-assign]
    relay2 = w.relay("r2")
    relay2.run_until(w.clock.now_ms() + 2000)
    assert sorted(w.in_redis()) == sorted(ids)  # and nothing was lost


def test_a_step_that_meets_an_unexpected_error_restarts_its_partitions_and_loses_nothing() -> None:
    w = World(partitions=2)
    ids = w.add(30)
    original = w.source.poll
    calls = 0

    def poll_failing_once(timeout_ms: int, max_records: int) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise RuntimeError("kafka client bug")
        return original(timeout_ms, max_records)

    w.source.poll = poll_failing_once  # type: ignore[method-assign]
    metrics = Counted()
    relay = w.relay(metrics=metrics, batch=4)
    report = relay.run_until(w.clock.now_ms() + 5000)
    assert report.unexpected_errors == 1 and ("RelayUnexpectedErrors", 1) in metrics.counts
    assert sorted(w.in_redis()) == sorted(ids) and len(w.engine.enqueued) == 30
    assert w.source.committed_offsets == {0: 15, 1: 15}


def test_no_worker_is_dispatched_for_a_reserved_queue() -> None:
    w = World(partitions=1)
    w.engine.jobs["sluice-other"] = {"j": JobSpec(job_id="j", queue="sluice-other")}  # found by maintenance
    w.engine.jobs["q"] = {"k": JobSpec(job_id="k", queue="q")}
    relay: Relay = w.relay()
    run_steps(relay, 2)
    w.clock.t += 10
    run_steps(relay, 2)
    relay.stop()
    assert {q for q, _, _ in w.dispatcher.calls} == {"q"}
    assert "sluice-other" not in w.engine.reaped


def test_sluice_devs_safety_net_never_sends_a_worker_to_a_reserved_queue(monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path: Any) -> None:
    """The relay holds leases in sluice-relay at all times; the safety net used to name it."""
    from sluice.core.config import Settings
    from sluice.core.models import DispatchEvent, QueueStats
    from sluice.entry import root as wiring
    from sluice_dev.local.dev import WORKER_FUNCTION, DevOptions, DevStack

    class Engine:
        def queues(self) -> list[str]:
            return ["emails", RELAY_QUEUE, "sluice-other"]

        def stats(self, queue: str) -> QueueStats:
            return QueueStats(queue=queue, ready=1, delayed=0, leased=1, dead=0, oldest_ready_age_ms=0)

    class Lambdas:
        def __init__(self) -> None:
            self.events: list[tuple[str, Any]] = []

        def invoke(self, name: str, event: Any, *, caller: Any = None) -> None:
            self.events.append((name, event))

    monkeypatch.setattr(wiring, "queue", lambda s=None: Engine())
    dev = DevStack(DevOptions(state_dir=tmp_path))
    dev.settings, dev.lambdas = Settings(), Lambdas()  # type: ignore[assignment]
    dev.invoke_safety_net()
    [(name, event)] = dev.lambdas.events  # type: ignore[attr-defined]
    assert name == WORKER_FUNCTION and event["queues"] == ["emails"]
    DispatchEvent.model_validate(event)  # the worker accepts it
