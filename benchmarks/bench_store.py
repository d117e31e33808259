"""The fenced job store on the moto server: what the token authority and fencing cost.

Prints, one JSON object per line:
  {"bench": "store", "grant_per_s", "fenced_write_per_s", "plain_put_per_s", "unfenced_update_per_s",
   "*_p50_ms", "fenced_vs_plain", "item_bytes", "wcu_grant", "wcu_fenced_write", "wcu_plain_put",
   "token_authority_wcu_per_attempt", "token_authority_usd_per_million_attempts"}
  {"bench": "store_job_path", "jobs_per_s", "p50_ms", "writes_per_job", "grant_share_of_time",
   "wcu_per_job", "token_authority_wcu_per_job"}
  {"bench": "store_fenced_table", "fenced_put_per_s", "plain_put_per_s", "fenced_vs_plain",
   "wcu_fenced_put", "wcu_plain_put"}

All operations run in one process, one client, one after another, against the same
moto server, so their rates compare with each other (absolute rates are moto's, not
DynamoDB's: moto is a Python server and far slower per request than DynamoDB).

Write units are computed, not measured (moto does not meter): DynamoDB charges an
UpdateItem by the larger of the item's size before and after, 1 WCU per started KB;
a transactional write item (Put/Update/Delete/ConditionCheck in TransactWriteItems)
costs 2 WCU per started KB. On-demand: USD 0.625 per million write request units
(us-east-1, since the November 2024 price cut).
"""

from __future__ import annotations

import logging
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import boto3

from benchmarks.common import emit, log
from sluice.backends.dynamodb import tables
from sluice.backends.dynamodb.jobs import DynamoJobStore
from sluice.backends.dynamodb.results import S3ResultSink
from sluice.core.bus import EventBus
from sluice_dev.local.servers import DUMMY_AWS_ENV, start_moto

N = 400
N_TRANSACTIONS = 150  # moto's transactions are slow; fewer keep the run short
USD_PER_MILLION_WRU = 0.625
RESULT = {"thumbnail": "s3://bucket/thumbs/abc123.png", "width": 320, "height": 200}


def timed(n: int, op: Callable[[int], Any]) -> tuple[float, float]:
    """(operations per second, median latency ms) of ``op(i)`` for i in 0..n-1."""
    latencies = []
    start = time.perf_counter()
    for i in range(n):
        t = time.perf_counter()
        op(i)
        latencies.append(time.perf_counter() - t)
    elapsed = time.perf_counter() - start
    return n / elapsed, statistics.median(latencies) * 1000


def item_bytes(item: dict[str, Any]) -> int:
    """DynamoDB's item size: attribute name lengths plus value sizes (numbers ~ digits/2 + 1)."""
    size = 0
    for name, value in item.items():
        size += len(name.encode())
        (kind, raw), = value.items()
        if kind == "S":
            size += len(str(raw).encode())
        elif kind == "N":
            size += math.ceil(len(str(raw).lstrip("-").replace(".", "")) / 2) + 1
        else:
            size += 1
    return size


def wcu(size: int, transactional: bool = False) -> int:
    return max(1, math.ceil(size / 1024)) * (2 if transactional else 1)


