"""The relay reading a held queue's parked records back (issue 28): this tree against a base commit's.

Prints one JSON object per case (``CASES``, BENCH_READBACK_CASES):
  {"bench": "readback", "case", "records", "rate_per_s", "batch", "max_pending", "park_above",
   "base", "rounds", "this": {...}, "base_side": {...}, "cpu_ratio", "rru_ratio", "load_before",
   "load_after"}
with each side's medians over the rounds: "relay_cpu_us_per_record" (the relay process's CPU,
every thread, over the read back), "park_cpu_us_per_record" (the same over the parking, from the
first poll: decode, checks, packing, the writes), "moto_cpu_us_per_record" (the moto server's over
the read back), "queries", "mb_read" (the items the
lot's Queries returned), "rru_per_1k_records" (the read request units those Queries bill on
DynamoDB, strongly consistent: each Query's items summed, 1 per 4 KB), "wall_s", and "runs".

One queue floods one partition while it is paused, so the relay parks its records (the DynamoDB
lot on a moto server: segments of up to ``park_call_max`` records); then it is resumed with a rate
limit and the relay reads its lane back into Redis until every record is there. Only the read back
is measured. Each read back asks for a room's worth of records (``park_above`` less what the queue
keeps buffered: 125 in the ``scaled`` case, the chaos run's tenant nemesis; up to 1,000 with the
relay's defaults) and fetches whole segments of 500; the base commit read a segment again for each
room's worth of it (and two items a Query at first), this tree keeps the rest of what a read
fetched for the next reads (``Lane.ahead``).

Each side runs in a child process whose ``sluice`` is its own tree (``base_tree``: ``git archive``
of BENCH_READBACK_BASE, default the commit before the read-ahead), on one redis-server and one
moto server, the sides alternated ``rounds`` times (BENCH_READBACK_ROUNDS). A real Redis and a real
(moto) DynamoDB; the Kafka source is in memory (``FakeSource``) and the job store a null one.
CPU-seconds are steadier than wall time on this shared machine; the load averages are given.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

BASE = "8b99c7b"  # main before the read-ahead (issue 28, session 36)
# case: (records, rate per second, batch, max_pending)
CASES = {"scaled": (5_000, 1_000.0, 500, 500), "defaults": (5_000, 1_000.0, 500, 5_000)}
PAD = 200  # payload padding: records of about 370 B, the cost model's small job


class NullStore:
    """No job is final, statuses are dropped: this measures the lot and the relay alone."""

    def final_job_ids(self, job_ids: Any) -> set[str]:
        return set()

    def mark_queued(self, jobs: Any) -> None:
        return None

    def relay_view(self, job_ids: Any) -> tuple[set[str], dict[str, int]]:
        return set(), {}


class CountingClient:
    """The DynamoDB client, counting the Queries and the bytes of the items they return."""

    def __init__(self, client: Any) -> None:
        self.client, self.queries, self.bytes, self.rru = client, 0, 0, 0

    def query(self, **kwargs: Any) -> Any:
        answer = self.client.query(**kwargs)
        size = sum(item_bytes(item) for item in answer.get("Items", []))
        self.queries += 1
        self.bytes += size
        self.rru += max(1, -(-size // 4096))  # a strongly consistent read: 4 KB a unit, summed per Query
        return answer

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


def item_bytes(item: dict[str, Any]) -> int:
    """An item's size as DynamoDB counts it: attribute names plus values."""
    total = 0
    for name, value in item.items():
        (kind, raw), = value.items()
        total += len(name) + (len(raw) if kind in ("B", "S") else len(str(raw)))
    return total


