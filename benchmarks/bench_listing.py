"""The console's jobs page over a queue of 10,000 jobs (issue 32: "a queue's jobs page, filtered by
state, with 10,000 jobs in the queue, answers within 300 ms locally").

The whole path a page takes, in one process: ``Console.handle`` (the console's route and HTML) ->
``sluice.Client`` over HTTP -> the gateway's operator route on the local server
(``LocalGateway``) -> ``RedisAdmin.list_jobs`` on a real redis-server (ZRANGE BYSCORE REV, one
pipelined HMGET). The queue holds 10,000 jobs: 4,000 ready, 3,000 delayed, 2,000 leased and 1,000
dead. Each case is timed ``ROUNDS`` times, one after another in the same run, so they compare with
each other; the API alone (the same request without the console) is the yardstick.

Prints one JSON object:
  {"bench": "listing", "jobs_in_queue", "rounds", "<case>_p50_ms", "<case>_p99_ms", "<case>_max_ms", ...,
   "budget_ms": 300, "within_budget"}
Cases: page_<state> (a page of 50 of that state), page_ready_prefix_miss (a prefix no id has: the
page examines every ready job), api_dead (the operator route alone); and, on two more queues of
10,000 ready jobs each spread over fair groups (issue 32's review: the ready listing merges the
groups' zsets), page_groups<G>_ready and page_groups<G>_ready_prefix_miss for G = 100 and 1,000.
A tree before that review lists no grouped job there: its page is empty (its figure is then the
cost of an empty page). ``tree`` says which ``sluice`` ran: run it on two trees
(``PYTHONPATH=<tree>/shared``) one after the other to compare them.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sluice
from benchmarks.common import emit, log, redis_server
from sluice.backends.redis.engine import RedisQueue
from sluice.client import Client
from sluice.core.bus import EventBus
from sluice.core.clock import wall_ms
from sluice.core.models import JobSpec
from sluice.entry.gateway import Gateway
from sluice.gateway.api import Api, Backends, IdMinting, Intake, Policy
from sluice_dev.cli.console.backend import Watched
from sluice_dev.cli.console.server import Console
from sluice_dev.fakes import FakeKeyStore, FakeLog, FakeStore
from sluice_dev.local.api_server import LOCAL_CALLER_HEADER, LocalGateway

QUEUE = "bench"
SPLIT = {"ready": 4_000, "delayed": 3_000, "leased": 2_000, "dead": 1_000}
GROUPED = {100: "bench-g100", 1_000: "bench-g1000"}  # groups -> a queue of 10,000 grouped ready jobs
ROUNDS = 30
BUDGET_MS = 300
OPERATOR = "arn:aws:iam::000000000000:role/bench-operator"
PORT = 8470
HOST = {"host": f"127.0.0.1:{PORT}"}


def fill(rq: RedisQueue) -> None:
    """10,000 jobs: the dead and leased ones leased first (highest priority), the delayed ones later."""
    now = wall_ms()
    payload = {"to": "someone@example.com", "subject": "hello", "n": 0}

    def specs(prefix: str, n: int, **kw: Any) -> list[JobSpec]:
        return [JobSpec(job_id=f"{prefix}-{i:05d}", queue=QUEUE, payload={**payload, "n": i}, **kw)
                for i in range(n)]

    rq.enqueue_many(specs("dead", SPLIT["dead"], priority=9))
    for job in rq.lease(QUEUE, SPLIT["dead"], 600_000):
        rq.fail(QUEUE, job.job_id, job.lease_token, "boom", permanent=True)
    rq.enqueue_many(specs("leased", SPLIT["leased"], priority=9))
    for _ in range(SPLIT["leased"] // 1000):  # a lease call takes 1000 at most
        rq.lease(QUEUE, 1000, 3_600_000)
    rq.enqueue_many(specs("ready", SPLIT["ready"], priority=3))
    rq.enqueue_many(specs("delayed", SPLIT["delayed"], run_at_ms=now + 3_600_000))
    stats = rq.stats(QUEUE)
    assert (stats.ready, stats.delayed, stats.leased, stats.dead) == tuple(SPLIT.values()), stats
    for groups, queue in GROUPED.items():
        rq.enqueue_many([JobSpec(job_id=f"g-{i:05d}", queue=queue, payload={**payload, "n": i},
                                 group=f"tenant-{i % groups}", priority=i % 3) for i in range(10_000)])
        assert rq.stats(queue).ready == 10_000


def timed(op: Callable[[], Any]) -> dict[str, float]:
    op()  # warm: connections, the first page's imports
    ms = []
    for _ in range(ROUNDS):
        t = time.perf_counter()
        op()
        ms.append((time.perf_counter() - t) * 1000)
    ms.sort()
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    return {"p50_ms": round(statistics.median(ms), 2), "p99_ms": round(p99, 2), "max_ms": round(ms[-1], 2)}


def main() -> None:
    with redis_server() as url:
        rq = RedisQueue.from_url(url)
        t = time.perf_counter()
        fill(rq)
        log(f"filled {sum(SPLIT.values())} jobs in {time.perf_counter() - t:.1f} s")
        api = Api(Backends(FakeLog(), FakeStore(), rq, events=EventBus()),  # type: ignore[arg-type]
                  IdMinting(b"bench-job-id-key-0123456789abcdef"), intake=Intake(),
                  policy=Policy((OPERATOR,)), idempotency=FakeKeyStore())
        with LocalGateway(Gateway(api)) as server:
            client = Client(server.url, headers={LOCAL_CALLER_HEADER: OPERATOR}, max_attempts=1)
            console = Console(client, "bench", PORT, Watched({QUEUE}))
            login = console.handle("GET", f"/login?token={console.launch_token}", HOST)
            cookie = {"cookie": login.headers["Set-Cookie"].split(";", 1)[0]}

            def page(query: str, queue: str = QUEUE, listed: bool = True) -> Callable[[], Any]:
                def get() -> None:
                    r = console.handle("GET", f"/queues/{queue}/jobs?{query}", HOST | cookie)
                    assert r.status == 200, r.body[:300]
                    assert 'data-job="' in r.body or "prefix=zzz" in query or not listed, r.body[:300]
                return get

            figures: dict[str, Any] = {}
            for state in SPLIT:
                for k, v in timed(page(f"state={state}")).items():
                    figures[f"page_{state}_{k}"] = v
            for k, v in timed(page("state=ready&prefix=zzz")).items():
                figures[f"page_ready_prefix_miss_{k}"] = v
            for k, v in timed(lambda: client.list_jobs(QUEUE, "dead")).items():
                figures[f"api_dead_{k}"] = v
            for groups, queue in GROUPED.items():
                cases = (("ready", "state=ready"), ("ready_prefix_miss", "state=ready&prefix=zzz"))
                for name, query in cases:
                    for k, v in timed(page(query, queue, listed=False)).items():
                        figures[f"page_groups{groups}_{name}_{k}"] = v
                figures[f"page_groups{groups}_ready_jobs"] = len(client.list_jobs(queue, "ready").jobs)
        rq.close()
    worst = max(v for k, v in figures.items() if k.startswith("page_") and k.endswith("_p99_ms"))
    emit("listing", tree=str(Path(sluice.__file__).parents[2]), jobs_in_queue=sum(SPLIT.values()),
         rounds=ROUNDS, **figures, budget_ms=BUDGET_MS, worst_page_p99_ms=worst,
         within_budget=worst <= BUDGET_MS)


if __name__ == "__main__":
    main()
