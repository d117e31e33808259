"""A worker wired to the fakes, with captured metrics and logs, and the Lambda context it runs in."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from sluice.worker.registry import Worker
from sluice.worker.runtime.options import WorkerOptions
from sluice.worker.runtime.telemetry import MemoryMetrics, Telemetry
from sluice_dev.fakes.queue import FakeQueue
from sluice_dev.fakes.store import FakeStore


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

    def worker(self, **options: Any) -> Worker:
        opts = {"lease_ms": 2_000, "margin_ms": 0, **options}
        return self.app.bind(queue=self.queue, store=self.store, options=WorkerOptions(**opts),
                             telemetry=Telemetry(self.metrics, self.log), worker_id="w-test")

    def count(self, name: str) -> float:
        return self.metrics.counts.get(name, 0)


def kit(queue: FakeQueue | None = None) -> Kit:
    return Kit(Worker(), queue or FakeQueue(), FakeStore(), MemoryMetrics(), CaptureLog())


class FakeLambdaContext:
    """The shape of awslambdaric's LambdaContext, with a real deadline ``budget_ms`` from now."""

    def __init__(self, budget_ms: int, function_name: str = "sluice-worker",
                 request_id: str = "6f1c1a8e-2a4b-4c1e-9d55-0c2b8f7e5a10") -> None:
        self._deadline = time.monotonic() + budget_ms / 1000
        self.aws_request_id = request_id
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = "512"
        self.invoked_function_arn = f"arn:aws:lambda:us-east-1:123456789012:function:{function_name}"
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = "2024/01/01/[$LATEST]0123456789abcdef"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))
