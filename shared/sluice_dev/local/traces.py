"""A tracer provider that writes every ended span as one JSON line: ``sluice dev --traces FILE``.

The OpenTelemetry SDK is the deployer's choice and not one of the tooling's dependencies, so the
local stack implements the API's own interfaces (``TracerProvider``, ``Tracer``, ``Span``) with the
least an exporter needs: ids (random, 128 and 64 bits), the parent from the context, the times
given or now, attributes, status and links. Each local function's process installs one as the
global provider (``install``, from ``sluice_dev.local.container``) before its handler loads, so the
spans ``sluice.backends.otel`` emits there land in one file, every process appending whole lines
(``O_APPEND``: a line is one ``write``).

A line: ``{"name", "trace_id", "span_id", "parent_span_id", "kind", "start_ns", "end_ns",
"attributes", "status", "links", "service"}``; ``read`` loads a file of them.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.util import types
from opentelemetry.util._decorator import _agnosticcontextmanager  # the API's own (its Tracer's signature)

Sink = Callable[[dict[str, Any]], None]
_random = random.SystemRandom()


class RecordedSpan(trace.Span):
    """A span that hands its record to ``sink`` when it ends (once)."""

    def __init__(self, name: str, context: SpanContext, parent: SpanContext | None, kind: SpanKind,
                 start_ns: int, sink: Sink, service: str) -> None:
        self._name, self._context, self._parent, self._kind = name, context, parent, kind
        self._start, self._sink, self._service = start_ns, sink, service
        self._attributes: dict[str, Any] = {}
        self._links: list[dict[str, str]] = []
        self._events: list[dict[str, Any]] = []
        self._status = ("UNSET", "")
        self._ended = False
        self._lock = threading.Lock()

    def get_span_context(self) -> SpanContext:
        return self._context

    def is_recording(self) -> bool:
        return not self._ended

    def set_attributes(self, attributes: Mapping[str, types.AttributeValue]) -> None:
        for key, value in attributes.items():
            self.set_attribute(key, value)

    def set_attribute(self, key: str, value: types.AttributeValue) -> None:
        if not self._ended:
            self._attributes[key] = list(value) if isinstance(value, Sequence) and not isinstance(
                value, str | bytes) else value

    def add_event(self, name: str, attributes: types.Attributes = None, timestamp: int | None = None) -> None:
        if not self._ended:
            self._events.append({"name": name, "attributes": dict(attributes or {}),
                                 "at_ns": timestamp or time.time_ns()})

    def add_link(self, context: SpanContext, attributes: types.Attributes = None) -> None:
        if not self._ended:
            self._links.append({"trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}"})

    def update_name(self, name: str) -> None:
        self._name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        if isinstance(status, Status):
            self._status = (status.status_code.name, status.description or "")
        else:
            self._status = (status.name, description or "")

    def record_exception(self, exception: BaseException, attributes: types.Attributes = None,
                         timestamp: int | None = None, escaped: bool = False) -> None:
        self.add_event("exception", {"exception.type": type(exception).__name__}, timestamp)

    def end(self, end_time: int | None = None) -> None:
        with self._lock:
            if self._ended:
                return
            self._ended = True
        c, p = self._context, self._parent
        self._sink({"name": self._name, "trace_id": f"{c.trace_id:032x}", "span_id": f"{c.span_id:016x}",
                    "parent_span_id": f"{p.span_id:016x}" if p is not None else None,
                    "kind": self._kind.name, "start_ns": self._start, "end_ns": end_time or time.time_ns(),
                    "attributes": self._attributes, "status": self._status[0],
                    "status_description": self._status[1], "links": self._links, "events": self._events,
                    "service": self._service})


class RecordingTracer(trace.Tracer):
    def __init__(self, sink: Sink, service: str) -> None:
        self._sink, self._service = sink, service

    def start_span(self, name: str, context: Context | None = None, kind: SpanKind = SpanKind.INTERNAL,
                   attributes: types.Attributes = None, links: Sequence[Link] | None = None,
                   start_time: int | None = None, record_exception: bool = True,
                   set_status_on_exception: bool = True) -> trace.Span:
        found = trace.get_current_span(context).get_span_context()
        parent = found if found.is_valid else None
        sampled = TraceFlags(TraceFlags.SAMPLED)
        own = SpanContext(trace_id=parent.trace_id if parent is not None else _random.getrandbits(128) or 1,
                          span_id=_random.getrandbits(64) or 1, is_remote=False,
                          trace_flags=parent.trace_flags if parent is not None else sampled)
        span = RecordedSpan(name, own, parent, kind, start_time or time.time_ns(), self._sink, self._service)
        span.set_attributes(dict(attributes or {}))
        for link in links or ():
            span.add_link(link.context, link.attributes)
        return span

    @_agnosticcontextmanager
    def start_as_current_span(self, name: str, context: Context | None = None,
                              kind: SpanKind = SpanKind.INTERNAL, attributes: types.Attributes = None,
                              links: Sequence[Link] | None = None, start_time: int | None = None,
                              record_exception: bool = True, set_status_on_exception: bool = True,
                              end_on_exit: bool = True) -> Iterator[trace.Span]:
        span = self.start_span(name, context, kind, attributes, links, start_time)
        with trace.use_span(span, end_on_exit=end_on_exit, record_exception=record_exception,
                            set_status_on_exception=set_status_on_exception) as current:
            yield current


class RecordingProvider(trace.TracerProvider):
    """Every tracer's spans to ``sink`` (a ``JsonLines`` file, or a list's ``append`` in tests)."""

    def __init__(self, sink: Sink, service: str = "") -> None:
        self._sink, self._service = sink, service

    def get_tracer(self, instrumenting_module_name: str, instrumenting_library_version: str | None = None,
                   schema_url: str | None = None, attributes: types.Attributes = None) -> trace.Tracer:
        return RecordingTracer(self._sink, self._service)


class JsonLines:
    """Appends each span as one line to ``path``, whole lines only, from any process or thread."""

    def __init__(self, path: str | Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def __call__(self, record: dict[str, Any]) -> None:
        os.write(self.fd, (json.dumps(record, default=str, separators=(",", ":")) + "\n").encode())


def install(path: str | Path, service: str) -> None:
    """Make a ``RecordingProvider`` writing to ``path`` the process's global tracer provider."""
    trace.set_tracer_provider(RecordingProvider(JsonLines(path), service))


def read(path: str | Path) -> list[dict[str, Any]]:
    """The spans a file holds (none if it does not exist)."""
    p = Path(path)
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
