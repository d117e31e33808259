"""Jobs that start jobs, end to end on the local stack: one parent, 1,000 children, a continuation.

Prints one JSON object:
  {"bench": "fanout", "children": 1000, "parent_to_continuation_s", "children_per_s",
   "writes_per_child", "writes_per_plain_job", "extra_writes_per_child", "plain_jobs", ...}

The stack is ``sluice dev``'s (``local.dev.DevStack``: gateway, relay and worker Lambdas in the
local Lambda service, Tansu, redis-server, the moto server), with the examples' handlers:
``fanout`` starts ``n`` children on ``square`` and a continuation on ``sum`` (docs/flows.md).

- parent_to_continuation_s: from the parent's first grant (its start) to the continuation's
  first grant, from the stack's history of grants; the children all ran in between.
- writes_per_child: DynamoDB write requests on the jobs table (the moto server counts them per
  item key: ``local.motoserver.WriteCounter``) made for the family, divided by its children:
  each child's own item, plus the continuation's item (its countdown), the family's record and
  the parent's extra writes (recording its children), whoever made them (gateway, relay, workers).
- continuation_item_writes: the writes on the continuation's item once they stop growing
  (``settle``): the jobs table's stream counts every child again (``StreamCountdown.recount``,
  one refused conditional write each), behind the fast path, so the count read when the
  continuation ends (``continuation_item_writes_at_end``) misses the stream's tail;
  ``stream_settle_s`` is how long after the continuation's end the count stopped growing.
- wcu_per_child (and ``child_item_wcu_per_child``, ``continuation_item_wcu``, ``parent_extra_wcu``,
  ``wcu_per_plain_job``): the same in write capacity units as DynamoDB bills them (1 per KB of
  the larger of the item before and after the write; a refused conditional write too), which the
  moto server computes from its items' sizes (``WriteCounter.wcu_by_key``); the parent's item
  (every child's id) and the continuation's (every ended slot) are several KB, so their writes
  cost several units each.
- last_child_to_continuation_s: from the last child's result write to the continuation's first
  grant: how long the release and the continuation's dispatch took.
- plain_jobs_per_s: the plain jobs' throughput (first grant to last result write), for scale.
- writes_per_plain_job: the same count for ``PLAIN`` plain ``echo`` jobs enqueued in the same
  run (accepted by the relay, granted, result written): the path a job without a family takes.

moto is one Python process and much slower per request than DynamoDB; the counts, not the
times, carry over to AWS.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import emit, log

CHILDREN = int(os.environ.get("SLUICE_BENCH_FANOUT_CHILDREN", "1000"))
PLAIN = 200
TIMEOUT_S = 600.0


def writes(moto_url: str, field: str = "by_key") -> dict[str, int]:
    """Per item key, the write requests (``by_key``) or the write capacity units (``wcu_by_key``)
    the moto server counted (``sluice_dev.local.motoserver.WriteCounter``)."""
    from sluice_dev.local.motoserver import COUNTS_PATH

    with urllib.request.urlopen(moto_url + COUNTS_PATH, timeout=30) as r:
        by_key: dict[str, int] = json.loads(r.read()).get(field, {})
    return by_key


def per_child(counts: dict[str, int], plain: list[str], children: list[str], then: str,
              parent: str) -> tuple[float, float, float]:
    """(per plain job, per child for the whole family, per child on the children's own items) of
    ``counts``: the family's are its children's items, the continuation's item, the family's record
    and what the parent's item took beyond a plain job's."""
    from sluice.backends.dynamodb.families import family_key

    per_plain = sum(counts.get(j, 0) for j in plain) / len(plain)
    own = sum(counts.get(j, 0) for j in children)
    family = own + counts.get(then, 0) + counts.get(family_key(then), 0) + counts.get(parent, 0) - per_plain \
        + buckets(counts, then)
    return per_plain, family / len(children), own / len(children)


def buckets(counts: dict[str, int], then: str) -> int:
    """The writes (or units) on the continuation's countdown buckets (``~count~<then>~<b>``, issue 30;
    none before it)."""
    from sluice.backends.dynamodb.families import family_key

    prefix = family_key(then).replace("~family~", "~count~", 1) + "~"
    return sum(n for key, n in counts.items() if key.startswith(prefix))


def settle(read: Callable[[], int], deadline: float, *, quiet_s: float = 5.0, every_s: float = 0.5,
           clock: Callable[[], float] = time.monotonic,
           sleep: Callable[[float], None] = time.sleep) -> tuple[int, float]:
    """Read a growing count until it has not changed for ``quiet_s``: (the count, seconds taken).

    The stream's countdown runs behind the continuation's start, so its writes are still
    arriving when the continuation ends. Raises TimeoutError past ``deadline``.
    """
    start = clock()
    last, since = read(), start
    while clock() - since < quiet_s:
        if clock() > deadline:
            raise TimeoutError(f"the count still grew at {last}")
        sleep(every_s)
        now = read()
        if now != last:
            last, since = now, clock()
    return last, round(since - start, 2)


def first_times(path: Path, op: str) -> dict[str, float]:
    """Per job, the start of its first successful ``op`` (grant, write) in the stack's history."""
    out: dict[str, float] = {}
    for line in path.read_text().splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("op") == op and e.get("outcome") in ("ok", "written"):
            out.setdefault(str(e["job"]), float(e["t0"]))
    return out


