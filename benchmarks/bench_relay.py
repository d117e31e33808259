"""The relay: Kafka -> Redis throughput against a raw kafka-python consume of the same records.

Prints one JSON object:
  {"bench": "relay", "jobs": N, "partitions": P, "jobs_per_s", "raw_consume_per_s",
   "ratio", "redis_cpu_us_per_job", "crc32c", "status_max_waiting", "status_waited_s", "round_ratios"}

It starts its own Tansu broker and redis-server (sluice.local.servers), produces N
job records over P partitions, then alternately consumes them raw (assign + poll,
nothing else) and relays them (decode, ownership, push.lua, Kafka commit) from the
beginning, each under a fresh consumer group and into a flushed Redis, and reports
the median of ROUNDS rounds by ratio, each round a raw run and a relay run measured back to
back, because this machine is noisy. The relay's job store is a
null store here: this measures the Kafka -> Redis hand-off; the store's own costs
(BatchGetItem for final jobs, status updates off the push path) are in bench_store.
Redis CPU is the server's own accounting (INFO cpu) over the relay's run, per job. Both
sides check record CRCs with the ``crc32c`` C extension (a dependency; ``crc32c`` says
kafka-python uses it). ``status_max_waiting`` is the most pushed jobs the status writer
(``mark_queued``, off the push path) ever had waiting, and ``status_waited_s`` how long the
relay waited for it; with the null store, that is the writer thread's own cost.
"""

from __future__ import annotations

import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from benchmarks.common import emit, log, redis_cpu_s
from sluice.config import Settings
from sluice.kafka.source import KafkaSource
from sluice.local.servers import start_redis, start_tansu
from sluice.models import JobSpec
from sluice.redis.engine import RedisQueue
from sluice.redis.keys import QueueKeys
from sluice.relay import Relay, RelayConfig
from sluice.relay.status import Backlog

JOBS = 50_000
PARTITIONS = 4
ROUNDS = 3
TOPIC = "bench.jobs"


class NullStore:
    def final_job_ids(self, job_ids: Any) -> set[str]:
        return set()

    def relay_view(self, job_ids: Any) -> tuple[set[str], dict[str, int]]:
        return set(), {}

    def mark_queued(self, jobs: Any) -> None:
        return None


def produce(bootstrap: str) -> None:
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=10, batch_size=256 * 1024)
    for i in range(JOBS):
        spec = JobSpec(job_id=f"bench-{i}", queue="bench", payload={"n": i, "kind": "no-op"})
        producer.send(TOPIC, key=spec.job_id.encode(), value=spec.model_dump_json().encode())
    producer.flush(60)
    producer.close()


def raw_consume(bootstrap: str) -> float:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest", max_poll_records=500)
    consumer.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
    seen, start = 0, time.perf_counter()
    while seen < JOBS:
        for records in consumer.poll(timeout_ms=200, max_records=500).values():
            seen += len(records)
    elapsed = time.perf_counter() - start
    consumer.close()
    return JOBS / elapsed


def relay_run(bootstrap: str, redis_url: str, group: str) -> tuple[float, float, Backlog]:
    client = redis.Redis.from_url(redis_url)
    client.flushall()
    source = KafkaSource.from_settings(Settings(kafka_bootstrap=bootstrap, kafka_topic=TOPIC,
                                                kafka_consumer_group=group))
    relay = Relay(RedisQueue.from_url(redis_url), NullStore(), source, None,  # type: ignore[arg-type]
                  relay_id="bench", config=RelayConfig(poll_ms=50))
    cpu0, start = redis_cpu_s(redis_url), time.perf_counter()
    while relay.report.pushed < JOBS:
        relay.step()
    relay.stop()
    elapsed = time.perf_counter() - start
    cpu = redis_cpu_s(redis_url) - cpu0
    assert client.zcard(QueueKeys("bench").ready) == JOBS
    source.close()
    client.close()
    return JOBS / elapsed, cpu * 1e6 / JOBS, relay.pusher.status.backlog


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stop the servers on a timeout too
    with tempfile.TemporaryDirectory() as tmp:
        tansu = start_tansu(log_path=Path(tmp) / "tansu.log")
        redis_server = start_redis(workdir=Path(tmp) / "redis")
        try:
            bootstrap, url = tansu.extra["bootstrap"], redis_server.extra["url"]
            produce(bootstrap)
            rounds = []
            for round_ in range(ROUNDS):
                raw = raw_consume(bootstrap)
                rate, us, backlog = relay_run(bootstrap, url, f"bench-{round_}")
                rounds.append((rate / raw, rate, raw, us, backlog.max_waiting, backlog.waited_s))
                log(f"round {round_}: raw {raw:.0f}/s, relay {rate:.0f}/s ({rate / raw:.2f}), "
                    f"{us:.1f} us Redis CPU/job, status writer at most {backlog.max_waiting} jobs behind")
        finally:
            redis_server.stop()
            tansu.stop()
    ratio, rate, raw, us, waiting, waited = sorted(rounds)[len(rounds) // 2]  # the median round: a pair
    emit("relay", jobs=JOBS, partitions=PARTITIONS, jobs_per_s=round(rate), raw_consume_per_s=round(raw),
         ratio=round(ratio, 3), redis_cpu_us_per_job=round(us, 1), crc32c=crc32c_in_use(),
         status_max_waiting=waiting, status_waited_s=round(waited, 3),
         round_ratios=[round(r[0], 3) for r in rounds])


def crc32c_in_use() -> bool:
    from kafka.record import util

    return util.crc32c_c is not None and util.calc_crc32c.__defaults__ == (util.crc32c_c,)


if __name__ == "__main__":
    main()