def main() -> None:
    logging.getLogger("sluice.backends.dynamodb").setLevel(logging.ERROR)  # unfenced writes warn
    server = start_moto()
    try:
        url = server.extra["url"]
        common: dict[str, Any] = {"region_name": "us-east-1", "endpoint_url": url,
                                  "aws_access_key_id": DUMMY_AWS_ENV["AWS_ACCESS_KEY_ID"],
                                  "aws_secret_access_key": DUMMY_AWS_ENV["AWS_SECRET_ACCESS_KEY"]}
        db = boto3.client("dynamodb", **common)
        s3 = boto3.client("s3", **common)
        tables.create_jobs_table(db, "bench-jobs")
        tables.create_results_bucket(s3, "bench-results")
        db.create_table(TableName="bench-side", KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                        BillingMode="PAY_PER_REQUEST")
        store = DynamoJobStore(db, "bench-jobs", results=S3ResultSink(s3, "bench-results"))
        for i in range(20):  # warm up connections and moto's code paths
            store.write_result(f"warm-{i}", store.grant(f"warm-{i}", "bench", "w"), RESULT)

        tokens: dict[int, int] = {}
        log(f"store: {N} grants, {N} fenced writes, {N} plain puts, {N} unfenced updates")
        grant_rate, grant_ms = timed(N, lambda i: tokens.__setitem__(i, store.grant(f"j{i}", "bench", "w")))
        leased_size = item_bytes(store.items.read("j0") or {})
        write_rate, write_ms = timed(N, lambda i: store.write_result(f"j{i}", tokens[i], RESULT))
        done_size = item_bytes(store.items.read("j0") or {})
        plain_item = dict(store.items.read("j0") or {})

        def plain_put(i: int) -> None:
            db.put_item(TableName="bench-jobs", Item={**plain_item, "job_id": {"S": f"p{i}"}})

        plain_rate, plain_ms = timed(N, plain_put)
        unfenced_rate, unfenced_ms = timed(N, lambda i: store.write_result_unfenced(f"p{i}", 1, RESULT))
        emit("store", n=N, grant_per_s=round(grant_rate), fenced_write_per_s=round(write_rate),
             plain_put_per_s=round(plain_rate), unfenced_update_per_s=round(unfenced_rate),
             grant_p50_ms=round(grant_ms, 2), fenced_write_p50_ms=round(write_ms, 2),
             plain_put_p50_ms=round(plain_ms, 2), unfenced_update_p50_ms=round(unfenced_ms, 2),
             fenced_vs_plain=round(write_rate / plain_rate, 2),
             item_bytes={"leased": leased_size, "succeeded": done_size},
             wcu_grant=wcu(leased_size), wcu_fenced_write=wcu(max(leased_size, done_size)),
             wcu_plain_put=wcu(done_size), token_authority_wcu_per_attempt=wcu(leased_size),
             token_authority_usd_per_million_attempts=wcu(leased_size) * USD_PER_MILLION_WRU)

        # One job's whole life in the store (first attempt, small result): the three writes
        # the pipeline makes (the gateway writes none), and the token authority's share.
        def job_path(i: int) -> None:
            job_id = f"path-{i}"
            store.mark_queued([(job_id, "bench", 0)])  # the gateway writes no item (docs/api.md)
            token = store.grant(job_id, "bench", "w")
            store.write_result(job_id, token, RESULT)

        path_rate, path_ms = timed(N // 2, job_path)
        emit("store_job_path", n=N // 2, jobs_per_s=round(path_rate), p50_ms=round(path_ms, 2),
             writes_per_job=3, grant_share_of_writes=round(1 / 3, 2),
             grant_share_of_time=round(grant_ms / path_ms, 2),
             wcu_per_job=wcu(leased_size) * 2 + wcu(max(leased_size, done_size)),
             token_authority_wcu_per_job=wcu(leased_size))

        holder = store.grant("side-job", "bench", "w")
        fenced = store.fenced_table("bench-side", "side-job", holder, events=EventBus())
        side_item = {"pk": "x", "amount": 10, "note": "ledger entry"}
        fenced_rate, _ = timed(N_TRANSACTIONS, lambda i: fenced.put_item({**side_item, "pk": f"f{i}"}))
        plain_side_rate, _ = timed(N_TRANSACTIONS, lambda i: db.put_item(TableName="bench-side", Item={
            "pk": {"S": f"s{i}"}, "amount": {"N": "10"}, "note": {"S": "ledger entry"}}))
        jobs_item = item_bytes(store.items.read("side-job") or {})
        emit("store_fenced_table", n=N_TRANSACTIONS, fenced_put_per_s=round(fenced_rate),
             plain_put_per_s=round(plain_side_rate), fenced_vs_plain=round(fenced_rate / plain_side_rate, 2),
             wcu_fenced_put=wcu(jobs_item, True) + wcu(40, True), wcu_plain_put=wcu(40))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
