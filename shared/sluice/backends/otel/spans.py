"""The spans: the gateway's enqueue span (started around its call), and the rest observed on the bus.

One job, one trace (docs/worker.md, Traces)::

    caller's span (the traceparent header, or the client's current span)
    └─ sluice.enqueue            gateway: check, admit, seal, append (its context is sealed in the record)
       ├─ sluice.push            relay: the push.lua call that took the record (one span per job)
       └─ sluice.lease           worker: from the lease call to the lease's end (ack, fail, release, lost)
          ├─ sluice.grant        the fencing token's grant
          ├─ sluice.handler      the handler; a child's sluice.enqueue (internal function) is its child
          │  ├─ sluice.fenced_write   each FencedTable write of the handler
          │  └─ sluice.fenced_call    each ctx.http call (method, host, status: no path, no body)
          └─ sluice.fenced_write      the result's write under the fencing token

The push is the lease's sibling: Redis holds the record's context (the enqueue span's), so the
worker's spans hang from it, and the relay, which pushes a batch at once, starts no span before its
call. Every span but the enqueue span is built after the fact from the events' own times (``t0``,
``at``): nothing on the path is wrapped, and a bus nobody traces costs nothing.

Spans carry ids, names, counts and outcomes, never a payload, a result or an error's message (which
may quote either): an error is its class's name or its code. ``TraceObserver`` keeps the open lease
and handler spans of the jobs this process holds, at most ``MAX_OPEN`` (the oldest are ended, marked
``sluice.abandoned``, past that: an attempt whose end was never told must not grow the process).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Final

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from sluice.core import bus as ev
from sluice.core import traces
from sluice.core.traces import Attribute, OpenSpan
from sluice.core.version import __version__

TRACER: Final = "sluice"
MAX_OPEN: Final = 10_000  # open lease (and handler) spans kept per process
SYSTEM: Final = {"messaging.system": "sluice"}
# The spans' names and every attribute they may carry (docs/worker.md, "Traces"): telemetry names, not
# code, which the docs may give as they are (tests/unit/test_doc_names.py); ids, names, counts and
# outcomes only, never a payload (tests/stack/test_traces_stack.py holds the spans to this list).
SPAN_NAMES: Final = frozenset(f"sluice.{name}" for name in (
    "enqueue", "enqueue_batch", "enqueue_children", "fire", "push", "lease", "grant", "handler",
    "fenced_write", "fenced_call"))
ATTRIBUTES: Final = frozenset({"messaging.system", *(f"sluice.{name}" for name in (
    "queue", "job", "jobs", "parent", "schedule", "partition", "outcome", "attempt", "lease", "token",
    "write", "table", "abandoned", "method", "host", "status"))})
# The lease span's outcome by the Redis call that ended it (FailReported says retry, dead or cancelled)
_REDIS_ENDINGS: Final[dict[type[ev.Event], str]] = {ev.Acked: "acked", ev.Released: "released"}


def context_of(traceparent: str | None) -> Context | None:
    """An OpenTelemetry context whose current span is ``traceparent``'s (remote), or None."""
    found = traces.parse(traceparent)
    if found is None:
        return None
    remote = SpanContext(trace_id=int(found.trace_id, 16), span_id=int(found.span_id, 16), is_remote=True,
                         trace_flags=TraceFlags(int(found.flags, 16)))
    return trace.set_span_in_context(NonRecordingSpan(remote))


def traceparent_of(span: trace.Span) -> str | None:
    """``span``'s own W3C traceparent; None when it has no valid context (no SDK: the API's no-op)."""
    c = span.get_span_context()
    if not c.is_valid:
        return None
    return f"{traces.VERSION}-{c.trace_id:032x}-{c.span_id:016x}-{int(c.trace_flags):02x}"


def _ns(seconds: float) -> int:
    return int(seconds * 1_000_000_000)


def _named(attributes: Mapping[str, Attribute]) -> dict[str, Attribute]:
    return {f"sluice.{name}": value for name, value in attributes.items()}


