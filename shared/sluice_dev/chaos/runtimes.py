"""Where the chaos run's workers and relays run: ``--runtime lambda`` or ``--runtime process``.

A runtime starts the local servers and the pipeline's moving parts, tells the nemesis
which process to hit (``nemesis.Targets``), restarts servers (``nemesis.Servers``), and
stops its parts before the checker reads the stores.

- ``LambdaRuntime`` (the default): ``sluice dev``'s own stack (``local.dev.DevStack``):
  the local Lambda service with warm worker containers running the worker Lambda
  handler, dispatched by the relay through the Lambda Invoke API and by the scheduled
  safety net; the relay in containers of its own, invoked on a schedule. A container
  that dies is replaced at the next invocation, as Lambda does. See ``chaos.functions``.
- ``ProcessRuntime``: long-lived worker processes and a relay process
  (``chaos.agents``) under a supervisor that starts a dead one again.

Both record into one history (``sluice_dev.local.history``) and share the chaos handler,
the fault points and the relay's recording (``chaos.app``).
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from sluice_dev.chaos.history import History
from sluice_dev.chaos.procs import Child, process_state
from sluice_dev.local.stack import plain_settings

Say = Callable[[str], None]


class Runtime(Protocol):
    name: str
    lease_seconds: int  # the lease each chaos job is enqueued with
    # whether it polls the jobs table's stream into the countdown itself (``sluice dev`` does: the
    # countdown function's part); if not, the run does (``chaos.countdown``)
    counts_down_stream: bool

    def start(self, base: Any, say: Say) -> Any: ...
    def describe(self) -> str: ...
    def arming(self, target: str) -> str: ...
    def pick(self, target: str) -> int | None: ...
    def restart_redis(self) -> None: ...
    def restart_redis_shard(self, index: int) -> None: ...
    def restart_broker(self) -> None: ...
    def flush_registry_shard(self) -> str: ...
    def rotate_job_id_key(self) -> bytes: ...
    def activity(self) -> str: ...
    def processes(self) -> dict[int, str]: ...
    def stop_agents(self) -> dict[str, int]: ...
    def stop(self) -> None: ...


def make(name: str, options: Any, run_dir: Path, history: History) -> Runtime:
    if name == "lambda":
        return LambdaRuntime(options, run_dir, history)
    if name == "process":
        return ProcessRuntime(options, run_dir, history)
    raise ValueError(f"unknown chaos runtime {name!r} (lambda or process)")


def rotates(o: Any) -> bool:
    """Whether the run's nemesis may rotate the job id key: then the key lives in Secrets Manager."""
    from sluice_dev.chaos.nemesis import ROTATE_KIND

    return ROTATE_KIND in getattr(o, "extra_faults", ()) and bool(getattr(o, "faults", True))


# -- Lambda --------------------------------------------------------------------------------------------


