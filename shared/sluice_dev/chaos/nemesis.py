"""The nemesis: a seeded, reproducible plan of faults, and the thread that injects them.

``plan(seed, ...)`` is pure: the same seed gives the same faults at the same times
against the same targets. Every fault kind appears at least once (the first round is a
seeded shuffle of all kinds), then kinds are drawn with weights. A target is a process
slot ("w1", "r0") or a server; what a slot means is the runtime's business
(``Targets``): the process runtime's worker process w1, or, in the Lambda runtime, a
worker container busy with a job when the fault comes (containers come and go, as
Lambda's do).

Kinds:
- ``kill_worker_mid_job`` / ``kill_worker_before_ack`` / ``kill_relay_after_push``:
  the target is armed through its control file and SIGKILLs itself at that exact
  point (``app.Control``); if none gets there within ``arm_s``, one is SIGKILLed from
  outside wherever it is (recorded as phase ``fallback``);
- ``pause_worker``: SIGSTOP for 1-3x the lease, then SIGCONT;
- ``pause_worker_before_write``: the same pause, placed by arming: the worker stops itself
  after the runtime's own lease check, just before its fenced write (the gc-pause story),
  so that storage has stale writes to refuse. Not landing within ``arm_s``: no pause;
- ``restart_redis``: redis-server killed and started empty on the same port (on a cluster,
  every master);
- ``restart_redis_shard`` (only on a cluster, ``shards`` above 1): one master killed and
  started empty on its port, with its slots: the other shards keep their data, and the
  relays must replay that shard's queues only (docs/redis-loss.md, "Many shards");
- ``restart_broker``: Tansu stopped and started again; its data lives in S3 (moto);
- ``skew_relay_clock``: the relay processes' wall clock is stepped ``offset_s`` (0.5-8 s,
  ahead or behind) away from the machine's, Redis's included, for ``hold_s`` (5-15 s),
  then back (``chaos.skew``: written to ``control/<stem>-clock.json``, which each relay
  process follows).

Two more kinds, planned only when asked for (``extra``; ``sluice chaos --add-fault``), so a
seed's plan without them is what it always was:
- ``flush_registry_shard``: the registry's Redis cache is lost, nothing else. On a cluster, the
  master holding ``sluice:queues`` (and its companions, same slot) loses all its data (FLUSHALL,
  no restart: its ACL users stay), the other shards keep theirs; on one node, the registry's keys
  only are deleted. Relay maintenance must still reach every queue (issue 29, item 3);
- ``rotate_job_id_key``: the job id key is rotated in Secrets Manager as an operator (or the
  rotation schedule) does: a new AWSCURRENT, the old one AWSPREVIOUS; the functions pick the new
  key up on the first id that names it, the workload mints with it from then on, and ids minted
  before keep verifying (``sluice.core.ids``). Planned once a run (see ``plan``).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from sluice_dev.chaos.history import History

KINDS = ("kill_worker_mid_job", "kill_worker_before_ack", "pause_worker", "pause_worker_before_write",
         "kill_relay_after_push", "restart_redis", "restart_broker", "skew_relay_clock")
WEIGHTS = {"kill_worker_mid_job": 4, "kill_worker_before_ack": 4, "pause_worker": 3,
           "pause_worker_before_write": 3, "kill_relay_after_push": 2, "restart_redis": 1,
           "restart_broker": 1, "skew_relay_clock": 1}
SHARD_KIND, SHARD_WEIGHT = "restart_redis_shard", 1  # planned only on a cluster: plans for one node unchanged
REGISTRY_KIND, ROTATE_KIND = "flush_registry_shard", "rotate_job_id_key"
EXTRA_WEIGHTS = {REGISTRY_KIND: 1, ROTATE_KIND: 1}  # planned only when asked for: other plans unchanged
EXTRA_KINDS = tuple(EXTRA_WEIGHTS)
TARGETS = {"restart_redis": "redis", "restart_broker": "broker", REGISTRY_KIND: "redis-registry",
           ROTATE_KIND: "job-id-key"}
ARMED = {"kill_worker_mid_job", "kill_worker_before_ack", "kill_relay_after_push"}
PAUSES = {"pause_worker", "pause_worker_before_write"}


@dataclass(frozen=True, slots=True)
class Fault:
    at_s: float  # seconds after the nemesis starts
    kind: str
    target: str  # a process slot ("w0", "r0") or the server ("redis", "broker")
    hold_s: float = 0.0  # how long a pause (or a clock skew) lasts
    offset_s: float = 0.0  # skew_relay_clock: how far the relay's clock is stepped

    def as_dict(self) -> dict[str, Any]:
        return {"at_s": round(self.at_s, 3), "kind": self.kind, "target": self.target,
                "hold_s": round(self.hold_s, 3), "offset_s": round(self.offset_s, 3)}


def plan(seed: int, duration_s: float, *, interval_s: float, lease_s: float, workers: int, relays: int,
         start_s: float = 3.0, tail_s: float = 5.0, shards: int = 1,
         extra: tuple[str, ...] = ()) -> list[Fault]:
    """``extra``: kinds of ``EXTRA_KINDS`` to plan too (each at least once, like every kind)."""
    unknown = set(extra) - set(EXTRA_KINDS)
    if unknown:
        raise ValueError(f"unknown extra fault kinds {sorted(unknown)} (known: {', '.join(EXTRA_KINDS)})")
    rng = random.Random(seed)
    added = [k for k in EXTRA_KINDS if k in extra]  # in a fixed order: the plan must not hang on extra's
    weights = (dict(WEIGHTS) | ({SHARD_KIND: SHARD_WEIGHT} if shards > 1 else {})
               | {k: EXTRA_WEIGHTS[k] for k in added})
    first = list(KINDS) + ([SHARD_KIND] if shards > 1 else []) + added
    rng.shuffle(first)
    faults: list[Fault] = []
    t = start_s
    while t <= duration_s - tail_s:
        kind = first.pop(0) if first else rng.choices(list(weights), weights=list(weights.values()))[0]
        offset = 0.0
        if kind in ("kill_relay_after_push", "skew_relay_clock"):
            target = f"r{rng.randrange(relays)}"
        elif kind in TARGETS:
            target = TARGETS[kind]
        elif kind == SHARD_KIND:
            target = f"redis-shard{rng.randrange(shards)}"
        else:
            target = f"w{rng.randrange(workers)}"
        hold = rng.uniform(1.0, 3.0) * lease_s if kind in PAUSES else 0.0
        if kind == "skew_relay_clock":
            hold, offset = rng.uniform(5.0, 15.0), rng.choice((-1, 1)) * rng.uniform(0.5, 8.0)
        faults.append(Fault(t, kind, target, hold, offset))
        if kind == ROTATE_KIND:
            # Once a run. An id verifies under the current key and one previous (core/limits:
            # KEY_WINDOW_MS), and production rotates every 30 days against a 14-day job life, so no
            # record in flight ever sees two rotations. A run's records stay in flight for up to the
            # whole run (backlog, delays, parking), so a second rotation here would make ids of the
            # first key unverifiable: a nemesis no deployment meets (the relay dead-letters them as
            # unminted; 8 rotations in 600 s lost 8,548 jobs of a 10,000-job run).
            del weights[ROTATE_KIND]
        t += rng.uniform(0.5, 1.5) * interval_s
    return faults


class Targets(Protocol):
    """Where the faults land: the processes of a runtime (``chaos.runtimes``)."""

    def arming(self, target: str) -> str:
        """The control file stem that ``target``'s processes check (``chaos.app.Control``)."""
        ...

    def pick(self, target: str) -> int | None:
        """The pid to signal for ``target`` now (a process busy with work if there is one), or None."""
        ...


