"""Trace context (W3C ``traceparent``) as a job carries it, and the ports that emit spans. Pure.

A job carries one ``traceparent`` (version 00: ``00-<trace id>-<parent span id>-<flags>``) from
its enqueue to its handler: the gateway takes it from the enqueue request's ``traceparent`` header
(the client sends its current span's), starts its enqueue span under it, and writes the enqueue
span's own context into the sealed record (``JobSpec.traceparent``); the relay copies it to the
job's hash in Redis (``tp``); the worker's lease span is its child. A handler's children carry the
handler span's (``JobContext.traceparent``), so a family is one trace (docs/worker.md, Traces).

This module only parses and formats; the spans themselves are ``sluice.backends.otel``'s, built
with the OpenTelemetry API only where tracing is on (``Settings.traces``). Without it the gateway
still carries a valid caller's ``traceparent`` through (``NO_SPANS``), so a traced caller and a
traced worker meet in one trace even if the functions between them emit nothing.

Hostile input: a header that is not a valid ``traceparent`` (wrong shape, upper-case hex, an
all-zero id, version ``ff``, longer than ``MAX_HEADER``) is ignored, never refused: the enqueue
goes on and the gateway starts a fresh trace. Tracing must never cost a job.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final, NamedTuple, Protocol

HEADER: Final = "traceparent"
VERSION: Final = "00"
MAX_HEADER: Final = 512  # a longer value is ignored unread (a future version may add fields, not kilobytes)
# What a job carries: version 00 exactly (JobSpec, the Redis hash, the internal requests).
PATTERN: Final = r"^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$"
LENGTH: Final = 55
_HEADER = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_ZERO_TRACE: Final = "0" * 32
_ZERO_SPAN: Final = "0" * 16


class TraceParent(NamedTuple):
    trace_id: str  # 32 lower-case hex digits, not all zero
    span_id: str  # 16 lower-case hex digits, not all zero: the parent span
    flags: str  # 2 hex digits; bit 0: sampled

    @property
    def sampled(self) -> bool:
        return int(self.flags, 16) & 1 == 1

    def header(self) -> str:
        """The version-00 ``traceparent`` (what a job carries, whatever version came in)."""
        return f"{VERSION}-{self.trace_id}-{self.span_id}-{self.flags}"


def parse(value: object) -> TraceParent | None:
    """``value`` as a W3C ``traceparent``, or None if it is not a valid one (ignored, not refused).

    Version 00 must be exactly its four fields; a later version may carry more after a dash
    (the recommendation's forward compatibility), of which the first four fields are read."""
    if not isinstance(value, str) or len(value) > MAX_HEADER:
        return None
    value = value.strip(" \t")
    match = _HEADER.fullmatch(value)
    if match is None:
        return None
    version, trace_id, span_id, flags, rest = match.groups()
    if version == "ff" or (version == VERSION and rest is not None):
        return None
    if trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return None
    return TraceParent(trace_id, span_id, flags)


def carried(value: object) -> str | None:
    """The version-00 ``traceparent`` a job carries for ``value`` (a header's value: a repeated header,
    which the HTTP layer hands over as a list, is ignored, as anything else not a valid one), or None."""
    found = parse(value)
    return None if found is None else found.header()


# -- the ports: what the use cases ask of the tracing adapter ---------------------------------------


Attribute = str | int | bool


class OpenSpan(Protocol):
    """A span a use case started and must end: ``traceparent`` is its own context (what the records
    it writes carry), or what came in when nothing is recorded."""

    @property
    def traceparent(self) -> str | None: ...

    def set(self, **attributes: Attribute) -> None:
        """Ids, names and counts only, never a payload (``sluice.backends.otel`` names them)."""
        ...

    def end(self, error: str = "") -> None:
        """End it; ``error``: the failure's kind (an exception's class or code: never its message,
        which may quote a payload), the span's status."""
        ...


class EnqueueSpans(Protocol):
    """Starts the gateway's enqueue span (``sluice.backends.otel.OtelEnqueueSpans``): the one span
    that must exist before a call, because the record it seals carries its context."""

    def start(self, kind: str, parent: str | None, queue: str) -> OpenSpan: ...


class HandlerTraces(Protocol):
    """Where a running handler is in its job's trace (``sluice.backends.otel.TraceObserver``): the
    ``traceparent`` its children carry, or None when its handler span is not recorded here."""

    def handler_traceparent(self, job_id: str) -> str | None: ...


@dataclass(frozen=True, slots=True)
class Untraced:
    """A span that records nothing and hands on what came in."""

    traceparent: str | None = None

    def set(self, **attributes: Attribute) -> None:
        return None

    def end(self, error: str = "") -> None:
        return None


class NoSpans:
    """Tracing off: no span, and the caller's own ``traceparent`` goes on with the job."""

    def start(self, kind: str, parent: str | None, queue: str) -> OpenSpan:
        return Untraced(parent)


NO_SPANS: Final = NoSpans()


@contextmanager
def span(spans: EnqueueSpans, kind: str, parent: str | None, queue: str) -> Iterator[OpenSpan]:
    """``spans.start(...)``, ended when the block ends; an exception ends it with its class's name
    (or its ``code``) as the error, never its message, and goes on."""
    opened = spans.start(kind, parent, queue)
    try:
        yield opened
    except BaseException as exc:
        opened.end(error=str(getattr(exc, "code", "") or type(exc).__name__))
        raise
    opened.end()
