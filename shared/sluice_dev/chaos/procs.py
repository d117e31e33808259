"""Child processes for the scenarios and the chaos run: spawn, signal, read their events.

Every child runs in its own session (so a Ctrl-C to the command does not hit it
first), and ``Child.stop``/``kill`` end exactly that process, by its pid.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from sluice_dev.local.servers import DUMMY_AWS_ENV


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    return {**os.environ, **DUMMY_AWS_ENV, "PYTHONUNBUFFERED": "1", **(extra or {})}


def process_state(pid: int) -> str:
    """The one-letter state from /proc (``T`` = stopped), or "" when the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[0]


class Child:
    """A Python module run as a child process. With ``events``, its stdout JSON lines are
    put on that queue (each with ``who``) by a reader thread as they arrive."""

    def __init__(self, name: str, module: str, args: Sequence[str], *, log_path: Path | None = None,
                 events: queue.Queue[dict[str, Any]] | None = None, stdin: bool = False,
                 env: Mapping[str, str] | None = None) -> None:
        self.name = name
        self._log: IO[bytes] | None = open(log_path, "ab") if log_path else None  # noqa: SIM115
        err: Any = self._log if self._log is not None else subprocess.DEVNULL
        out: Any = subprocess.PIPE if events is not None else err
        self.proc = subprocess.Popen([sys.executable, "-m", module, *args], stdout=out, stderr=err,
                                     stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                                     env=child_env(env), start_new_session=True)
        self.started_at = time.time()
        self._events = events
        if events is not None:
            threading.Thread(target=self._read, name=f"read-{name}", daemon=True).start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stdout is not None and self._events is not None
        for raw in self.proc.stdout:
            try:
                event = json.loads(raw)
            except ValueError:
                continue
            if isinstance(event, dict) and "event" in event:
                event.setdefault("who", self.name)
                self._events.put(event)

    def send_line(self, text: str = "go") -> None:
        assert self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError, OSError):
            self.proc.stdin.write((text + "\n").encode())
            self.proc.stdin.flush()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: int) -> bool:
        """Send ``sig`` if the process still runs; False if it was already gone."""
        if self.proc.poll() is not None:
            return False
        try:
            os.kill(self.proc.pid, sig)
        except ProcessLookupError:
            return False
        return True

    def stopped(self) -> bool:
        return process_state(self.proc.pid) in ("T", "t")

    def stop(self, timeout: float = 5.0) -> None:
        """SIGCONT (it may be frozen), SIGTERM, then SIGKILL after ``timeout``."""
        if self.proc.poll() is None:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._close()

    def kill(self) -> None:
        if self.signal(signal.SIGKILL):
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)
        self._close()

    def _close(self) -> None:
        if self.proc.poll() is not None:
            for stream in (self.proc.stdin,):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
        if self._log is not None and self.proc.poll() is not None:
            self._log.close()
            self._log = None
