"""CPU seconds by part of the local stack over a chaos run (the tenant nemesis's cost, issue 28).

On one machine every stage shares the cores: the tenant's flood (its enqueues in the controller,
Tansu's appends, moto's writes of the parking lot) takes CPU from the others' path, which in AWS
runs on machines of its own. ``bench_tenant.py`` compares these sums between a quiet run and a
nemesis run, so a reader can tell the relay's own extra cost (what production would feel) from
what the 2-core machine adds.

- ``CpuTally`` (pure): the sums from successive readings of cumulative CPU per (pid, part). A pid
  seen at the window's start counts from that reading; one that appears later counts from 0 (a
  process started within the window); one that disappears keeps its last reading. So a process
  that ends loses at most one interval of its CPU.
- ``read_cpu`` reads ``/proc/<pid>/stat`` for every process the runtime names
  (``Runtime.processes``: its function containers and servers) and ``/proc/self/task`` for the
  controller's own threads, named by their Python thread (``THREAD_PARTS``): the tenant's flood
  runs in its own thread there, as does the ordinary workload.
- ``CpuMeter`` samples on a thread of its own every ``interval_s`` between ``start`` and ``stop``.
- ``split`` is what the benchmark reports: each part's extra CPU in the nemesis run (against the
  quiet run's rate over the same window), the relay's share of it, and the relay's extra CPU per
  flood record.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CpuMeter", "CpuTally", "read_cpu", "split", "thread_part"]

TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

# The controller's threads by a part of their Python name: the tenant nemesis's flood, the ordinary
# workload, the Kafka producer's I/O thread both send through (kafka-python names it after the
# client id); the rest is the controller's (the local Lambda service, the drain, the servers' pipes).
THREAD_PARTS: tuple[tuple[str, str], ...] = (
    ("chaos-tenant", "flood"), ("chaos-workload", "workload"), ("network-thread", "kafka_client"),
)
# What production runs elsewhere, or not at all: the stack's servers and the harness.
MACHINE_PARTS = frozenset({"flood", "workload", "kafka_client", "controller", "moto", "kafka-s3", "tansu",
                           "redis"})


def thread_part(name: str) -> str:
    return next((part for mark, part in THREAD_PARTS if mark in name), "controller")


@dataclass
class CpuTally:
    """Sums cumulative CPU readings into seconds per part over a window."""

    base: dict[tuple[int, str], float] = field(default_factory=dict)
    last: dict[tuple[int, str], float] = field(default_factory=dict)
    started: bool = False

    def observe(self, readings: Mapping[tuple[int, str], float]) -> None:
        """One reading of cumulative CPU seconds per (pid or thread id, part)."""
        for key, cpu in readings.items():
            if key not in self.base:
                self.base[key] = cpu if not self.started else 0.0
            self.last[key] = max(cpu, self.last.get(key, 0.0))
        self.started = True

    def totals(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for key, cpu in self.last.items():
            out[key[1]] = out.get(key[1], 0.0) + max(0.0, cpu - self.base[key])
        return {part: round(s, 3) for part, s in sorted(out.items())}


def _stat_cpu(path: str) -> float | None:
    """utime + stime of a ``/proc/.../stat`` file, in seconds (None: gone)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2:].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / TICKS  # fields 14 and 15 of proc(5)


def read_cpu(processes: Mapping[int, str]) -> dict[tuple[int, str], float]:
    """Cumulative CPU per named process, and per thread of this process (its parts by name)."""
    out: dict[tuple[int, str], float] = {}
    for pid, part in processes.items():
        if pid == os.getpid():
            continue
        cpu = _stat_cpu(f"/proc/{pid}/stat")
        if cpu is not None:
            out[(pid, part)] = cpu
    names = {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in map(int, tids):
        cpu = _stat_cpu(f"/proc/self/task/{tid}/stat")
        if cpu is not None:
            out[(-tid, thread_part(names.get(tid, "")))] = cpu  # negative: a thread, never a pid
    return out


class CpuMeter:
    """Samples ``read_cpu`` of ``processes()`` every ``interval_s`` from ``start`` to ``stop``."""

    def __init__(self, processes: Callable[[], Mapping[int, str]], interval_s: float = 0.5) -> None:
        self.processes, self.interval_s = processes, interval_s
        self.tally = CpuTally()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = self._t1 = 0.0

    def _sample(self) -> None:
        with contextlib.suppress(Exception):  # a measurement must never break the run it measures
            self.tally.observe(read_cpu(self.processes()))

    def start(self) -> CpuMeter:
        self._t0 = time.monotonic()
        self._sample()
        self._thread = threading.Thread(target=self._run, name="chaos-cpu", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def stop(self) -> dict[str, Any]:
        """The window's CPU seconds per part, its length and its sum."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self._sample()
        self._t1 = time.monotonic()
        parts = self.tally.totals()
        return {"window_s": round(self._t1 - self._t0, 1), "total_s": round(sum(parts.values()), 2),
                "parts": parts}


def split(quiet: Mapping[str, Any], nemesis: Mapping[str, Any], flood_records: int) -> dict[str, Any]:
    """The nemesis's extra CPU seconds per part, the relay's share of the extra, and the relay's
    extra CPU per flood record in microseconds (``flood_records``: the tenant's accepted jobs).

    ``extra_s`` sets each part's CPU in the nemesis run against the quiet run's at the same rate
    over the nemesis's window (its ``window_s``: the flood makes that run longer, and most of a
    quiet run's CPU goes by time, not by job: the relay's polls, checkpoints and invocations, the
    workers' safety net, the servers' answers to them); ``extra_raw_s`` subtracts the quiet sums
    as they are. ``machine_extra_s``: the extra of the parts production runs elsewhere (the stack's
    servers, the harness and its in-process gateway), on this machine's cores."""
    q, n = quiet.get("parts", {}), nemesis.get("parts", {})
    q_window, n_window = float(quiet.get("window_s") or 0), float(nemesis.get("window_s") or 0)
    scale = n_window / q_window if q_window > 0 and n_window > 0 else 1.0
    parts = sorted({*q, *n})
    raw = {p: round(float(n.get(p, 0.0)) - float(q.get(p, 0.0)), 2) for p in parts}
    extra = {p: round(float(n.get(p, 0.0)) - float(q.get(p, 0.0)) * scale, 2) for p in parts}
    total = sum(extra.values())
    relay = extra.get("relay", 0.0)
    return {"extra_s": extra, "extra_raw_s": raw, "window_scale": round(scale, 3),
            "total_extra_s": round(total, 2), "relay_extra_s": relay,
            "relay_share_of_extra": round(relay / total, 3) if total > 0 else None,
            "machine_extra_s": round(sum(v for p, v in extra.items() if p in MACHINE_PARTS), 2),
            "relay_extra_us_per_flood_record": (round(relay * 1e6 / flood_records, 1) if flood_records
                                                else None)}
