"""What one plain job writes to the jobs table: write capacity units per job, before and after issue 33.

Prints one JSON object:
  {"bench": "per_job", "jobs", "rounds",
   "before": {"writes_per_job", "wcu_per_job", "by_op"}, "after": {...}, "saved_wcu_per_job",
   "item_bytes", "item_attribute_bytes", "usd_per_million_before", "usd_per_million_after", "spread"}

A plain job's path through the real adapters, in this process: the relay (``sluice.relay.Relay``
over a fake Kafka source, the real ``RedisQueue`` and ``DynamoJobStore``) pushes N jobs whose ids a
gateway minted with its key, its status writer unthrottled (``status_max_per_s=0``: every job's
write, the cost model's upper bound), then a worker's calls for each: ``lease``, ``grant``,
``write_result`` (a 200-byte result, as docs/cost.md's job), ``ack``. The moto server counts the
writes per item key and bills them as DynamoDB does (``local.motoserver.WriteCounter``: 1 WCU per
started KB of the larger of the item before and after, a refused conditional write too).

``before`` runs the status writer as before issue 33 (every pushed job gets its ``queued`` write:
``relay.status.needs_item`` patched to say yes), ``after`` as it is now (a keyed id is spared), one
after the other in the same run, ``ROUNDS`` times each, alternating; the figures are the medians and
``spread`` the range. The gateway's idempotency record (2 WRU with an Idempotency-Key, Powertools:
put + update) is not on this path and is unchanged. ``item_bytes`` is the finished job's item as
DynamoDB sizes it (attribute names and values), the median over the jobs of the last round.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import boto3

from benchmarks.common import emit, log, redis_server
from sluice.backends.dynamodb import tables
from sluice.backends.dynamodb.jobs import DynamoJobStore
from sluice.backends.redis.engine import RedisQueue
from sluice.core import ids
from sluice.core.bus import EventBus
from sluice.core.config import Settings
from sluice.core.models import JobSpec
from sluice.relay import Relay, RelayConfig
from sluice.relay import status as relay_status
from sluice_dev.fakes import FakeClock, FakeSource
from sluice_dev.local import servers
from sluice_dev.local.motoserver import COUNT_ENV, COUNTS_PATH

JOBS = int(os.environ.get("SLUICE_BENCH_PER_JOB_JOBS", "100"))
ROUNDS = int(os.environ.get("SLUICE_BENCH_PER_JOB_ROUNDS", "3"))
KEY = b"bench-per-job-key-0123456789abcd"
QUEUE = "bench"
RESULT = {"text": "x" * 180}  # ~200 bytes of JSON, docs/cost.md's result
WRU_USD_PER_MILLION = 0.625


def counts(moto_url: str) -> dict[str, Any]:
    with urllib.request.urlopen(moto_url + COUNTS_PATH, timeout=30) as r:
        found: dict[str, Any] = json.loads(r.read())
    return found


def item_bytes(item: dict[str, Any]) -> int:
    """DynamoDB's item size: each attribute's name plus its value (strings in UTF-8, numbers about one
    byte per two digits plus one, booleans one byte)."""
    size = 0
    for name, value in item.items():
        size += len(name.encode())
        (kind, v), = value.items()
        if kind == "S":
            size += len(v.encode())
        elif kind == "N":
            size += 1 + (len(v.lstrip("-").replace(".", "")) + 1) // 2
        elif kind == "BOOL":
            size += 1
        else:
            size += len(json.dumps(v))
    return size


Round = tuple[float, float, dict[str, int], list[int]]  # writes, WCU per job; writes by op; item sizes


def one_round(engine: RedisQueue, store: DynamoJobStore, db: Any, table: str, moto_url: str,
              spare: bool) -> Round:
    relay_status.needs_item = ((lambda job_id: True) if not spare  # type: ignore[assignment]
                               else NEEDS_ITEM)
    now = int(time.time() * 1000)
    source = FakeSource(topic=f"t.{os.urandom(4).hex()}", n_partitions=1)
    job_ids = []
    for _ in range(JOBS):
        spec = JobSpec(job_id=ids.mint(now, QUEUE, KEY), queue=QUEUE, payload={"n": 1}, enqueued_at_ms=now)
        job_ids.append(spec.job_id)
        source.append_spec(0, spec)
    before = counts(moto_url)
    relay = Relay(engine, store, source, None, relay_id=f"bench-{os.urandom(3).hex()}",  # type: ignore[arg-type]
                  clock=FakeClock(), config=RelayConfig(batch=50, commit_s=0.0, status_max_per_s=0,
                                                        status_drain_s=60.0),
                  events=EventBus())
    for _ in range(200):
        relay.step()
        if relay.report.pushed >= JOBS:
            break
    relay.pusher.drain()
    relay.stop()
    done = 0
    while done < JOBS:
        leased = engine.lease(QUEUE, 10, 30_000, worker_id="bench")
        if not leased:
            raise AssertionError(f"only {done} of {JOBS} jobs leased")
        for job in leased:
            token = store.grant(job.job_id, QUEUE, "bench", lease_token=job.lease_token)
            store.write_result(job.job_id, token, RESULT)
            engine.ack(QUEUE, job.job_id, job.lease_token)
            done += 1
    after = counts(moto_url)
    writes = sum(after["by_key"].get(j, 0) - before["by_key"].get(j, 0) for j in job_ids)
    wcu = sum(after["wcu_by_key"].get(j, 0) - before["wcu_by_key"].get(j, 0) for j in job_ids)
    ops = {op: n - before["by_op"].get(op, 0) for op, n in after["by_op"].items()
           if n - before["by_op"].get(op, 0)}
    items = [db.get_item(TableName=table, Key={"job_id": {"S": j}}, ConsistentRead=True)["Item"]
             for j in job_ids[:20]]
    LAST_ITEM.clear()
    LAST_ITEM.update({name: item_bytes({name: value}) for name, value in items[0].items()})
    return writes / JOBS, wcu / JOBS, ops, [item_bytes(item) for item in items]


LAST_ITEM: dict[str, int] = {}  # the last round's first item: bytes per attribute (name + value)


NEEDS_ITEM = relay_status.needs_item


def main() -> None:
    os.environ[COUNT_ENV] = "1"
    os.environ.update(servers.DUMMY_AWS_ENV)  # the moto server takes any credentials
    with tempfile.TemporaryDirectory() as tmp, redis_server() as redis_url:
        moto = servers.start_moto(log_path=Path(tmp) / "moto.log")
        try:
            moto_url = moto.extra["url"]
            settings = Settings(aws_endpoint_url=moto_url, jobs_table="jobs-bench",
                                idempotency_table="idem-bench", results_bucket="results-bench")
            tables.ensure_all(settings)
            store = DynamoJobStore.from_settings(settings)
            engine = RedisQueue.from_url(redis_url)
            engine.set_config(QUEUE, rate_per_s=100_000, burst=100_000)
            db = boto3.client("dynamodb", endpoint_url=moto_url, region_name="us-east-1")
            runs: dict[str, list[Round]] = {"before": [], "after": []}
            for r in range(ROUNDS):
                for name in ("before", "after") if r % 2 == 0 else ("after", "before"):
                    runs[name].append(one_round(engine, store, db, "jobs-bench", moto_url, name == "after"))
                    log(f"bench_per_job: round {r} {name}: {runs[name][-1][:2]}")
        finally:
            relay_status.needs_item = NEEDS_ITEM
            moto.stop()

    def summary(name: str) -> dict[str, Any]:
        rows = runs[name]
        return {"writes_per_job": statistics.median(w for w, _, _, _ in rows),
                "wcu_per_job": statistics.median(u for _, u, _, _ in rows), "by_op": rows[-1][2]}

    before, after = summary("before"), summary("after")
    spread = {name: [min(row[1] for row in rows), max(row[1] for row in rows)] for name, rows in runs.items()}
    emit("per_job", jobs=JOBS, rounds=ROUNDS, before=before, after=after,
         saved_wcu_per_job=round(before["wcu_per_job"] - after["wcu_per_job"], 3),
         item_bytes=statistics.median(runs["after"][-1][3]), item_attribute_bytes=LAST_ITEM,
         usd_per_million_before=round(before["wcu_per_job"] * WRU_USD_PER_MILLION, 3),
         usd_per_million_after=round(after["wcu_per_job"] * WRU_USD_PER_MILLION, 3), spread=spread)


if __name__ == "__main__":
    main()