class _Open:
    """The gateway's span around its call (``traces.OpenSpan``)."""

    __slots__ = ("_span", "traceparent")

    def __init__(self, span: trace.Span, parent: str | None) -> None:
        self._span = span
        # With no SDK the API's span has no context: the caller's own goes on with the job.
        self.traceparent = traceparent_of(span) or parent

    def set(self, **attributes: Attribute) -> None:
        self._span.set_attributes(_named(attributes))

    def end(self, error: str = "") -> None:
        if error:
            self._span.set_status(Status(StatusCode.ERROR, error))
        self._span.end()


class OtelEnqueueSpans:
    """``traces.EnqueueSpans``: ``sluice.<kind>`` (enqueue, enqueue_batch, enqueue_children, fire), a
    producer span under the caller's span, or the root of a new trace."""

    def __init__(self, provider: trace.TracerProvider | None = None) -> None:
        self.tracer = trace.get_tracer(TRACER, __version__, tracer_provider=provider)

    def start(self, kind: str, parent: str | None, queue: str) -> OpenSpan:
        span = self.tracer.start_span(f"sluice.{kind}", context=context_of(parent), kind=SpanKind.PRODUCER,
                                      attributes={**SYSTEM, "sluice.queue": queue})
        return _Open(span, parent)


class TraceObserver:
    """The relay's and the worker's spans, from the events of a bus (``subscribe``), and the handler
    spans' contexts for the children a handler starts (``traces.HandlerTraces``)."""

    def __init__(self, provider: trace.TracerProvider | None = None) -> None:
        self.tracer = trace.get_tracer(TRACER, __version__, tracer_provider=provider)
        self._lock = threading.Lock()
        self._leases: dict[str, tuple[int, trace.Span]] = {}  # job -> (its lease token, its lease span)
        self._handlers: dict[str, trace.Span] = {}  # job -> its running handler's span

    def subscribe(self, bus: ev.EventBus) -> None:
        bus.subscribe(self, ev.Pushed, ev.Leased, ev.Granted, ev.HandlerStarted, ev.HandlerEnded,
                      ev.ResultWritten, ev.ResultRefused, ev.FencedWrite, ev.FencedCall, ev.Acked,
                      ev.FailReported, ev.Released, ev.LeaseGone, ev.Finished)

    def handler_traceparent(self, job_id: str) -> str | None:
        span = self._handlers.get(job_id)
        return None if span is None else traceparent_of(span)

    def __call__(self, e: ev.Event) -> None:  # noqa: C901 - one arm per event reads best
        if isinstance(e, ev.Pushed):
            self._pushed(e)
        elif isinstance(e, ev.Leased):
            self._leased(e)
        elif isinstance(e, ev.HandlerStarted):
            self._handler_started(e)
        elif isinstance(e, ev.HandlerEnded):
            span = self._handlers.pop(e.job, None)
            if span is not None:
                span.set_attribute("sluice.outcome", e.outcome)
                if e.outcome != "returned":
                    span.set_status(Status(StatusCode.ERROR, e.outcome))
                span.end(_ns(e.at))
        elif isinstance(e, ev.Granted):
            self._child(e.job, "sluice.grant", e, {"outcome": e.outcome, "token": e.token or 0})
        elif isinstance(e, ev.ResultWritten | ev.ResultRefused):
            self._child(e.job, "sluice.fenced_write", e, {"write": "result", "outcome": e.outcome,
                                                          "token": e.token})
        elif isinstance(e, ev.FencedWrite):
            self._child(e.job, "sluice.fenced_write", e, {"write": e.kind, "table": e.table,
                                                          "outcome": e.outcome, "token": e.token},
                        under_handler=True)
        elif isinstance(e, ev.FencedCall):  # no URL path or query: they may hold what a payload does
            self._child(e.job, "sluice.fenced_call", e, {"method": e.method, "host": e.host,
                                                         "status": e.status, "outcome": e.outcome,
                                                         "token": e.token}, under_handler=True)
        elif isinstance(e, ev.Acked | ev.FailReported | ev.Released):
            # Redis was told: the lease ends here (a failed call leaves it held: Finished ends it)
            if e.outcome != "error":
                self._end_lease(e.job, e.lease, e.at, _REDIS_ENDINGS.get(type(e)) or e.outcome)
        elif isinstance(e, ev.LeaseGone):
            if not e.again:
                self._end_lease(e.job, e.lease, e.at, "lease_lost", error=True)
        elif isinstance(e, ev.Finished):
            self._end_lease(e.job, e.lease, e.at, e.outcome)

    # -- relay ------------------------------------------------------------------------------------

    def _pushed(self, e: ev.Pushed) -> None:
        common: dict[str, Any] = {**SYSTEM, "sluice.queue": e.queue, "sluice.partition": e.partition,
                                  "sluice.outcome": e.outcome}
        for job, traceparent in e.traced:
            span = self.tracer.start_span("sluice.push", context=context_of(traceparent),
                                          kind=SpanKind.CONSUMER, start_time=_ns(e.t0),
                                          attributes={**common, "sluice.job": job})
            span.end(_ns(e.at))

    # -- worker -----------------------------------------------------------------------------------

    def _leased(self, e: ev.Leased) -> None:
        if e.traceparent is None:
            return
        span = self.tracer.start_span("sluice.lease", context=context_of(e.traceparent),
                                      kind=SpanKind.CONSUMER,
                                      start_time=_ns(e.t0 if e.t0 is not None else e.at),
                                      attributes={**SYSTEM, "sluice.job": e.job, "sluice.queue": e.queue,
                                                  "sluice.attempt": e.attempt, "sluice.lease": e.lease})
        with self._lock:
            old = self._leases.pop(e.job, None)
            self._leases[e.job] = (e.lease, span)
            overflow = [self._leases.pop(next(iter(self._leases)))[1]
                        for _ in range(len(self._leases) - MAX_OPEN)]
        for stale in ([old[1]] if old is not None else []) + overflow:
            stale.set_attribute("sluice.abandoned", True)
            stale.end(_ns(e.at))

    def _handler_started(self, e: ev.HandlerStarted) -> None:
        held = self._leases.get(e.job)
        if held is None:
            return
        span = self.tracer.start_span("sluice.handler", context=trace.set_span_in_context(held[1]),
                                      start_time=_ns(e.at),
                                      attributes={"sluice.job": e.job, "sluice.queue": e.queue,
                                                  "sluice.attempt": e.attempt, "sluice.token": e.token})
        with self._lock:
            self._handlers[e.job] = span

    def _child(self, job: str, name: str, e: ev.CallEnded, attributes: Mapping[str, Attribute], *,
               under_handler: bool = False) -> None:
        """A span of one call (``e.t0`` to ``e.at``) under the job's handler span or lease span."""
        parent = self._handlers.get(job) if under_handler else None
        if parent is None:
            held = self._leases.get(job)
            if held is None:
                return
            parent = held[1]
        span = self.tracer.start_span(name, context=trace.set_span_in_context(parent), kind=SpanKind.CLIENT,
                                      start_time=_ns(e.t0),
                                      attributes={"sluice.job": job, **_named(attributes)})
        if e.outcome not in ("ok", "written", "already_written"):
            span.set_status(Status(StatusCode.ERROR, e.outcome))
        span.end(_ns(e.at))

    def _end_lease(self, job: str, lease: int, at: float, outcome: str, *, error: bool = False) -> None:
        with self._lock:
            held = self._leases.get(job)
            if held is None or held[0] != lease:
                return
            del self._leases[job]
            handler = self._handlers.pop(job, None)
        if handler is not None:  # a handler past its hard timeout: its thread lives on, its span ends here
            handler.set_attribute("sluice.abandoned", True)
            handler.end(_ns(at))
        span = held[1]
        span.set_attribute("sluice.outcome", outcome)
        if error:
            span.set_status(Status(StatusCode.ERROR, outcome))
        span.end(_ns(at))
