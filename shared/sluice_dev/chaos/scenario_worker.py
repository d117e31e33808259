"""A scenario's worker process: the real worker runtime, reporting each step on stdout.

Run by ``sluice_dev.chaos.scenarios`` as ``python -m sluice_dev.chaos.scenario_worker '<json>'``.
The worker leases one job from a real Redis, takes its fencing token from the real
jobs table (moto server) and heartbeats from its own thread, exactly as in
production; ``probe``, subscribed to its event bus, reports every call as a JSON line.

Fault points are placed by the worker itself, at the exact moment the story needs:

- ``freeze_before_write``: after the runtime's own lease check and just before the
  fenced write, the process sends itself SIGSTOP. That is where a GC pause does harm:
  the worker has already decided it still owns the job. The controller sends SIGCONT.
- ``die_before_ack``: after the result was written and before the ack, the process
  sends itself SIGKILL.
- ``gate``: the worker waits for a line on stdin before it starts leasing, so that
  worker B only competes once A holds the lease.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from typing import Any

from sluice_dev.chaos.probe import EventPipe, probe


def _handler(cfg: dict[str, Any], emit: EventPipe) -> Any:
    work_s = float(cfg["work_s"])
    tag = bool(cfg.get("tag_result", False))

    def work(job: Any, ctx: Any) -> dict[str, Any]:
        emit("handler_start", job=job.job_id, token=ctx.token, attempt=job.attempt)
        until = time.time() + work_s
        if cfg.get("work_from_lease"):  # stop working work_s after the lease began, not after the grant
            until = (ctx.lease_deadline_ms - int(cfg["lease_ms"])) / 1000 + work_s
        while (left := until - time.time()) > 0:
            time.sleep(min(left, 0.01))
        result: dict[str, Any] = {"sum": sum(job.payload["numbers"])}
        if tag:  # the gc-pause story needs to see whose result is stored
            result |= {"by": cfg["name"], "token": ctx.token}
        emit("handler_end", job=job.job_id, token=ctx.token)
        return result

    return work


def build(cfg: dict[str, Any], emit: EventPipe) -> Any:
    from sluice.backends.dynamodb.jobs import DynamoJobStore
    from sluice.backends.redis.queue import RedisJobQueue
    from sluice.core.bus import Acking, EventBus, ResultWriting
    from sluice.core.config import Settings
    from sluice.worker.registry import Worker
    from sluice.worker.runtime.options import WorkerOptions
    from sluice.worker.runtime.telemetry import MemoryMetrics, Telemetry

    s = Settings(redis_url=cfg["redis_url"], aws_endpoint_url=cfg["moto_url"], jobs_table=cfg["table"],
                 results_bucket=cfg["bucket"])
    app = Worker()
    app.register(cfg["queue"], _handler(cfg, emit), timeout_s=float(cfg.get("timeout_s", 3600)))

    def before_write(e: ResultWriting) -> None:
        emit("before_write", job=e.job, token=e.token)
        if cfg.get("freeze_before_write"):
            emit("stall", job=e.job, token=e.token)
            os.kill(os.getpid(), signal.SIGSTOP)  # the GC pause; the controller sends SIGCONT
            emit("resumed", job=e.job, token=e.token)

    def before_ack(e: Acking) -> None:
        emit("before_ack", job=e.job, token=e.token)
        if cfg.get("die_before_ack"):
            emit("dying", job=e.job, token=e.token)
            os.kill(os.getpid(), signal.SIGKILL)

    logger: Any = logging.getLogger(f"sluice.scenario.{cfg['name']}")  # a LogSink
    fencing = bool(cfg.get("fencing", True))
    events = EventBus()
    events.subscribe(probe(emit, fencing=fencing))
    events.subscribe(before_write, ResultWriting)
    events.subscribe(before_ack, Acking)
    # The job's timeline in the scenario's Redis, recorded as a deployed worker records it (issue 32):
    # the drawing (``--html``, the console's scenario page) is read back from there.
    from sluice.backends.redis.connection import RedisConnection
    from sluice.backends.redis.timeline import RedisTimeline
    from sluice.worker.runtime.timeline import TimelineRecorder

    timeline = RedisTimeline(RedisConnection.from_settings(s), ttl_ms=600_000)
    TimelineRecorder(lambda: timeline).subscribe(events)
    store = DynamoJobStore.from_settings(s, fencing=fencing)
    worker = app.bind(
        queue=RedisJobQueue.from_settings(s), store=store, families=store.families, events=events,
        options=WorkerOptions(lease_ms=int(cfg["lease_ms"]), lease_batch=1,
                              heartbeat_fraction=float(cfg["heartbeat_fraction"])),
        telemetry=Telemetry(MemoryMetrics(), logger), worker_id=f"{cfg['name']}:{os.getpid()}")
    return worker


def main(argv: list[str]) -> int:
    cfg = json.loads(argv[0])
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format=f"{cfg['name']} %(asctime)s %(levelname)s %(message)s")
    emit = EventPipe(cfg["name"])
    worker = build(cfg, emit)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    emit("ready", pid=os.getpid())
    if cfg.get("gate") and not sys.stdin.readline():  # EOF: the controller went away
        return 1
    emit("polling")
    summary = worker.run([cfg["queue"]], stop=stop, idle_s=float(cfg.get("idle_s", 0.01)), max_jobs=1)
    emit("exit", summary=summary.as_dict())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
