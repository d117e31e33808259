"""Metrics and logs of the worker runtime, behind two tiny interfaces so tests can capture them.

Production uses Powertools: CloudWatch EMF metrics in namespace "Sluice" and a JSON
Logger. ``MemoryMetrics`` and any ``logging.Logger`` work as drop-ins.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Mapping
from typing import Any, Protocol

NAMESPACE = "Sluice"

JOBS_SUCCEEDED = "JobsSucceeded"
JOBS_FAILED = "JobsFailed"
JOBS_RETRIED = "JobsRetried"
JOBS_DEAD_LETTERED = "JobsDeadLettered"
JOBS_CANCELLED = "JobsCancelled"
LEASE_EXTENSIONS = "LeaseExtensions"
LEASES_LOST = "LeasesLost"
LEASES_RELEASED = "LeasesReleased"
FENCED_WRITES_REJECTED = "FencedWritesRejected"
JOB_DURATION = "JobDuration"  # ms, handler wall time
QUEUE_WAIT = "QueueWait"  # ms, enqueued -> handler start


class WorkerMetrics(Protocol):
    def count(self, name: str, value: float = 1) -> None: ...
    def observe_ms(self, name: str, ms: float) -> None: ...
    def flush(self) -> None: ...


class LogSink(Protocol):
    """The subset of ``logging.Logger`` (and Powertools ``Logger``) the runtime uses."""

    def debug(self, msg: object, *args: object, **kwargs: Any) -> None: ...
    def info(self, msg: object, *args: object, **kwargs: Any) -> None: ...
    def warning(self, msg: object, *args: object, **kwargs: Any) -> None: ...
    def error(self, msg: object, *args: object, **kwargs: Any) -> None: ...
    def exception(self, msg: object, *args: object, **kwargs: Any) -> None: ...


class MemoryMetrics:
    """Keeps every value in memory: for tests, benchmarks and the local stack."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[str, float] = defaultdict(float)
        self.observations: dict[str, list[float]] = defaultdict(list)
        self.flushes = 0

    def count(self, name: str, value: float = 1) -> None:
        with self._lock:
            self.counts[name] += value

    def observe_ms(self, name: str, ms: float) -> None:
        with self._lock:
            self.observations[name].append(ms)

    def flush(self) -> None:
        with self._lock:
            self.flushes += 1


class PowertoolsMetrics:
    """CloudWatch EMF through Powertools; one EMF line per ``flush`` (Powertools also
    flushes on its own once a metric holds 100 values)."""

    def __init__(self, namespace: str = NAMESPACE, service: str = "sluice-worker") -> None:
        from aws_lambda_powertools import Metrics

        self._metrics = Metrics(namespace=namespace, service=service)
        self._lock = threading.Lock()  # heartbeat and job threads add concurrently
        self._pending = False

    def count(self, name: str, value: float = 1) -> None:
        self._add(name, "Count", value)

    def observe_ms(self, name: str, ms: float) -> None:
        self._add(name, "Milliseconds", ms)

    def _add(self, name: str, unit: str, value: float) -> None:
        with self._lock:
            self._metrics.add_metric(name=name, unit=unit, value=value)
            self._pending = True

    def flush(self) -> None:
        with self._lock:
            if self._pending:  # an empty flush only produces a warning
                self._metrics.flush_metrics()
                self._pending = False


def default_logger() -> LogSink:
    from aws_lambda_powertools import Logger

    logger: LogSink = Logger(service="sluice-worker")
    return logger


class JobLogger:
    """A logger bound to one job: job id, queue, attempt and token ride on every line.

    Keys go through ``extra`` rather than Powertools' ``append_keys`` because several
    jobs log concurrently from different threads.
    """

    def __init__(self, sink: LogSink, fields: Mapping[str, object]) -> None:
        self._sink = sink
        self.fields = dict(fields)

    def bind(self, **more: object) -> JobLogger:
        return JobLogger(self._sink, {**self.fields, **more})

    def _extra(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        extra = {**self.fields, **kwargs.pop("extra", {})}
        return {"extra": extra, **kwargs}

    def debug(self, msg: str, *args: object, **kwargs: Any) -> None:
        self._sink.debug(msg, *args, **self._extra(kwargs))

    def info(self, msg: str, *args: object, **kwargs: Any) -> None:
        self._sink.info(msg, *args, **self._extra(kwargs))

    def warning(self, msg: str, *args: object, **kwargs: Any) -> None:
        self._sink.warning(msg, *args, **self._extra(kwargs))

    def error(self, msg: str, *args: object, **kwargs: Any) -> None:
        self._sink.error(msg, *args, **self._extra(kwargs))

    def exception(self, msg: str, *args: object, **kwargs: Any) -> None:
        self._sink.exception(msg, *args, **self._extra(kwargs))


class Telemetry:
    """Metrics plus the base logger, handed to every part of the runtime."""

    def __init__(self, metrics: WorkerMetrics | None = None, logger: LogSink | None = None) -> None:
        self.metrics: WorkerMetrics = metrics if metrics is not None else PowertoolsMetrics()
        self.logger: LogSink = logger if logger is not None else default_logger()

    def job_logger(self, **fields: object) -> JobLogger:
        return JobLogger(self.logger, fields)
