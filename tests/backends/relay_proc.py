"""Run a relay as a real OS process, and the helpers the relay's integration tests share.

As a script: ``python relay_proc.py --redis URL --bootstrap HOST:PORT --topic T ...``
runs one relay until ``--seconds`` have passed and prints its report as one JSON line.
``--die-after-pushes N`` SIGKILLs the process right after its Nth push returns, which
is exactly between a Redis push and the Kafka commit that would follow it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


class NullStore:
    """A job store that knows no final jobs and drops status updates.

    The volume and crash tests are about the Kafka -> Redis hand-off; the moto server
    updates about 100 items/s, far too slow to sit behind 10,000 jobs. The store's own
    part (final jobs dropped, status marked queued) has its own test on the real store.
    """

    def final_job_ids(self, job_ids: Iterable[str]) -> set[str]:
        return set()

    def mark_queued(self, jobs: Sequence[tuple[str, str, int]]) -> None:
        return None

    def relay_view(self, job_ids: Iterable[str]) -> tuple[set[str], dict[str, int]]:
        return set(), {}


def settings(bootstrap: str, topic: str, group: str, **extra: Any) -> Any:
    from sluice.core.config import Settings

    return Settings(kafka_bootstrap=bootstrap, kafka_topic=topic, kafka_dead_letter_topic=f"{topic}.dlq",
                    kafka_consumer_group=group, **extra)


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()


def produce(bootstrap: str, topic: str,
            records: Iterable[tuple[bytes | None, bytes | None, int | None]]) -> dict[int, int]:
    """Send (key, value, partition) records with acks=all; returns each partition's end offset.

    From the acks, not ListOffsets: Tansu answers ListOffsets(latest) with a lagging value.
    """
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    futures = []
    try:
        for key, value, partition in records:
            futures.append(producer.send(topic, key=key, value=value, partition=partition))
        producer.flush(30)
    finally:
        producer.close()
    ends: dict[int, int] = {}
    for future in futures:
        meta = future.get(0)
        ends[meta.partition] = max(ends.get(meta.partition, 0), meta.offset + 1)
    return ends


def job_records(prefix: str, n: int, queue: str = "q", partitions: int | None = None,
                start: int = 0) -> list[tuple[bytes, bytes, int | None]]:
    from sluice.core.models import JobSpec

    out: list[tuple[bytes, bytes, int | None]] = []
    for i in range(start, start + n):
        spec = JobSpec(job_id=f"{prefix}-{i}", queue=queue, payload={"i": i})
        out.append((spec.job_id.encode(), spec.model_dump_json().encode(),
                    None if partitions is None else i % partitions))
    return out


def committed(bootstrap: str, topic: str, group: str, partitions: int) -> dict[int, int | None]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        return {p: consumer.committed(TopicPartition(topic, p)) for p in range(partitions)}
    finally:
        consumer.close()


def build(redis_url: str, bootstrap: str, topic: str, group: str, *, store: Any = None,
          dispatcher: Any = None, relay_id: str = "test", **options: Any) -> tuple[Any, Any]:
    """An in-process relay over the real engine and broker: (Relay, KafkaSource)."""
    from sluice.backends.kafka.source import KafkaSource
    from sluice.backends.redis.engine import RedisQueue
    from sluice.core.bus import EventBus
    from sluice.relay import Relay, RelayConfig

    events = options.pop("events", None)
    options = {"poll_ms": 50, "ownership_s": 0.2, **options}
    source = KafkaSource.from_settings(settings(bootstrap, topic, group))
    relay = Relay(RedisQueue.from_url(redis_url), store or NullStore(), source, dispatcher,
                  relay_id=relay_id, config=RelayConfig(**options), events=events or EventBus())
    return relay, source


def ready_ids(redis_client: Any, queue: str = "q") -> list[str]:
    """Every job id in the queue's ready set: a duplicate enqueue could only add a second member
    under a second id, so the test compares this list with the produced ids one for one."""
    from sluice.backends.redis.keys import QueueKeys

    return [str(x) for x in redis_client.zrange(QueueKeys(queue).ready, 0, -1)]


def relayed_offsets(redis_client: Any, topic: str, partitions: int, queue: str = "q") -> dict[int, int]:
    from sluice.backends.redis.keys import QueueKeys

    out = {}
    for p in range(partitions):
        value = redis_client.hget(QueueKeys(queue).relayed(topic, p), "offset")
        out[p] = -1 if value is None else int(value)
    return out


class Drainer:
    """A worker stand-in on a thread: leases and acks everything, remembering each lease.

    Acking deletes the job hash, so a relay that pushed a record a second time after the
    ack would create the job again; the second lease of the same id shows it.
    """

    def __init__(self, redis_url: str, queue: str = "q") -> None:
        import threading

        from sluice.backends.redis.engine import RedisQueue

        self.engine = RedisQueue.from_url(redis_url)
        self.queue = queue
        self.leased: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Drainer:
        self._thread.start()
        return self

    def drain_once(self) -> int:
        jobs = self.engine.lease(self.queue, 500, 60_000, "drainer")
        if jobs:
            self.leased.extend(j.job_id for j in jobs)
            self.engine.ack_many(self.queue, [(j.job_id, j.lease_token) for j in jobs])
        return len(jobs)

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self.drain_once():
                time.sleep(0.02)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        while self.drain_once():
            pass


@dataclass
class RelayProcess:
    proc: subprocess.Popen[str]

    def wait_report(self, timeout: float = 30) -> dict[str, Any] | None:
        out, _ = self.proc.communicate(timeout=timeout)
        lines = [line for line in out.splitlines() if line.startswith("{")]
        return json.loads(lines[-1]) if lines else None

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)


def start(redis_url: str, bootstrap: str, topic: str, group: str, *, seconds: float = 10,
          relay_id: str = "proc", die_after_pushes: int = 0, **options: Any) -> RelayProcess:
    argv = [sys.executable, str(Path(__file__).resolve()), "--redis", redis_url, "--bootstrap", bootstrap,
            "--topic", topic, "--group", group, "--seconds", str(seconds), "--relay-id", relay_id,
            "--die-after-pushes", str(die_after_pushes)]
    for name, value in options.items():
        argv += [f"--{name.replace('_', '-')}", str(value)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "shared")])}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=None, text=True, env=env,
                            start_new_session=True)
    return RelayProcess(proc)


def main(argv: list[str] | None = None) -> None:
    from sluice.core import bus as ev

    parser = argparse.ArgumentParser()
    parser.add_argument("--redis", required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--relay-id", default="proc")
    parser.add_argument("--die-after-pushes", type=int, default=0)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--lease-ms", type=int, default=15_000)
    parser.add_argument("--max-partitions", type=int, default=1000)
    args = parser.parse_args(argv)

    pushes = 0

    def die_between_push_and_commit(e: ev.Pushed) -> None:
        nonlocal pushes
        if e.outcome == "ok":
            pushes += 1
            if pushes == args.die_after_pushes:
                os.kill(os.getpid(), signal.SIGKILL)

    bus = ev.EventBus()
    if args.die_after_pushes:
        bus.subscribe(die_between_push_and_commit, ev.Pushed)
    relay, source = build(args.redis, args.bootstrap, args.topic, args.group, relay_id=args.relay_id,
                          batch=args.batch, lease_ms=args.lease_ms, max_partitions=args.max_partitions,
                          events=bus)
    report = relay.run_until(relay.clock.now_ms() + int(args.seconds * 1000))
    source.close()
    print(json.dumps({"pushed": report.pushed, "skipped": report.skipped, "stale_stops": report.stale_stops,
                      "partitions_owned": sorted(report.partitions_owned), "errors": report.errors,
                      "partitions_lost": report.partitions_lost}), flush=True)


if __name__ == "__main__":
    main()
