"""What a keyed enqueue writes to the idempotency table: WRU per request, before and after issue 33.

Prints one JSON object:
  {"bench": "keyed", "requests", "rounds",
   "before": {"wru_first", "wru_repeat", "wru_batch_100", "ms_first"}, "after": {...},
   "saved_wru_per_job", "usd_per_million_before", "usd_per_million_after", "spread"}

Both sides run the gateway's use case (``sluice.gateway.api.Api``, a fake Kafka log that keeps what
it is given) against the moto server, which bills each write by the item's size as DynamoDB does
(``local.motoserver.WriteCounter``: 1 WRU per started KB of the larger of the item before and after).

- ``before``: the gateway before issue 33, Powertools' idempotency utility with its DynamoDB layer
  wrapped around an unkeyed enqueue, configured as ``sluice.gateway.http.idempotency`` configured it
  (``git show 1f3736c:shared/sluice/gateway/http/idempotency.py``): an "in progress" put, then a
  "completed" update holding the answer.
- ``after``: the code as it is (``sluice.gateway.keyed``, ``DynamoKeyStore``): one conditional put.

``wru_first``: a first request with a new key (one job); ``wru_repeat``: the same request again once
its first's invocation has ended (a client's retry after a lost answer); ``wru_batch_100``: a first
batch of 100 jobs, per request. ``ms_first``: the median wall time of a first request, in this
process, moto's HTTP round trips included. ``ROUNDS`` rounds, the two sides alternating; the medians,
and ``spread`` the range of ``wru_first``.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_per_job import counts
from benchmarks.common import emit, log
from sluice.backends.dynamodb import tables
from sluice.backends.dynamodb.client import dynamodb_client
from sluice.backends.dynamodb.idempotency import DynamoKeyStore
from sluice.core.bus import EventBus
from sluice.core.config import Settings
from sluice.core.idempotency import KEY_PREFIX
from sluice.core.wire import BatchRequest, EnqueueRequest
from sluice.gateway.api import Api, Backends, IdMinting
from sluice_dev.fakes import FakeLog, FakeStore
from sluice_dev.local import servers
from sluice_dev.local.motoserver import COUNT_ENV

REQUESTS = int(os.environ.get("SLUICE_BENCH_KEYED_REQUESTS", "50"))
ROUNDS = int(os.environ.get("SLUICE_BENCH_KEYED_ROUNDS", "3"))
KEY = b"bench-keyed-job-id-key-0123456789"
QUEUE = "bench"
PAYLOAD = {"text": "x" * 1000}  # docs/cost.md's 1 KB job
WRU_USD_PER_MILLION = 0.625
ENDED_MS = 60_000  # how long after its first a repeat comes: its first's invocation has ended


class Clock:
    def __init__(self) -> None:
        self.offset_ms = 0

    def __call__(self) -> int:
        return int(time.time() * 1000) + self.offset_ms


Send = Callable[[str, Any], Any]  # (key, request) -> the answer


def after_side(settings: Settings, clock: Clock) -> tuple[Send, Send]:
    api = Api(Backends(FakeLog(), FakeStore(), None, events=EventBus()), IdMinting(KEY),  # type: ignore[arg-type]
              idempotency=DynamoKeyStore.from_settings(settings), clock=clock)

    def one(key: str, request: Any) -> Any:
        return api.enqueue(QUEUE, request, idempotency_key=key, remaining_ms=lambda: 25_000)

    def batch(key: str, request: Any) -> Any:
        return api.enqueue_batch(QUEUE, request, idempotency_key=key, remaining_ms=lambda: 25_000)

    return one, batch


def before_side(settings: Settings, clock: Clock) -> tuple[Send, Send]:
    """Powertools' idempotent function around the unkeyed enqueue, as the gateway of before ran it."""
    from aws_lambda_powertools.utilities.idempotency import (
        DynamoDBPersistenceLayer,
        IdempotencyConfig,
        idempotent_function,
    )

    plain = Api(Backends(FakeLog(), FakeStore(), None, events=EventBus()), IdMinting(KEY),  # type: ignore[arg-type]
                clock=clock)
    layer = DynamoDBPersistenceLayer(table_name=settings.idempotency_table,
                                     boto3_client=dynamodb_client(settings))

    class Context:
        def get_remaining_time_in_millis(self) -> int:
            return 25_000

    def run(key: str, op: str, request: Any, accept: Callable[[], Any]) -> Any:
        config = IdempotencyConfig(event_key_jmespath="key", payload_validation_jmespath="fingerprint",
                                   raise_on_no_idempotency_key=True, expires_after_seconds=24 * 3600,
                                   hash_function="sha256", lambda_context=Context())  # type: ignore[arg-type]
        guarded = idempotent_function(data_keyword_argument="request", persistence_store=layer,
                                      config=config, key_prefix=KEY_PREFIX)(
            lambda request: accept().body.model_dump(mode="json"))
        return guarded(request={"key": key, "fingerprint": {"op": op, "queue": QUEUE,
                                                            "request": request.model_dump(mode="json")}})

    def one(key: str, request: Any) -> Any:
        return run(key, "enqueue", request, lambda: plain.enqueue(QUEUE, request))

    def batch(key: str, request: Any) -> Any:
        return run(key, "enqueue_batch", request, lambda: plain.enqueue_batch(QUEUE, request))

    return one, batch


