"""A family's DynamoDB write units per child, on in-process moto: one parent, ``n`` children, a
continuation, through the gateway's real use case and the real store, each child granted, its
result written and counted down (``core.families.Countdown``) in a shuffled order.

Prints one JSON object: {"bench": "fanout_units", "children", "wcu_per_child", "child_item_wcu",
"countdown_wcu", "parent_extra_wcu", "family_record_wcu", "writes_per_child", "max_countdown_wcu"}.

Units are billed as DynamoDB bills them: 1 per KB of the larger of the item's size before and
after the write, a refused conditional write included, sized by moto's rules
(``sluice_dev.local.motoserver.moto_item_size``, what ``bench_fanout``'s meter uses on the stack).
``bench_fanout`` measures the same on the local stack, with its times; this one needs no stack, so
it runs 1,000 children on a machine too loaded for the stack's family request (one request writes
every child's item against the one moto process, within the internal function's 30 s). The
parent's own plain-job writes (relay, grant, result at a plain job's size) are not counted here:
``parent_extra_wcu`` is its family writes and the extra size of its result write.

    PYTHONPATH=shared python benchmarks/fanout_units.py [n]
"""

from __future__ import annotations

import random
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import emit

WRITES = ("UpdateItem", "PutItem", "DeleteItem")


class Meter:
    """Write units per item key, from the client's own calls (sizes read from moto's backend)."""

    def __init__(self, db: Any, table: str) -> None:
        self.table, self.units, self.writes = table, {}, {}
        self.by_count: list[int] = []  # the units of each countdown write
        self._call = threading.local()  # the store writes children (and buckets) from a pool
        for op in WRITES:
            db.meta.events.register(f"before-parameter-build.dynamodb.{op}", self._before)
            db.meta.events.register(f"after-call.dynamodb.{op}", self._after)

    def _before(self, params: dict[str, Any], **_: Any) -> None:
        from sluice_dev.local.motoserver import moto_item_size

        key = params.get("Key") or {"job_id": params["Item"]["job_id"]}
        self._call.pending = {"key": key, "before": moto_item_size(self.table, key) or 0,
                         "count": "#ended :slots" in str(params.get("UpdateExpression", ""))}

    def _after(self, **_: Any) -> None:
        from sluice_dev.local.motoserver import moto_item_size

        pending = self._call.pending
        key = pending["key"]
        units = max(1, -(-max(pending["before"], moto_item_size(self.table, key) or 0) // 1024))
        name = key["job_id"]["S"]
        self.units[name] = self.units.get(name, 0) + units
        self.writes[name] = self.writes.get(name, 0) + 1
        if pending["count"]:
            self.by_count.append(units)


ROUND = 10  # a worker's round: WorkerOptions.lease_batch's default
MODES = ("per_child", "rounds", "rounds_4_partitions", "rounds_shuffled")
PARTITIONS = 4  # Settings.kafka_partitions' default


def family_units(db: Any, n: int, mode: str) -> dict[str, Any]:
    """One family of ``n`` children counted down by ``mode``: ``per_child``, each child as it ends
    (``core.families.Countdown``, the worker before issue 30's round countdown, and every other
    emitter), in a shuffled order; ``rounds``, the worker's (``worker.countdown.RoundCountdown``),
    rounds of ``ROUND`` children in the order the gateway appended them (slot order), as one
    partition's queue hands them out (first in, first out); ``rounds_4_partitions``, the same from
    ``PARTITIONS`` partitions (kafka-python's partitioner on the ids), the relay pushing each
    partition's records in turn; ``rounds_shuffled``, rounds from a shuffled order (the worst case:
    a round's children spread over every bucket)."""
    from sluice.backends.dynamodb import tables
    from sluice.backends.dynamodb.jobs import DynamoJobStore
    from sluice.core import ids
    from sluice.core.bus import EventBus, JobEnded, RoundEnded
    from sluice.core.families import ChildRequest, Countdown, FamilyRequest, ThenRequest
    from sluice.gateway.api import Api, Backends, IdMinting
    from sluice.worker.countdown import RoundCountdown
    from sluice_dev.fakes import FakeLog, FakeQueue

    key = b"k" * 32
    table = f"jobs-{uuid.uuid4().hex[:8]}"
    tables.create_jobs_table(db, table)
    store = DynamoJobStore(db, table)
    backends = Backends(FakeLog(), store, FakeQueue(), EventBus(), families=store.families)
    api = Api(backends, IdMinting(key), clock=lambda: 1_700_000_005_000)
    parent = ids.mint(1_700_000_000_000, "fanout", key)
    token = store.grant(parent, "fanout", "w1")
    meter = Meter(db, table)
    family = api.enqueue_children(FamilyRequest(
        parent_id=parent, token=token, jobs=[ChildRequest(queue="work", payload=i, key=f"k{i}")
                                             for i in range(n)],
        then=ThenRequest(queue="report", payload={"n": n})))
    then = family.continuation or ""
    bus = EventBus()
    counter = Countdown if mode == "per_child" else RoundCountdown
    counter(store.families, api.release_continuation).subscribe(bus)
    order = [s.job_id for s in backends.log.records]  # type: ignore[attr-defined]  # the append's order
    if mode == "rounds_4_partitions":
        from kafka.partitioner.default import murmur2

        def partition(job_id: str) -> int:
            return (murmur2(job_id.encode()) & 0x7FFFFFFF) % PARTITIONS

        order = [j for p in range(PARTITIONS) for j in order if partition(j) == p]
    elif mode != "rounds":
        random.Random(30).shuffle(order)
    for i, child in enumerate(order, 1):
        store.write_result(child, store.grant(child, "work", "w2"), {"ok": True})
        bus.emit(JobEnded(job=child, queue="work", state="succeeded", source="worker"))
        if i % ROUND == 0 or i == n:
            bus.emit(RoundEnded(queue="work", jobs=ROUND))
    store.write_result(parent, token, {"continuation": then})
    assert store.families.unreleased(then) is False, "the continuation was not released"
    kids = set(family.job_ids)
    own = sum(meter.units.get(c, 0) for c in kids)
    countdown = sum(u for k, u in meter.units.items() if k == then or k.startswith("~count~"))
    record = sum(u for k, u in meter.units.items() if k.startswith("~family~"))
    parent_extra = meter.units.get(parent, 0) - 1  # its result write, beyond a plain job's 1 unit
    writes = sum(meter.writes.values()) - 1
    total = own + countdown + record + parent_extra
    return {"wcu_per_child": round(total / n, 3), "child_item_wcu": round(own / n, 3),
            "countdown_wcu": round(countdown / n, 3), "parent_extra_wcu": round(parent_extra / n, 3),
            "family_record_wcu": round(record / n, 3), "writes_per_child": round(writes / n, 3),
            "max_countdown_wcu": max(meter.by_count), "usd_per_million_children": round(total / n * 0.625, 2)}


def main(n: int) -> None:
    import boto3
    from moto import mock_aws

    with mock_aws():
        db = boto3.client("dynamodb", region_name="us-east-1")
        modes = {mode: family_units(db, n, mode) for mode in MODES}
    emit("fanout_units", children=n, continuation_released=True, round=ROUND, **modes["rounds"],
         **{mode: modes[mode] for mode in MODES})


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000)
