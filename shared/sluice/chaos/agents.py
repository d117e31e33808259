"""The chaos run's processes: ``python -m sluice.chaos.agents worker|relay '<json config>'``.

A worker is the real worker runtime (``sluice.Worker``) on the real Redis engine and
jobs table, with its two ports wrapped by ``chaos.history`` recorders, and a handler
whose result is a deterministic function of the payload. A relay is the real
``sluice.relay.Relay`` with Redis-loss recovery (``sluice.recovery``), run as a series
of bounded invocations, as the scheduled Lambda would.

The nemesis places some faults exactly by arming a process through a control file
(``<control_dir>/<name>.json``: ``{"kind": ..., "until": epoch s}``); the process checks
it at the matching point, records the fault as landed, removes the file and SIGKILLs
(or SIGSTOPs) itself:

- ``kill_worker_mid_job``: inside the handler, after the job started;
- ``kill_worker_before_ack``: after the result write, before the ack;
- ``pause_worker_before_write``: SIGSTOP (not SIGKILL) after the runtime's own lease check and
  just before the fenced write, the gc-pause story under load; the nemesis sends SIGCONT;
- ``kill_relay_after_push``: after a Redis push returned, before the Kafka commit.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from sluice.chaos.history import History, RecordingQueue, RecordingStore
from sluice.models import dump_json

QUEUE = "chaos"


def expected_result(payload: Any) -> dict[str, str]:
    """The one correct result of a chaos job."""
    return {"sha256": hashlib.sha256(dump_json(payload).encode("utf-8")).hexdigest()}


class Control:
    """The nemesis's arming file for one process slot."""

    def __init__(self, control_dir: str, name: str, history: History) -> None:
        self.path = Path(control_dir) / f"{name}.json"
        self.name = name
        self.history = history

    def strike(self, kind: str, sig: int = signal.SIGKILL, **fields: Any) -> None:
        """Send this process ``sig`` now if the nemesis armed ``kind`` (and the arming has not expired).

        For SIGSTOP the nemesis sees the control file gone and sends SIGCONT later."""
        try:
            armed = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return
        if armed.get("kind") != kind or float(armed.get("until", 0)) < time.time():
            return
        with contextlib.suppress(OSError):
            self.path.unlink()  # the process that replaces this one must not die of it too
        self.history.emit("fault", kind=kind, phase="landed", target=self.name, **fields)
        os.kill(os.getpid(), sig)


def _settings(cfg: dict[str, Any]) -> Any:
    from sluice.config import Settings

    return Settings(**cfg["settings"])


def run_worker(cfg: dict[str, Any]) -> int:
    from sluice.redis.engine import RedisQueue
    from sluice.runtime.hooks import Hooks
    from sluice.runtime.options import WorkerOptions
    from sluice.runtime.telemetry import MemoryMetrics, Telemetry
    from sluice.store.jobs import DynamoJobStore
    from sluice.worker import Worker

    s = _settings(cfg)
    history = History(cfg["history"])
    control = Control(cfg["control_dir"], cfg["name"], history)
    app = Worker()

    @app.handler(QUEUE)
    def work(job: Any, ctx: Any) -> dict[str, str]:
        history.emit("invoke", job=job.id, token=ctx.token, attempt=job.attempt, t0=time.time())
        pause = float(job.payload.get("work_ms", 0)) / 2000
        time.sleep(pause)
        control.strike("kill_worker_mid_job", job=job.id, token=ctx.token)
        time.sleep(pause)
        return expected_result(job.payload)

    def before_write(ctx: Any) -> None:
        control.strike("pause_worker_before_write", signal.SIGSTOP, job=ctx.job_id, token=ctx.token)

    def before_ack(ctx: Any) -> None:
        control.strike("kill_worker_before_ack", job=ctx.job_id, token=ctx.token)

    logger: Any = logging.getLogger(f"sluice.chaos.{cfg['name']}")
    worker = app.bind(queue=RecordingQueue(RedisQueue.from_settings(s), history),
                      store=RecordingStore(DynamoJobStore.from_settings(s), history),
                      options=WorkerOptions(lease_ms=int(cfg["lease_ms"]),
                                            lease_batch=int(cfg.get("batch", 4))),
                      telemetry=Telemetry(MemoryMetrics(), logger),
                      worker_id=f"{cfg['name']}:{os.getpid()}",
                      hooks=Hooks(before_write=before_write, before_ack=before_ack))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    worker.run([QUEUE], stop=stop, idle_s=0.05)
    return 0


