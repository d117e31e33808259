"""The enqueue gateway: acknowledged enqueues through the Lambda handler vs raw kafka-python sends.

Prints one JSON object:
  {"bench": "gateway", "jobs_per_s", "p50_ms", "p99_ms", "raw_producer_per_s", "ratio",
   "own_jobs_per_s", "own_ratio", "own_p50_ms", "status_write_p50_ms", "keyed_jobs_per_s", ...}

It starts its own Tansu broker (in-memory), moto server and redis-server
(sluice.local.servers), then, in alternating rounds on the same broker and topic:

- raw: one kafka-python producer (acks=all, idempotent, linger 0) sends one record of the
  same size at a time and waits for its acknowledgement;
- gateway (``jobs_per_s``, ``p50_ms``, ``p99_ms``): API Gateway proxy events through
  ``Gateway`` over the real adapters, one request at a time, each answered 202 only after
  Kafka acknowledged it and the status item was written to DynamoDB (moto server);
- own: the same handler with a null job store, isolating the gateway's own overhead
  (body guard, validation, Powertools routing, Kafka) from the status write, whose cost
  locally is the moto server's (``status_write_p50_ms``: one record_accepted alone);
- keyed: with an Idempotency-Key (Powertools idempotency on DynamoDB: two more writes).

Throughputs are the best of ROUNDS (this machine is noisy); latency percentiles pool
every gateway request.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import emit, log
from sluice.api import Api, new_job_id
from sluice.config import Settings
from sluice.http.app import Gateway, build_api
from sluice.kafka.auth import client_config
from sluice.kafka.producer import ensure_topics
from sluice.local import servers
from sluice.models import JobSpec

PER_ROUND = 400
KEYED = 150
ROUNDS = 3
EVENT = Path(__file__).resolve().parent.parent / "tests" / "events" / "apigw_enqueue.json"


class NullStore:
    def record_accepted(self, spec: JobSpec) -> None:
        return None


class Context:
    function_name = "sluice-gateway"
    aws_request_id = "bench"

    def get_remaining_time_in_millis(self) -> int:
        return 25_000


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def events(n: int, keyed: bool = False) -> list[dict[str, Any]]:
    template = json.loads(EVENT.read_text())
    out = []
    for i in range(n):
        event = dict(template)
        headers = {k: v for k, v in template["headers"].items() if k != "Idempotency-Key"}
        if keyed:
            headers["Idempotency-Key"] = f"bench-{time.time_ns()}-{i}"
        event["headers"] = headers
        event["multiValueHeaders"] = {k: [v] for k, v in headers.items()}
        event["body"] = json.dumps({"payload": {"to": f"user{i}@example.com", "template": "welcome", "n": i},
                                    "priority": 5})
        out.append(event)
    return out


def through(gateway: Gateway, batch: list[dict[str, Any]], latencies: list[float] | None = None) -> float:
    ctx = Context()
    start = time.perf_counter()
    for event in batch:
        t0 = time.perf_counter()
        response = gateway(event, ctx)
        if response["statusCode"] != 202:
            raise RuntimeError(f"gateway answered {response['statusCode']}: {response['body']}")
        if latencies is not None:
            latencies.append((time.perf_counter() - t0) * 1000)
    return len(batch) / (time.perf_counter() - start)


def raw(producer: Any, topic: str, n: int) -> float:
    value = JobSpec(job_id=new_job_id(0), queue="emails", priority=5, payload={
        "to": "user0@example.com", "template": "welcome", "n": 0}).model_dump_json().encode()
    start = time.perf_counter()
    for _ in range(n):
        producer.send(topic, key=new_job_id(int(time.time() * 1000)).encode(), value=value).get(timeout=10)
    return n / (time.perf_counter() - start)


def main() -> None:
    from kafka import KafkaProducer

    workdir = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
    tansu = servers.start_tansu(log_path=workdir / "tansu.log")
    moto = servers.start_moto(log_path=workdir / "moto.log")
    redis = servers.start_redis(workdir=workdir / "redis")
    try:
        import os

        os.environ.update(servers.DUMMY_AWS_ENV)
        from sluice.store.tables import ensure_all

        settings = Settings(kafka_bootstrap=tansu.extra["bootstrap"], kafka_topic="bench.jobs",
                            aws_endpoint_url=moto.extra["url"], redis_url=redis.extra["url"])
        ensure_topics(settings)
        ensure_all(settings)
        api = build_api(settings)
        full = Gateway(api)
        own = Gateway(Api(api.log, NullStore(), api.queue))  # type: ignore[arg-type]
        producer = KafkaProducer(**client_config(settings), acks="all", enable_idempotence=True, linger_ms=0)

        through(full, events(50))  # warm up: connections, producer metadata, imports
        through(own, events(50))
        raw(producer, settings.kafka_topic, 50)
        store_ms = []
        for i in range(100):
            spec = JobSpec(job_id=new_job_id(i), queue="emails", payload=None)
            t0 = time.perf_counter()
            api.store.record_accepted(spec)
            store_ms.append((time.perf_counter() - t0) * 1000)

        raw_rates, full_rates, own_rates, latencies, own_latencies = [], [], [], [], []
        for round_ in range(ROUNDS):
            raw_rates.append(raw(producer, settings.kafka_topic, PER_ROUND))
            full_rates.append(through(full, events(PER_ROUND), latencies))
            own_rates.append(through(own, events(PER_ROUND), own_latencies))
            log(f"round {round_}: raw {raw_rates[-1]:.0f}/s, gateway {full_rates[-1]:.0f}/s, "
                f"own {own_rates[-1]:.0f}/s")
        keyed_rate = through(full, events(KEYED, keyed=True))
        producer.close()

        raw_best, full_best, own_best = max(raw_rates), max(full_rates), max(own_rates)
        emit("gateway", jobs_per_s=round(full_best, 1), p50_ms=round(percentile(latencies, 0.5), 3),
             p99_ms=round(percentile(latencies, 0.99), 3), raw_producer_per_s=round(raw_best, 1),
             ratio=round(full_best / raw_best, 3), own_jobs_per_s=round(own_best, 1),
             own_ratio=round(own_best / raw_best, 3), own_p50_ms=round(percentile(own_latencies, 0.5), 3),
             own_p99_ms=round(percentile(own_latencies, 0.99), 3),
             status_write_p50_ms=round(statistics.median(store_ms), 3),
             keyed_jobs_per_s=round(keyed_rate, 1), requests_per_round=PER_ROUND, rounds=ROUNDS,
             target_ratio=0.5)
    finally:
        for server in (tansu, moto, redis):
            server.stop()


if __name__ == "__main__":
    main()
