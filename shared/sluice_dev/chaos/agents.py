"""The chaos run's long-lived processes (``--runtime process``):
``python -m sluice_dev.chaos.agents worker|relay '<json config>'``.

A worker is the real worker runtime (``sluice.Worker.run``) on the real Redis engine and
jobs table, with its two ports wrapped by the history recorders (``sluice_dev.local.history``)
and the chaos handler (``chaos.app.worker_app``). A relay is the real ``sluice.relay.Relay``
with Redis-loss recovery (``sluice.relay.recovery``), run as a series of bounded invocations,
as the scheduled Lambda would. (``--runtime lambda`` runs the same pieces in the local
Lambda service instead: ``chaos.functions``.)

The nemesis places some faults exactly by arming a process slot through a control file
(``chaos.app.Control``); the process checks it at the matching point:

- ``kill_worker_mid_job``: inside the handler, after the job started;
- ``kill_worker_before_ack``: after the result write, before the ack;
- ``pause_worker_before_write``: SIGSTOP (not SIGKILL) after the runtime's own lease check and
  just before the fenced write, the gc-pause story under load; the nemesis sends SIGCONT;
- ``kill_relay_after_push``: after a Redis push returned, before the Kafka commit.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
from typing import Any

from sluice.backends.aws.family_gateway import LambdaFamilyGateway
from sluice.core import bus as ev
from sluice.core.bus import EventBus
from sluice.core.families import Countdown
from sluice.entry import root as wiring
from sluice_dev.chaos.app import QUEUE, TENANT, Control, kill_after_push, record_relay, worker_app
from sluice_dev.chaos.families import expected_result
from sluice_dev.chaos.keys import minting
from sluice_dev.chaos.skew import ClockFollower
from sluice_dev.local.history import open_history, record

__all__ = ["QUEUE", "expected_result", "main"]


def _settings(cfg: dict[str, Any]) -> Any:
    from sluice.core.config import Settings

    return Settings(**cfg["settings"])


def in_process_family_gateway(s: Any) -> LambdaFamilyGateway:
    """The gateway's family entry inside this process: the process runtime has no gateway
    function to invoke, so its agents hold the gateway's use case themselves (a harness only:
    a deployed worker never holds the job id key or a producer; docs/security.md)."""
    from sluice.backends.dynamodb.jobs import DynamoJobStore
    from sluice.backends.kafka.producer import KafkaJobLog
    from sluice.backends.redis.queue import RedisJobQueue
    from sluice.entry.gateway import Gateway
    from sluice.gateway.api import Api, Backends

    store = DynamoJobStore.from_settings(s)
    gateway = Gateway(Api(Backends(KafkaJobLog.from_settings(s), store, RedisJobQueue.from_settings(s),
                                   EventBus(), families=store.families), minting(s)))
    return LambdaFamilyGateway(lambda event: gateway(event, None))


def run_worker(cfg: dict[str, Any]) -> int:
    from sluice.backends.dynamodb.jobs import DynamoJobStore
    from sluice.backends.redis.queue import RedisJobQueue
    from sluice.worker.runtime.options import WorkerOptions
    from sluice.worker.runtime.telemetry import MemoryMetrics, Telemetry

    s = _settings(cfg)
    history = open_history(cfg["history"])
    control = Control(cfg["control_dir"], cfg["name"], history)
    logger: Any = logging.getLogger(f"sluice_dev.chaos.{cfg['name']}")
    app = worker_app(lambda: history, lambda: control, family_key=lambda: wiring.job_id_key(s))
    record(app.events, cfg["history"])  # after the nemesis's fault points, on the same bus
    store = DynamoJobStore.from_settings(s)
    worker = app.bind(
        queue=RedisJobQueue.from_settings(s), store=store, families=store.families,
        options=WorkerOptions(lease_ms=int(cfg["lease_ms"]), lease_batch=int(cfg.get("batch", 4))),
        telemetry=Telemetry(MemoryMetrics(), logger), worker_id=f"{cfg['name']}:{os.getpid()}",
        family_gateway=in_process_family_gateway(s))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    worker.run([QUEUE, TENANT], stop=stop, idle_s=0.05)
    return 0


def run_relay(cfg: dict[str, Any]) -> int:
    from sluice.backends.dynamodb.jobs import DynamoJobStore
    from sluice.backends.kafka.source import KafkaSource
    from sluice.backends.redis.relay_engine import RedisRelayEngine
    from sluice.entry import root as wiring
    from sluice.entry.relay import for_relay
    from sluice.relay import Relay, RelayConfig

    s = _settings(cfg)
    job_ids = wiring.job_id_verifier(s)  # every record's id and seal checked, as production does
    history = open_history(cfg["history"])
    control = Control(cfg["control_dir"], cfg["name"], history)
    ClockFollower(cfg["control_dir"], cfg["name"], history).start()  # the skew_relay_clock fault

    def terminate(*_: Any) -> None:
        raise SystemExit(0)  # run_until's finally commits and gives the partitions back

    signal.signal(signal.SIGTERM, terminate)
    engine, store = RedisRelayEngine.from_settings(s), DynamoJobStore.from_settings(s)
    source = KafkaSource.from_settings(s)
    bus = ev.EventBus()  # the relay's reads, pushes and config reads, as the history's lines
    # as the Lambda: a lost registry cache (a registry-shard flush) is loaded again from the queues table
    wiring.durable_registry(engine.conn, bus, s)
    bus.subscribe(record_relay(history), ev.RecordsRead, ev.Pushed, ev.ConfigRead)
    bus.subscribe(kill_after_push(control), ev.Pushed)  # after the push is recorded
    # settled children count down
    Countdown(store.families, in_process_family_gateway(s).release).subscribe(bus)
    n = 0
    while True:  # one iteration = one scheduled invocation of the relay Lambda
        n += 1
        recovery = for_relay(s, engine, store, source, events=bus,
                             interval_s=float(cfg.get("checkpoint_s", 2.0)))
        relay = Relay(engine, store, source, None, events=bus, job_ids=job_ids,
                      relay_id=f"{cfg['name']}-{os.getpid()}-{n}", hooks=recovery,
                      config=RelayConfig(poll_ms=100, ownership_s=0.5, lease_ms=int(cfg["lease_ms"])))
        report = relay.run_until(relay.clock.now_ms() + int(float(cfg["invocation_s"]) * 1000))
        history.emit("relay_run", target=cfg["name"], replays=recovery.replays,
                     **{k: v for k, v in report.as_dict().items() if isinstance(v, int)})


def main(argv: list[str]) -> int:
    role, cfg = argv[0], json.loads(argv[1])
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                        format=f"{cfg['name']} %(asctime)s %(levelname)s %(name)s %(message)s")
    return {"worker": run_worker, "relay": run_relay}[role](cfg)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