class _RecordedSource:
    """The relay's record source, recording what each poll read (for diagnosing a lost job)."""

    def __init__(self, source: Any, history: History) -> None:
        self._source, self._history = source, history

    def poll(self, timeout_ms: int, max_records: int) -> Any:
        records = self._source.poll(timeout_ms, max_records)
        by_partition: dict[int, list[int]] = {}
        for r in records:
            by_partition.setdefault(r.partition, []).append(r.offset)
        for p, offsets in by_partition.items():
            self._history.emit("read", partition=p, first=min(offsets), last=max(offsets), n=len(offsets))
        return records

    def __getattr__(self, name: str) -> Any:
        return getattr(self._source, name)


class _RecordedEngine:
    """The relay's engine, recording every push: which records, and what Redis made of them."""

    def __init__(self, engine: Any, history: History) -> None:
        self._engine, self._history = engine, history

    def push(self, queue: str, topic: str, partition: int, owner_token: int, records: Any) -> Any:
        t0 = time.time()
        try:
            out = self._engine.push(queue, topic, partition, owner_token, records)
        except Exception as exc:
            self._history.emit("push", t0=t0, partition=partition, owner=owner_token, outcome="error",
                               error=str(exc)[:200], first=records[0][0], last=records[-1][0])
            raise
        self._history.emit("push", t0=t0, partition=partition, owner=owner_token, outcome="ok",
                           first=records[0][0], last=records[-1][0], pushed=out.pushed, skipped=out.skipped,
                           jobs=[spec.job_id for _, spec in records])
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)


def run_relay(cfg: dict[str, Any]) -> int:
    from sluice.kafka.source import KafkaSource
    from sluice.recovery import for_relay
    from sluice.redis.engine import RedisQueue
    from sluice.relay import Relay
    from sluice.store.jobs import DynamoJobStore

    s = _settings(cfg)
    history = History(cfg["history"])
    control = Control(cfg["control_dir"], cfg["name"], history)

    def after_push(partition: int, queue: str, outcome: Any) -> None:
        control.strike("kill_relay_after_push", partition=partition, pushed=outcome.pushed)

    def terminate(*_: Any) -> None:
        raise SystemExit(0)  # run_until's finally commits and gives the partitions back

    signal.signal(signal.SIGTERM, terminate)
    engine, store = RedisQueue.from_settings(s), DynamoJobStore.from_settings(s)
    source = KafkaSource.from_settings(s)
    n = 0
    while True:  # one iteration = one scheduled invocation of the relay Lambda
        n += 1
        wrapped_engine, wrapped_source = for_relay(s, _RecordedEngine(engine, history), store,
                                                   _RecordedSource(source, history),
                                                   interval_s=float(cfg.get("checkpoint_s", 2.0)))
        relay = Relay(wrapped_engine, store, wrapped_source, None,
                      relay_id=f"{cfg['name']}-{os.getpid()}-{n}", poll_ms=100, ownership_s=0.5,
                      lease_ms=int(cfg["lease_ms"]), after_push=after_push)
        report = relay.run_until(relay.clock.now_ms() + int(float(cfg["invocation_s"]) * 1000))
        history.emit("relay_run", target=cfg["name"], replays=wrapped_source.recovery.replays,
                     **{k: v for k, v in report.as_dict().items() if isinstance(v, int)})


def main(argv: list[str]) -> int:
    role, cfg = argv[0], json.loads(argv[1])
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                        format=f"{cfg['name']} %(asctime)s %(levelname)s %(name)s %(message)s")
    return {"worker": run_worker, "relay": run_relay}[role](cfg)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
