"""Relays as real OS processes: SIGKILL between push and commit, two at once, a frozen owner."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import Counter
from typing import Any

import pytest

from sluice.backends.redis.keys import QueueKeys
from sluice.relay import RELAY_QUEUE
from tests.backends import relay_proc
from tests.backends.relay_proc import Drainer, build, create_topic, job_records, produce

pytestmark = pytest.mark.integration
PARTITIONS = 4
OWNERSHIP = QueueKeys(RELAY_QUEUE)


@pytest.fixture
def topic(tansu: Any, unique: str) -> str:
    name = f"jobs-{unique}"
    create_topic(tansu.extra["bootstrap"], name, PARTITIONS)
    return name


def wait_for(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def owned_now(redis_client: Any) -> int:
    """Partition leases that are live right now (expired ones linger until someone leases)."""
    return int(redis_client.zcount(OWNERSHIP.leased, time.time() * 1000, "+inf"))


def finish(redis_url: str, bs: str, topic: str, group: str, expected: int, drainer: Drainer) -> Any:
    """A last, clean relay runs until every produced job has been leased by the drainer."""
    relay, source = build(redis_url, bs, topic, group, relay_id="finisher", lease_ms=1000)
    try:
        deadline = time.monotonic() + 30
        while len(set(drainer.leased)) < expected:
            assert time.monotonic() < deadline, f"only {len(set(drainer.leased))} of {expected} arrived"
            relay.step()
        for _ in range(5):
            relay.step()
    finally:
        relay.stop()
        source.close()
    return relay.report


def assert_exactly_once(leased: list[str], expected: set[str]) -> None:
    counts = Counter(leased)
    duplicates = {job_id: n for job_id, n in counts.items() if n > 1}
    assert not duplicates, f"{len(duplicates)} jobs were enqueued again after they were done"
    assert set(counts) == expected, f"lost {len(expected - set(counts))} jobs"


@pytest.mark.timeout(90)
def test_sigkill_between_push_and_commit_ten_times_duplicates_and_loses_nothing(
        tansu: Any, topic: str, redis_url: str, redis_client: Any, unique: str) -> None:
    bs, group = tansu.extra["bootstrap"], f"g-{unique}"
    # Enough that ten short-lived relays cannot drain it all, even on an idle machine.
    records = job_records("k", 30000)
    produce(bs, topic, records)
    expected = {key.decode() for key, _, _ in records}
    drainer = Drainer(redis_url).start()  # acks delete job hashes: a replayed push would show
    rng = random.Random(6)
    gaps = 0
    try:
        for kill in range(10):
            if kill % 2 == 1:  # right after a push returns, before its commit (the last kill too)
                proc = relay_proc.start(redis_url, bs, topic, group, relay_id=f"r{kill}", seconds=20,
                                        die_after_pushes=rng.randint(1, 6), batch=50, lease_ms=1000)
            else:  # at a random moment of its run
                proc = relay_proc.start(redis_url, bs, topic, group, relay_id=f"r{kill}", seconds=20,
                                        batch=50, lease_ms=1000)
                wait_for(lambda: owned_now(redis_client) > 0, 15, "the relay to own partitions")
                time.sleep(rng.uniform(0.0, 0.3))
                os.kill(proc.proc.pid, signal.SIGKILL)
            assert proc.proc.wait(20) == -signal.SIGKILL
            relayed = relay_proc.relayed_offsets(redis_client, topic, PARTITIONS)
            done = relay_proc.committed(bs, topic, group, PARTITIONS)
            if any(relayed[p] >= (done[p] or 0) for p in range(PARTITIONS) if relayed[p] >= 0):
                gaps += 1  # Redis holds records that Kafka was never told about
            # its partition leases (1 s) must run out before the next relay can take them
            wait_for(lambda: owned_now(redis_client) == 0, 5, "the dead relay's leases to expire")
        assert gaps >= 5, "the kills did not land between a push and its commit"
        assert len(set(drainer.leased)) < len(expected), "too few records left to prove the restart"
        report = finish(redis_url, bs, topic, group, len(expected), drainer)
    finally:
        drainer.stop()
    assert_exactly_once(drainer.leased, expected)
    assert report.skipped > 0  # the finisher re-read pushed-but-uncommitted records and skipped them


@pytest.mark.timeout(60)
def test_two_relays_at_once_push_every_job_once(tansu: Any, topic: str, redis_url: str,
                                                 redis_client: Any, unique: str) -> None:
    bs, group = tansu.extra["bootstrap"], f"g-{unique}"
    first = job_records("t", 2000)
    produce(bs, topic, first)
    drainer = Drainer(redis_url).start()
    a = relay_proc.start(redis_url, bs, topic, group, relay_id="a", seconds=6, max_partitions=2,
                         batch=50, lease_ms=1000)
    wait_for(lambda: owned_now(redis_client) == 2, 15, "relay a to own two partitions")
    b = relay_proc.start(redis_url, bs, topic, group, relay_id="b", seconds=8, batch=50, lease_ms=1000)
    wait_for(lambda: owned_now(redis_client) == 4, 15, "relay b to own the other two")
    assert a.proc.poll() is None, "relay a ended before both ran at once"
    more: list[tuple[bytes, bytes, int | None]] = []
    for i in range(10):  # keep records coming while both run, and after a hands over to b
        chunk = job_records("t", 300, start=2000 + 300 * i)
        produce(bs, topic, chunk)
        more += chunk
        time.sleep(0.4)
    report_a, report_b = a.wait_report(20), b.wait_report(20)
    try:
        expected = {key.decode() for key, _, _ in first + more}
        wait_for(lambda: len(set(drainer.leased)) >= len(expected), 10, "every job")
    finally:
        drainer.stop()
    assert report_a is not None and report_b is not None
    assert report_a["pushed"] > 0 and report_b["pushed"] > 0
    assert len(report_a["partitions_owned"]) == 2
    assert report_b["partitions_owned"] == [0, 1, 2, 3]  # took a's two when a ended
    assert_exactly_once(drainer.leased, expected)


@pytest.mark.timeout(60)
def test_a_frozen_relay_loses_its_partitions_and_pushes_nothing_after(
        tansu: Any, topic: str, redis_url: str, redis_client: Any, unique: str) -> None:
    bs, group = tansu.extra["bootstrap"], f"g-{unique}"
    first = job_records("f", 1000)
    produce(bs, topic, first)
    drainer = Drainer(redis_url).start()
    a = relay_proc.start(redis_url, bs, topic, group, relay_id="a", seconds=8, lease_ms=1000)
    wait_for(lambda: len(drainer.leased) >= 1000, 15, "relay a's first pushes")
    os.kill(a.proc.pid, signal.SIGSTOP)  # a GC pause, a VM migration: longer than a's lease
    later = job_records("f", 1000, start=1000)
    produce(bs, topic, later)
    b, source = build(redis_url, bs, topic, group, relay_id="b", lease_ms=1000)
    stop = threading.Event()

    def run_b() -> None:
        while not stop.is_set():
            b.step()

    thread = threading.Thread(target=run_b)
    try:
        thread.start()
        wait_for(lambda: len(set(drainer.leased)) >= 2000, 15, "relay b to take over")
        os.kill(a.proc.pid, signal.SIGCONT)
        last = job_records("f", 500, start=2000)
        produce(bs, topic, last)  # a is awake again while these arrive
        wait_for(lambda: len(set(drainer.leased)) >= 2500, 15, "the last jobs")
        report_a = a.wait_report(20)
    finally:
        stop.set()
        thread.join(10)
        b.stop()
        source.close()
        drainer.stop()
    assert report_a is not None
    assert report_a["partitions_lost"] == PARTITIONS  # noticed at its first extend after waking
    assert b.report.partitions_owned == {0, 1, 2, 3}
    assert_exactly_once(drainer.leased, {key.decode() for key, _, _ in first + later + last})