def side(redis_url: str, moto_url: str, moto_pid: int, case: str, tag: str) -> dict[str, Any]:
    """One read back, in this process (the child): the relay of whichever ``sluice`` is on the path."""
    import boto3
    import psutil
    import redis

    from sluice.backends.dynamodb.parking import DynamoParkingLot
    from sluice.backends.dynamodb.tables import create_parked_table
    from sluice.backends.redis.engine import RedisQueue
    from sluice.backends.redis.keys import QueueKeys
    from sluice.core.bus import EventBus
    from sluice.core.models import JobSpec
    from sluice.relay import Relay, RelayConfig
    from sluice_dev.fakes import FakeSource

    records, rate, batch, max_pending = CASES[case]
    queue, table = f"a{tag}", f"parked-{tag}"
    client = CountingClient(boto3.client("dynamodb", endpoint_url=moto_url, region_name="us-east-1"))
    create_parked_table(client.client, table)
    lot = DynamoParkingLot(client, table)
    engine = RedisQueue.from_url(redis_url)
    check = redis.Redis.from_url(redis_url)
    engine.set_config(queue, paused=True)
    source = FakeSource(topic="sluice.jobs", n_partitions=1)
    for i in range(records):
        spec = JobSpec(job_id=f"{tag}-{i:06d}", queue=queue, payload={"n": i, "pad": "x" * PAD})
        source.append_spec(0, spec)
    config = RelayConfig(batch=batch, max_pending=max_pending, poll_ms=10, commit_s=0, refresh_s=0.05)
    relay = Relay(engine, NullStore(), source, None, relay_id=f"r{tag}", parking=lot,  # type: ignore[arg-type]
                  events=EventBus(), config=config)
    ready = QueueKeys(queue).ready
    moto = psutil.Process(moto_pid)
    try:
        park0 = time.process_time()
        deadline = time.monotonic() + 300
        while relay.report.parked < records and time.monotonic() < deadline:
            relay.step()
        park_cpu = time.process_time() - park0
        assert relay.report.parked >= records, f"parked {relay.report.parked} of {records}"
        queries0, bytes0, rru0 = client.queries, client.bytes, client.rru
        moto0 = sum(moto.cpu_times()[:2])
        cpu0, wall0 = time.process_time(), time.monotonic()
        engine.set_config(queue, paused=False, rate_per_s=rate, burst=int(rate))
        deadline = time.monotonic() + 300
        while check.zcard(ready) < records and time.monotonic() < deadline:
            relay.step()
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        moto_cpu = sum(moto.cpu_times()[:2]) - moto0
        back = int(check.zcard(ready))
        assert back == records, f"{back} of {records} back in Redis"
    finally:
        relay.stop()
        engine.close()
        check.close()
    return {"relay_cpu_us_per_record": round(cpu * 1e6 / records, 1),
            "park_cpu_us_per_record": round(park_cpu * 1e6 / records, 1),
            "moto_cpu_us_per_record": round(moto_cpu * 1e6 / records, 1),
            "queries": client.queries - queries0, "mb_read": round((client.bytes - bytes0) / 1e6, 2),
            "rru_per_1k_records": round((client.rru - rru0) * 1000 / records, 1), "wall_s": round(wall, 2),
            "park_above": config.park_above}


def run_child(shared: Path, *args: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--side", *args], check=True, capture_output=True,
                         text=True, timeout=900, env={**os.environ, "PYTHONPATH": str(shared)})
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    keys = [k for k in runs[0] if k != "park_above"]
    return {**{k: round(statistics.median(r[k] for r in runs), 2) for k in keys}, "runs": runs}


def main() -> None:
    from benchmarks.base_tree import export_tree, load, this_tree
    from benchmarks.common import emit, log
    from sluice_dev.local import motoserver
    from sluice_dev.local.servers import DUMMY_AWS_ENV, start_redis

    for key, value in DUMMY_AWS_ENV.items():
        os.environ.setdefault(key, value)
    base = os.environ.get("BENCH_READBACK_BASE", BASE)
    rounds = int(os.environ.get("BENCH_READBACK_ROUNDS", "3"))
    with tempfile.TemporaryDirectory(prefix="bench-readback-") as tmp:
        trees = {"this": this_tree(), "base_side": export_tree(Path(tmp), base)}
        redis_server, moto = start_redis(), motoserver.start()
        try:
            for case in os.environ.get("BENCH_READBACK_CASES", "scaled,defaults").split(","):
                loads = load()
                runs: dict[str, list[dict[str, Any]]] = {"this": [], "base_side": []}
                for r in range(rounds):
                    for name in (("this", "base_side") if r % 2 else ("base_side", "this")):
                        got = run_child(trees[name], redis_server.extra["url"], moto.extra["url"],
                                        str(moto.pid), case, f"{case}{r}{name[0]}")
                        log(f"{case} round {r} {name}: {got}")
                        runs[name].append(got)
                this, before = medians(runs["this"]), medians(runs["base_side"])
                records, rate, batch, max_pending = CASES[case]
                emit("readback", case=case, records=records, rate_per_s=rate, batch=batch,
                     max_pending=max_pending, park_above=runs["this"][0]["park_above"], base=base,
                     rounds=rounds, this=this, base_side=before,
                     cpu_ratio=round(this["relay_cpu_us_per_record"] / before["relay_cpu_us_per_record"], 3),
                     rru_ratio=round(this["rru_per_1k_records"] / before["rru_per_1k_records"], 3),
                     load_before=loads, load_after=load())
        finally:
            moto.stop()
            redis_server.stop()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--side"]:
        redis_url, moto_url, moto_pid, case, tag = sys.argv[2:7]
        print(json.dumps(side(redis_url, moto_url, int(moto_pid), case, tag)))
    else:
        main()