class LambdaRuntime:
    """The local Lambda service of ``sluice dev``, its schedule and its dispatch, under the nemesis."""

    name = "lambda"
    counts_down_stream = True  # DevStack's stream poller (``local.dev._start_events``)
    WORKER_TIMEOUT_S = 8  # the worker function's timeout: short, so its time budget matters
    RELAY_EVERY_S = 5.0  # EventBridge's schedule for the relay (a minute in AWS)
    RELAY_TIMEOUT_S = 10.0  # each relay run lasts this minus a quarter (sluice dev's rule)
    SAFETY_NET_EVERY_S = 2.0  # the scheduled worker invocation for backlogs (a minute in AWS)

    def __init__(self, o: Any, run_dir: Path, history: History) -> None:
        self.o, self.dir, self.history = o, run_dir, history
        self.lease_seconds = max(1, round(o.lease_s))
        self.dev: Any = None
        self.tally: Counter[str] = Counter()  # what the worker invocations said (drain summaries)

    def start(self, base: Any, say: Say) -> Any:
        from sluice_dev.local.dev import DevOptions, DevStack

        o = self.o
        kafka = ("kafka_topic", "kafka_dead_letter_topic", "kafka_partitions", "kafka_consumer_group",
                 "relay_max_pending")
        overrides = {k: getattr(base, k) for k in kafka}
        overrides |= {"history_path": str(self.history.path.resolve()),
                      "default_lease_seconds": self.lease_seconds, "worker_batch": 30,
                      "retry_base_ms": 200, "retry_cap_ms": 2_000}
        options = DevOptions(state_dir=self.dir / "stack", handlers="sluice_dev.chaos.functions",
                             relay_handler="sluice_dev.chaos.functions:relay", workers=o.workers,
                             worker_timeout_s=self.WORKER_TIMEOUT_S, worker_idle_s=60.0,
                             relay_every_s=self.RELAY_EVERY_S, relay_timeout_s=self.RELAY_TIMEOUT_S,
                             safety_net_every_s=self.SAFETY_NET_EVERY_S, gateway_concurrency=1,
                             warm_workers=o.workers, history=False, log_level="WARNING", settings=overrides,
                             redis_shards=o.redis_shards, follow_events=False,
                             job_id_key_secret=rotates(o))
        self.dev = DevStack(options)
        self.dev.start(progress=lambda m: say(f"  {m}"))
        self.dev.lambdas.on_finish = self._finished
        return self.dev.settings

    def _finished(self, inv: Any) -> None:
        """Record each worker invocation's drain summary: how the time budget shaped it."""
        from sluice_dev.local.dev import WORKER_FUNCTION

        if inv.function != WORKER_FUNCTION:
            return
        r = inv.result if isinstance(inv.result, dict) else {}
        error = inv.error or ""
        stopped = str(r.get("stopped") or ("coalesced" if error.startswith("coalesced") else
                                           "timed_out" if error == "Task timed out" else
                                           "crashed" if "exited" in error or "unreachable" in error else
                                           "error"))
        self.tally[f"worker_stopped_{stopped}"] += 1
        self.tally["worker_jobs_released"] += int(r.get("released", 0))
        self.history.emit("invocation", function=inv.function, source=(inv.event or {}).get("source"),
                          stopped=stopped, leased=r.get("leased", 0), released=r.get("released", 0),
                          skipped_for_time=r.get("skipped_for_time", []), error=inv.error)

    def describe(self) -> str:
        return (f"{self.o.workers} worker containers (timeout {self.WORKER_TIMEOUT_S}s), relay every "
                f"{self.RELAY_EVERY_S:g}s in containers of its own, "
                f"safety net every {self.SAFETY_NET_EVERY_S:g}s")

    def arming(self, target: str) -> str:
        return "relay" if target.startswith("r") else "worker"

    def pick(self, target: str) -> int | None:
        """A live, running container of the target's function, busy with an invocation if one is."""
        from sluice_dev.local.dev import RELAY_FUNCTION, WORKER_FUNCTION

        if self.dev is None or self.dev.lambdas is None:
            return None
        function = RELAY_FUNCTION if target.startswith("r") else WORKER_FUNCTION
        live = [c for c in self.dev.lambdas.describe()
                if c["function"] == function and process_state(c["pid"]) not in ("", "T", "t", "Z")]
        chosen = sorted((c for c in live if c["busy"]), key=lambda c: c["pid"]) or sorted(
            live, key=lambda c: c["pid"])
        if not chosen:
            return None
        slot = int(target[1:]) if target[1:].isdigit() else 0
        return int(chosen[slot % len(chosen)]["pid"])

    def restart_redis(self) -> None:
        self.dev.stack.restart_redis()

    def restart_redis_shard(self, index: int) -> None:
        self.dev.stack.restart_redis_shard(index)

    def restart_broker(self) -> None:
        self.dev.stack.restart_broker()

    def flush_registry_shard(self) -> str:
        return str(self.dev.stack.flush_registry_shard())

    def rotate_job_id_key(self) -> bytes:
        from sluice_dev.local.job_id_secret import rotate

        return rotate(self.dev.settings)

    def counts(self) -> dict[str, int]:
        lambdas = self.dev.lambdas if self.dev is not None else None
        return {**(lambdas.counts if lambdas is not None else {}), **self.tally}

    def activity(self) -> str:
        c = self.counts()
        return (f"invocations={c.get('invocations', 0)} cold_starts={c.get('cold_starts', 0)} "
                f"crashed={c.get('crashed', 0)} timeouts={c.get('timeouts', 0)}")

    def processes(self) -> dict[int, str]:
        """Each live container by its function (``relay``, ``worker``, ...) and each server by name
        (``chaos.cpu``: the CPU each part takes)."""
        if self.dev is None:
            return {}
        out = _servers(self.dev.stack)
        if self.dev.lambdas is not None:
            out |= {int(c["pid"]): str(c["function"]).removeprefix("sluice-")
                    for c in self.dev.lambdas.describe()}
        return out

    def stop_agents(self) -> dict[str, int]:
        counts = self.counts()
        if self.dev is not None:
            self.dev.stop_functions()
        self.history.emit("lambda", **counts)
        return counts

    def stop(self) -> None:
        if self.dev is not None:
            self.dev.stop()


def _servers(stack: Any) -> dict[int, str]:
    """A local stack's server processes by name (``redis``, ``moto``, ``kafka-s3``, ``tansu``)."""
    out: dict[int, str] = {}
    for name, server in list(stack.servers.items()):
        with contextlib.suppress(Exception):  # one being restarted by the nemesis
            out[int(server.pid)] = "redis" if name.startswith("redis") else name
    return out