def wru(moto_url: str, before: dict[str, Any]) -> int:
    now = counts(moto_url)["wcu_by_key"]
    return sum(n - before["wcu_by_key"].get(k, 0) for k, n in now.items() if k.startswith(KEY_PREFIX))


def one_round(side: tuple[Send, Send], clock: Clock, moto_url: str, tag: str) -> dict[str, float]:
    one, batch = side
    single = EnqueueRequest(payload=PAYLOAD)
    keys = [f"arn:aws:iam::123456789012:role/web|{tag}-{os.urandom(6).hex()}" for _ in range(REQUESTS)]
    start = counts(moto_url)
    took = []
    for key in keys:
        t0 = time.perf_counter()
        one(key, single)
        took.append((time.perf_counter() - t0) * 1000)
    first = wru(moto_url, start) / REQUESTS
    clock.offset_ms += ENDED_MS
    start = counts(moto_url)
    for key in keys:
        one(key, single)
    repeat = wru(moto_url, start) / REQUESTS
    jobs = BatchRequest(jobs=[EnqueueRequest(payload={"n": i}) for i in range(100)])
    start = counts(moto_url)
    for i in range(5):
        batch(f"arn:aws:iam::123456789012:role/web|{tag}-batch-{i}-{os.urandom(4).hex()}", jobs)
    return {"wru_first": first, "wru_repeat": repeat, "wru_batch_100": wru(moto_url, start) / 5,
            "ms_first": statistics.median(took)}


def main() -> None:
    os.environ[COUNT_ENV] = "1"
    os.environ.update(servers.DUMMY_AWS_ENV)  # the moto server takes any credentials
    with tempfile.TemporaryDirectory() as tmp:
        moto = servers.start_moto(log_path=Path(tmp) / "moto.log")
        try:
            moto_url = moto.extra["url"]
            settings = Settings(aws_endpoint_url=moto_url, jobs_table="jobs-keyed", aws_region="us-east-1",
                                idempotency_table="idem-keyed", results_bucket="results-keyed")
            tables.ensure_all(settings)
            clock = Clock()
            sides = {"before": before_side(settings, clock), "after": after_side(settings, clock)}
            runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
            for r in range(ROUNDS):
                for name in ("before", "after") if r % 2 == 0 else ("after", "before"):
                    runs[name].append(one_round(sides[name], clock, moto_url, f"{name}{r}"))
                    log(f"bench_keyed: round {r} {name}: {runs[name][-1]}")
        finally:
            moto.stop()

    def summary(name: str) -> dict[str, float]:
        rows = runs[name]
        return {field: round(statistics.median(row[field] for row in rows), 3) for field in rows[0]}

    before, after = summary("before"), summary("after")
    emit("keyed", requests=REQUESTS, rounds=ROUNDS, before=before, after=after,
         saved_wru_per_job=round(before["wru_first"] - after["wru_first"], 3),
         usd_per_million_before=round(before["wru_first"] * WRU_USD_PER_MILLION, 3),
         usd_per_million_after=round(after["wru_first"] * WRU_USD_PER_MILLION, 3),
         spread={name: [min(r["wru_first"] for r in rows), max(r["wru_first"] for r in rows)]
                 for name, rows in runs.items()})


if __name__ == "__main__":
    main()