def wait(client: Any, job_id: str, deadline: float) -> Any:
    while time.monotonic() < deadline:
        view = client.status(job_id)
        if view.status.value in ("succeeded", "failed", "dead", "cancelled"):
            return view
        time.sleep(0.5)
    raise TimeoutError(f"{job_id} did not finish in time")


def main() -> None:
    from sluice.backends.dynamodb.families import family_key
    from sluice.client import Client
    from sluice_dev.local.dev import DevOptions, DevStack
    from sluice_dev.local.motoserver import COUNT_ENV

    os.environ[COUNT_ENV] = "1"  # the moto server this stack starts counts writes per item
    state = Path(tempfile.mkdtemp(prefix="sluice-bench-fanout-"))
    dev = DevStack(DevOptions(state_dir=state, workers=4, warm_workers=4, log_level="WARNING",
                              safety_net_every_s=2, settings={"worker_batch": 50, "worker_concurrency": 6}))
    try:
        ep = dev.start()
        client = Client(str(ep["gateway_url"]), timeout_s=60, max_attempts=5)
        deadline = time.monotonic() + TIMEOUT_S
        plain = [a.job_id for start in range(0, PLAIN, 100)
                 for a in client.enqueue_batch("echo", [{"payload": {"i": i}}
                                                        for i in range(start, start + 100)]).jobs]
        for job_id in plain:
            wait(client, job_id, deadline)
        log(f"bench_fanout: {PLAIN} plain jobs done; starting a parent of {CHILDREN} children")
        parent = client.enqueue("fanout", {"n": CHILDREN}, lease_seconds=120).job_id
        view = wait(client, parent, deadline)
        if view.status.value != "succeeded":
            raise RuntimeError(f"the parent ended {view.status.value}: {view.last_error}")
        then = view.result["continuation"]
        report = wait(client, then, deadline)
        grants = first_times(Path(str(ep["history_path"])), "grant")
        written = first_times(Path(str(ep["history_path"])), "write")
        plain_s = max(written[j] for j in plain) - min(grants[j] for j in plain)
        def countdown_writes() -> int:  # the continuation's item and its buckets
            counts = writes(str(ep["dynamodb_endpoint"]))
            return counts.get(then, 0) + buckets(counts, then)

        at_end = countdown_writes()
        _, settle_s = settle(countdown_writes, deadline)
        counts = writes(str(ep["dynamodb_endpoint"]))
        wcus = writes(str(ep["dynamodb_endpoint"]), "wcu_by_key")
        children = client.status(parent).children
        per_plain, per_family, per_own = per_child(counts, plain, children, then, parent)
        wcu_plain, wcu_family, wcu_own = per_child(wcus, plain, children, then, parent)
        emit("fanout", children=len(children), continuation=report.status.value,
             sum_ok=report.result == {"sum": sum(i * i for i in range(CHILDREN)), "children": CHILDREN,
                                      "states": {"succeeded": CHILDREN}},
             parent_to_continuation_s=round(grants[then] - grants[parent], 2),
             last_child_to_continuation_s=round(grants[then] - max(written[c] for c in children), 2),
             children_per_s=round(len(children) / max(0.001, grants[then] - grants[parent]), 1),
             writes_per_child=round(per_family, 2), child_item_writes_per_child=round(per_own, 2),
             wcu_per_child=round(wcu_family, 2), child_item_wcu_per_child=round(wcu_own, 2),
             wcu_per_plain_job=round(wcu_plain, 2),
             continuation_item_writes=counts.get(then, 0), continuation_item_wcu=wcus.get(then, 0),
             bucket_writes=buckets(counts, then), bucket_wcu=buckets(wcus, then),
             countdown_wcu_per_child=round((wcus.get(then, 0) + buckets(wcus, then)) / len(children), 2),
             family_record_wcu=wcus.get(family_key(then), 0),
             continuation_item_writes_at_end=at_end, stream_settle_s=settle_s,
             parent_extra_writes=round(counts.get(parent, 0) - per_plain, 2),
             parent_extra_wcu=round(wcus.get(parent, 0) - wcu_plain, 2),
             writes_per_plain_job=round(per_plain, 2),
             extra_writes_per_child=round(per_family - per_plain, 2),
             plain_jobs=PLAIN, plain_jobs_per_s=round(PLAIN / max(0.001, plain_s), 1))
    finally:
        dev.stop()
        shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    main()