# -- processes ------------------------------------------------------------------------------------------


class Supervisor:
    """Keeps one process per slot alive: a slot whose process died gets a new one."""

    def __init__(self, spawn: Callable[[str], Child], names: list[str], events: History) -> None:
        self._spawn = spawn
        self.children = {name: spawn(name) for name in names}
        self._events = events
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.respawns = 0
        self._thread = threading.Thread(target=self._watch, name="chaos-supervisor", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(0.2):
            for name, child in list(self.children.items()):
                if not child.alive() and not self._stop.is_set():
                    self._events.emit("respawn", target=name, old_pid=child.pid,
                                      exit=child.proc.returncode)
                    child.kill()
                    with self._lock:
                        self.children[name] = self._spawn(name)
                    self.respawns += 1

    def pid(self, name: str) -> int | None:
        with self._lock:
            child = self.children.get(name)
        return child.pid if child is not None and child.alive() else None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for child in self.children.values():
            child.stop(timeout=10)


def create_topics(settings: Any, partitions: int) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    try:
        for name in (settings.kafka_topic, settings.kafka_dead_letter_topic):
            with contextlib.suppress(TopicAlreadyExistsError):
                admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()


class ProcessRuntime:
    """Worker and relay processes (``chaos.agents``), each slot kept alive by a supervisor."""

    name = "process"
    counts_down_stream = False
    lease_seconds = 30  # the workers lease with their own 2 s (``lease_ms``), whatever the job says

    def __init__(self, o: Any, run_dir: Path, history: History) -> None:
        from sluice_dev.local.stack import Stack

        self.o, self.dir, self.history = o, run_dir, history
        self.stack = Stack(state_dir=run_dir / "stack", redis_shards=o.redis_shards)
        self.supervisor: Supervisor | None = None
        self.settings: Any = None

    def start(self, base: Any, say: Say) -> Any:
        from sluice.backends.dynamodb import tables

        settings = self.stack.start_servers(base)
        if rotates(self.o):  # the key in Secrets Manager, where it can rotate (local.job_id_secret)
            from sluice_dev.local.job_id_secret import key_in_secrets_manager

            settings = key_in_secrets_manager(settings)
        self.settings = settings
        tables.ensure_all(settings)
        create_topics(settings, self.o.partitions)
        names = [f"w{i}" for i in range(self.o.workers)] + [f"r{i}" for i in range(self.o.relays)]
        self.supervisor = Supervisor(self._spawner(settings), names, self.history)
        return settings

    def describe(self) -> str:
        return f"{self.o.workers} worker processes, {self.o.relays} relay process"

    def _spawner(self, settings: Any) -> Callable[[str], Child]:
        o = self.o
        base = {"settings": plain_settings(settings), "history": str(self.history.path),
                "control_dir": str(self.dir / "control"), "lease_ms": int(o.lease_s * 1000)}

        def spawn(name: str) -> Child:
            role = "worker" if name.startswith("w") else "relay"
            cfg = {**base, "name": name}
            if role == "relay":
                cfg |= {"lease_ms": 3000, "invocation_s": 20, "checkpoint_s": 2.0}
            return Child(name, "sluice_dev.chaos.agents", [role, json.dumps(cfg)],
                         log_path=self.dir / "logs" / f"{name}.log")
        return spawn

    def arming(self, target: str) -> str:
        return target

    def pick(self, target: str) -> int | None:
        return self.supervisor.pid(target) if self.supervisor is not None else None

    def restart_redis(self) -> None:
        self.stack.restart_redis()

    def restart_redis_shard(self, index: int) -> None:
        self.stack.restart_redis_shard(index)

    def restart_broker(self) -> None:
        self.stack.restart_broker()

    def flush_registry_shard(self) -> str:
        return self.stack.flush_registry_shard()

    def rotate_job_id_key(self) -> bytes:
        from sluice_dev.local.job_id_secret import rotate

        assert self.settings is not None
        return rotate(self.settings)

    def activity(self) -> str:
        return f"respawns={self.supervisor.respawns if self.supervisor else 0}"

    def processes(self) -> dict[int, str]:
        out = _servers(self.stack)
        if self.supervisor is not None:
            for name in list(self.supervisor.children):
                pid = self.supervisor.pid(name)
                if pid is not None:
                    out[pid] = "relay" if name.startswith("r") else "worker"
        return out

    def stop_agents(self) -> dict[str, int]:
        respawns = self.supervisor.respawns if self.supervisor is not None else 0
        if self.supervisor is not None:
            self.supervisor.stop()
            self.supervisor = None
        return {"respawns": respawns}

    def stop(self) -> None:
        self.stop_agents()
        self.stack.stop()
