"""The enqueue gateway: acknowledged enqueues through the Lambda handler vs raw kafka-python sends.

Prints one JSON object:
  {"bench": "gateway", "jobs_per_s", "p50_ms", "p99_ms", "raw_producer_per_s", "ratio",
   "raw_p50_ms", "p50_ratio", "keyed_jobs_per_s", ...}

It starts its own Tansu broker (in-memory), moto server and redis-server
(sluice_dev.local.servers), then, in alternating rounds on the same broker and topic:

- raw (``raw_producer_per_s``): one kafka-python producer (acks=all, idempotent, linger 0)
  sends one record of the same size at a time and waits for its acknowledgement;
- gateway (``jobs_per_s``, ``p50_ms``, ``p99_ms``; ``ratio`` = jobs_per_s / raw): API Gateway
  proxy events (tests/events/apigw_enqueue.json with its 19 headers) through ``Gateway`` over
  ``build_api``, the real adapters, one request at a time, each answered 202 only after
  Kafka acknowledged it. The happy path writes nothing else (job ids verify themselves,
  docs/api.md), so this is the whole cost of an enqueue: body guard, the router
  with its validation, the use case and the producer;
- throttled (``throttled_jobs_per_s``, ``throttled_p50_ms``, ``throttle_p50_ms``: the difference of
  the medians): the same gateway with a per-caller limit (issue 27, item 5) too high to refuse
  anything, so each request also runs ``throttle.lua`` on the local redis-server: the cost of the
  limit on every request;
- keyed (``keyed_jobs_per_s``, one round): with an Idempotency-Key (its record, one write on
  DynamoDB, the moto server: one more write per request, two before issue 33).

Within a round the sides take turns in blocks of BLOCK requests, so a burst of load from
elsewhere on this shared machine hits every side alike; a side's rate in a round is its
requests over its own time. Throughputs are the best of ROUNDS for every side; latency
percentiles pool every request of a side.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pydantic import SecretStr

from benchmarks.common import emit, log
from sluice.backends.kafka.auth import client_config
from sluice.backends.kafka.producer import ensure_topics
from sluice.core.config import Settings
from sluice.core.models import JobSpec
from sluice.entry.gateway import Gateway, build_api
from sluice.gateway.api import new_job_id
from sluice_dev.local import servers

PER_ROUND = 500
BLOCK = 50
KEYED = 150
ROUNDS = 4
EVENT = Path(__file__).resolve().parent.parent / "tests" / "events" / "apigw_enqueue.json"


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
    """Seconds to send ``batch`` through ``gateway``, one request at a time."""
    ctx = Context()
    start = time.perf_counter()
    for event in batch:
        t0 = time.perf_counter()
        response = gateway(event, ctx)
        if response["statusCode"] != 202:
            raise RuntimeError(f"gateway answered {response['statusCode']}: {response['body']}")
        if latencies is not None:
            latencies.append((time.perf_counter() - t0) * 1000)
    return time.perf_counter() - start


def raw(producer: Any, topic: str, n: int, latencies: list[float] | None = None) -> float:
    """Seconds to send ``n`` records of the gateway's size, each waiting for its acknowledgement."""
    value = JobSpec(job_id=new_job_id(0), queue="emails", priority=5, payload={
        "to": "user0@example.com", "template": "welcome", "n": 0}).model_dump_json().encode()
    start = time.perf_counter()
    for _ in range(n):
        t0 = time.perf_counter()
        producer.send(topic, key=new_job_id(int(time.time() * 1000)).encode(), value=value).get(timeout=10)
        if latencies is not None:
            latencies.append((time.perf_counter() - t0) * 1000)
    return time.perf_counter() - start


def main() -> None:
    from kafka import KafkaProducer

    workdir = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
    tansu = servers.start_tansu(log_path=workdir / "tansu.log")
    moto = servers.start_moto(log_path=workdir / "moto.log")
    redis = servers.start_redis(workdir=workdir / "redis")
    try:
        os.environ.update(servers.DUMMY_AWS_ENV)
        from sluice.backends.dynamodb.tables import ensure_all

        settings = Settings(kafka_bootstrap=tansu.extra["bootstrap"], kafka_topic="bench.jobs",
                            aws_endpoint_url=moto.extra["url"], redis_url=redis.extra["url"],
                            job_id_secret=SecretStr(os.urandom(24).hex()))
        ensure_topics(settings)
        ensure_all(settings)
        api = build_api(settings)
        gateway = Gateway(api)
        limited = Gateway(build_api(settings.model_copy(update={
            "caller_rate_per_s": 1_000_000.0, "caller_burst": 1_000_000, "caller_bytes_per_s": 1 << 39,
            "caller_byte_burst": 1 << 39})))
        assert limited.api.throttle is not None
        producer = KafkaProducer(**client_config(settings), acks="all", enable_idempotence=True, linger_ms=0)

        through(gateway, events(50))  # warm up: connections, producer metadata, imports
        through(limited, events(50))
        raw(producer, settings.kafka_topic, 50)

        sides = ("raw", "gateway", "throttled")
        rates: dict[str, list[float]] = {side: [] for side in sides}
        latencies: dict[str, list[float]] = {side: [] for side in sides}
        for round_ in range(ROUNDS):
            spent = dict.fromkeys(sides, 0.0)
            for _ in range(PER_ROUND // BLOCK):  # small interleaved blocks: each side sees the same machine
                spent["raw"] += raw(producer, settings.kafka_topic, BLOCK, latencies["raw"])
                spent["gateway"] += through(gateway, events(BLOCK), latencies["gateway"])
                spent["throttled"] += through(limited, events(BLOCK), latencies["throttled"])
            for side in sides:
                rates[side].append(PER_ROUND // BLOCK * BLOCK / spent[side])
            last = {side: values[-1] for side, values in rates.items()}
            log(f"round {round_}: raw {last['raw']:.0f}/s, gateway {last['gateway']:.0f}/s "
                f"(ratio {last['gateway'] / last['raw']:.2f}), throttled {last['throttled']:.0f}/s")
        keyed_rate = KEYED / through(gateway, events(KEYED, keyed=True))
        producer.close()

        best = {side: max(values) for side, values in rates.items()}
        emit("gateway", jobs_per_s=round(best["gateway"], 1),
             p50_ms=round(percentile(latencies["gateway"], 0.5), 3),
             p99_ms=round(percentile(latencies["gateway"], 0.99), 3),
             raw_producer_per_s=round(best["raw"], 1), ratio=round(best["gateway"] / best["raw"], 3),
             raw_p50_ms=round(percentile(latencies["raw"], 0.5), 3),
             raw_p99_ms=round(percentile(latencies["raw"], 0.99), 3),
             # Medians shrug off the bursts of load that make best-of-rounds noisy here.
             p50_ratio=round(percentile(latencies["raw"], 0.5) / percentile(latencies["gateway"], 0.5), 3),
             per_round_ratios=[round(g / r, 3) for g, r in zip(rates["gateway"], rates["raw"], strict=True)],
             throttled_jobs_per_s=round(best["throttled"], 1),
             throttled_p50_ms=round(percentile(latencies["throttled"], 0.5), 3),
             throttle_p50_ms=round(percentile(latencies["throttled"], 0.5)
                                   - percentile(latencies["gateway"], 0.5), 3),
             keyed_jobs_per_s=round(keyed_rate, 1), requests_per_round=PER_ROUND, rounds=ROUNDS,
             target_ratio=0.5)
    finally:
        for server in (tansu, moto, redis):
            server.stop()


if __name__ == "__main__":
    main()
