"""The ``skew_relay_clock`` fault: the relay's host clock runs ahead of (or behind) Redis's.

A relay process of the chaos run (``chaos.functions.relay``, ``chaos.agents.run_relay``)
starts a ``ClockFollower``, which reads ``control/<stem>-clock.json`` (written by the
nemesis: ``{"offset_s", "until", "id"}``) every ``POLL_S`` and sets this process's wall
clock ``offset_s`` away from the machine's until ``until`` (machine time), then back:
a host whose clock is stepped, as NTP does, and stepped back.

How: ``time.time`` and ``time.time_ns`` are replaced in this process only, so every
wall-clock read of the relay's code sees the skew: the relay's ``Clock`` port
(``relay.ports.SystemClock``: its run deadlines), the engine's push-time checks
(``redis.engine``: the delay horizon), the store's timestamps (``store.jobs``:
``updated_at_ms``, ``finished_at_ms``, ``expires_at`` of the relay's writes), the
recovery checkpoints, and the Kafka client's own timers. Redis keeps the machine's
time (scripts read ``TIME``), as do DynamoDB and every other process. Not skewed:
``datetime.now()`` reads (botocore's request signing; moto does not check it) and
``time.monotonic`` (a clock step does not move it on a real host either).

The history keeps the machine's clock (``local.history.wall`` is bound at import), so
the checker's timelines stay comparable across processes.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from pathlib import Path
from typing import Any

from sluice_dev.local.history import History, wall

POLL_S = 0.2
_REAL_TIME_NS = time.time_ns
_offset_ns = 0


def _skewed_time() -> float:
    return (_REAL_TIME_NS() + _offset_ns) / 1e9


def _skewed_time_ns() -> int:
    return _REAL_TIME_NS() + _offset_ns


def set_offset(seconds: float) -> None:
    """This process's wall clock runs ``seconds`` ahead of the machine's (behind if negative; 0: none)."""
    global _offset_ns
    _offset_ns = round(seconds * 1e9)
    if _offset_ns:
        time.time, time.time_ns = _skewed_time, _skewed_time_ns
    else:
        time.time, time.time_ns = wall, _REAL_TIME_NS


def offset_s() -> float:
    return _offset_ns / 1e9


def clock_file(control_dir: str | Path, stem: str) -> Path:
    return Path(control_dir) / f"{stem}-clock.json"


class ClockFollower:
    """Keeps this process's clock offset as the nemesis's clock file says; records each step."""

    def __init__(self, control_dir: str | Path, stem: str, history: History) -> None:
        self.path = clock_file(control_dir, stem)
        self.stem, self.history = stem, history
        self._applied: tuple[str, float] = ("", 0.0)  # (arming id, offset) in force

    def wanted(self) -> tuple[str, float]:
        try:
            armed: dict[str, Any] = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return ("", 0.0)
        if float(armed.get("until", 0)) < wall():
            return ("", 0.0)
        return (str(armed.get("id", "")), float(armed.get("offset_s", 0.0)))

    def step(self) -> None:
        want = self.wanted()
        if want == self._applied:
            return
        arming, offset = want
        set_offset(offset)
        if offset:
            self.history.emit("fault", kind="skew_relay_clock", target=self.stem, phase="landed",
                              offset_s=offset, arming=arming)
        else:
            self.history.emit("fault", kind="skew_relay_clock", target=self.stem, phase="resumed",
                              arming=self._applied[0])
        self._applied = want

    def start(self) -> ClockFollower:
        def follow() -> None:
            while True:
                with contextlib.suppress(Exception):  # a torn file: read it again next round
                    self.step()
                time.sleep(POLL_S)

        threading.Thread(target=follow, name="chaos-clock", daemon=True).start()
        return self
