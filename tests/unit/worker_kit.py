"""Builders shared by the worker and runtime unit tests."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from sluice.runtime.hooks import NO_HOOKS, Hooks
from sluice.runtime.options import WorkerOptions
from sluice.runtime.telemetry import MemoryMetrics, Telemetry
from sluice.worker import Worker
from tests.unit.fakes import FakeQueue, FakeStore


@dataclass
class Line:
    level: str
    message: str
    extra: dict[str, Any]


@dataclass
class CaptureLog:
    """A LogSink that keeps every line with its structured keys."""

    lines: list[Line] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _log(self, level: str, msg: object, *args: object, **kwargs: Any) -> None:
        text = str(msg) % args if args else str(msg)
        with self._lock:
            self.lines.append(Line(level, text, dict(kwargs.get("extra") or {})))

    def debug(self, msg: object, *args: object, **kwargs: Any) -> None:
        self._log("debug", msg, *args, **kwargs)

    def info(self, msg: object, *args: object, **kwargs: Any) -> None:
        self._log("info", msg, *args, **kwargs)

    def warning(self, msg: object, *args: object, **kwargs: Any) -> None:
        self._log("warning", msg, *args, **kwargs)

    def error(self, msg: object, *args: object, **kwargs: Any) -> None:
        self._log("error", msg, *args, **kwargs)

    def exception(self, msg: object, *args: object, **kwargs: Any) -> None:
        self._log("error", msg, *args, **kwargs)

    def having(self, text: str) -> list[Line]:
        return [line for line in self.lines if text in line.message]


@dataclass
class Kit:
    app: Worker
    queue: FakeQueue
    store: FakeStore
    metrics: MemoryMetrics
    log: CaptureLog

    def worker(self, hooks: Hooks = NO_HOOKS, **options: Any) -> Worker:
        opts = {"lease_ms": 2_000, "margin_ms": 0, **options}
        return self.app.bind(queue=self.queue, store=self.store, options=WorkerOptions(**opts),
                             telemetry=Telemetry(self.metrics, self.log), worker_id="w-test", hooks=hooks)

    def count(self, name: str) -> float:
        return self.metrics.counts.get(name, 0)


def kit(queue: FakeQueue | None = None) -> Kit:
    return Kit(Worker(), queue or FakeQueue(), FakeStore(), MemoryMetrics(), CaptureLog())