class Servers(Protocol):
    def restart_redis(self) -> None: ...
    def restart_redis_shard(self, index: int) -> None: ...
    def restart_broker(self) -> None: ...

    def flush_registry_shard(self) -> str:
        """Lose the registry's Redis cache (module docs); says what was flushed, for the history."""
        ...

    def rotate_job_id_key(self) -> str:
        """Rotate the job id key; says the new key's id (``sluice.core.ids.key_id``)."""
        ...


def send(pid: int, sig: int) -> bool:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


class Nemesis:
    def __init__(self, faults: list[Fault], targets: Targets, servers: Servers, history: History,
                 control_dir: Path, *, arm_s: float = 4.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.faults, self.targets, self.servers, self.history = faults, targets, servers, history
        self.control_dir = control_dir
        self.arm_s = arm_s
        self.clock = clock
        self.injected: dict[str, int] = {}
        self._timers: list[threading.Timer] = []
        self._paused: set[int] = set()
        self._lock = threading.Lock()
        self._armings = 0

    def run(self, stop: threading.Event) -> None:
        started = self.clock()
        for fault in self.faults:
            if stop.wait(max(0.0, started + fault.at_s - self.clock())):
                return
            try:
                self.inject(fault)
            except Exception as exc:  # a failed restart must not end the run: record it and go on
                self.history.emit("fault", kind=fault.kind, target=fault.target, phase="error",
                                  error=str(exc)[:200])

    def inject(self, f: Fault) -> None:
        self.history.emit("fault", kind=f.kind, target=f.target, phase="injected", hold_s=f.hold_s,
                          **({"offset_s": f.offset_s} if f.offset_s else {}))
        self.injected[f.kind] = self.injected.get(f.kind, 0) + 1
        if f.kind in ARMED:
            self._arm(f)
        elif f.kind == "pause_worker_before_write":
            self._arm_pause(f)
        elif f.kind == "pause_worker":
            pid = self.targets.pick(f.target)
            if pid is not None and send(pid, signal.SIGSTOP):
                self._paused_until(pid, f)
        elif f.kind == "restart_redis":
            self.servers.restart_redis()
        elif f.kind == SHARD_KIND:
            self.servers.restart_redis_shard(int(f.target.removeprefix("redis-shard")))
        elif f.kind == "restart_broker":
            self.servers.restart_broker()
        elif f.kind in (REGISTRY_KIND, ROTATE_KIND):
            done = (self.servers.flush_registry_shard() if f.kind == REGISTRY_KIND
                    else self.servers.rotate_job_id_key())
            self.history.emit("fault", kind=f.kind, target=f.target, phase="done", detail=done)
        elif f.kind == "skew_relay_clock":
            self._skew(f)

    def _skew(self, f: Fault) -> None:
        from sluice_dev.chaos.skew import clock_file

        self._armings += 1
        path = clock_file(self.control_dir, self.targets.arming(f.target))
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"offset_s": f.offset_s, "until": time.time() + f.hold_s,
                                   "id": str(self._armings)}))
        tmp.replace(path)

    def _write_arming(self, f: Fault) -> tuple[Path, str]:
        self._armings += 1
        arming_id = str(self._armings)
        path = self.control_dir / f"{self.targets.arming(f.target)}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"kind": f.kind, "until": time.time() + self.arm_s, "id": arming_id}))
        tmp.replace(path)
        return path, arming_id

    def _landed(self, arming_id: str) -> int | None:
        """The pid of the process that took this arming, or None while nobody has."""
        for claimed in self.control_dir.glob(f"landed-{arming_id}-*"):
            with contextlib.suppress(ValueError):
                return int(claimed.name.rsplit("-", 1)[1])
        return None

    def _disarm(self, path: Path, arming_id: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            if json.loads(path.read_text()).get("id") == arming_id:  # not a newer fault's arming
                path.unlink()

    def _arm(self, f: Fault) -> None:
        path, arming_id = self._write_arming(f)

        def fallback() -> None:
            if self._landed(arming_id) is not None:
                return
            self._disarm(path, arming_id)  # nobody got to the point: kill one wherever it is
            pid = self.targets.pick(f.target)
            if pid is not None and send(pid, signal.SIGKILL):
                self.history.emit("fault", kind=f.kind, target=f.target, phase="fallback", victim=pid)

        self._later(self.arm_s, fallback)

    def _arm_pause(self, f: Fault) -> None:
        """The worker stops itself at the point; once one has, wake it ``hold_s`` later."""
        path, arming_id = self._write_arming(f)
        deadline = self.clock() + self.arm_s

        def watch() -> None:
            pid = self._landed(arming_id)
            if pid is not None:
                self._paused_until(pid, f)
            elif self.clock() < deadline:
                self._later(0.05, watch)
            else:
                self._disarm(path, arming_id)

        self._later(0.05, watch)

    def _paused_until(self, pid: int, f: Fault) -> None:
        with self._lock:
            self._paused.add(pid)
        self._later(f.hold_s, lambda: self._resume(pid, f))

    def _resume(self, pid: int, f: Fault) -> None:
        with self._lock:
            if pid not in self._paused:
                return
            self._paused.discard(pid)
        send(pid, signal.SIGCONT)
        self.history.emit("fault", kind=f.kind, target=f.target, phase="resumed", victim=pid)

    def _later(self, delay: float, fn: Callable[[], None]) -> None:
        timer = threading.Timer(delay, fn)
        timer.daemon = True
        self._timers.append(timer)
        timer.start()

    def close(self) -> None:
        """Cancel what is pending and wake every paused process."""
        for timer in self._timers:
            timer.cancel()
        with self._lock:
            paused, self._paused = set(self._paused), set()
        for pid in paused:
            send(pid, signal.SIGCONT)
        for path in self.control_dir.glob("*.json"):
            with contextlib.suppress(OSError):
                path.unlink()
