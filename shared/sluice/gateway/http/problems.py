"""Errors as RFC 9457 problem documents (``application/problem+json``).

One table maps each ``sluice.core.errors`` type to a status, a stable ``type`` URI and a
title; validation errors from pydantic become ``errors`` entries whose ``pointer``
names the failing field (and, in a batch, the failing job's index).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sluice.core import errors
from sluice.core.errors import BadBody, PayloadTooLarge, UnsupportedMediaType
from sluice.core.models import IDEMPOTENCY_KEY_COMMA
from sluice.core.wire import FieldError, Problem

PROBLEM_JSON: Final = "application/problem+json"
TYPE_BASE: Final = "urn:sluice:problem:"
RETRY_AFTER_SECONDS: Final = 1


@dataclass(frozen=True, slots=True)
class Kind:
    status: int
    slug: str
    title: str


# Most specific first: the first isinstance match wins.
_KINDS: Final[Sequence[tuple[type[Exception], Kind]]] = (
    (UnsupportedMediaType, Kind(415, "unsupported-media-type", "Unsupported Media Type")),
    (PayloadTooLarge, Kind(413, "payload-too-large", "Payload Too Large")),
    (BadBody, Kind(400, "malformed-body", "Malformed Request Body")),
    (errors.ReservedQueue, Kind(400, "reserved-queue-name", "Reserved Queue Name")),
    (errors.InvalidQueueName, Kind(400, "invalid-queue-name", "Invalid Queue Name")),
    (errors.NoRoute, Kind(404, "no-route", "No Worker Handles This Queue")),
    (errors.PayloadInvalid, Kind(400, "payload-invalid", "Payload Does Not Match The Queue's Schema")),
    (errors.InvalidSchedule, Kind(400, "invalid-schedule", "Invalid Schedule")),
    (errors.InvalidInput, Kind(400, "invalid-request", "Invalid Request")),
    (errors.PriorityNotAllowed, Kind(403, "priority-not-allowed", "Priority Not Allowed")),
    (errors.JobNotFound, Kind(404, "not-found", "Not Found")),
    (errors.ScheduleNotFound, Kind(404, "schedule-not-found", "Schedule Not Found")),
    (errors.ScheduleExists, Kind(409, "schedule-exists", "Schedule Exists")),
    (errors.AlreadyFinished, Kind(409, "already-finished", "Job Already Finished")),
    (errors.InProgress, Kind(409, "in-progress", "Request In Progress")),
    (errors.IdempotencyConflict, Kind(422, "idempotency-key-reused", "Idempotency Key Reused")),
    (errors.BackendUnavailable, Kind(503, "unavailable", "Service Unavailable")),
    (errors.QueueFull, Kind(429, "queue-full", "Queue Full")),
    (errors.CallerThrottled, Kind(429, "caller-throttled", "Too Many Requests From This Caller")),
    (errors.QueueNotAllowed, Kind(403, "queue-not-allowed", "Queue Not Allowed")),
    (errors.NotOperator, Kind(403, "not-operator", "Operators Only")),
    (errors.WrongFunction, Kind(403, "wrong-function", "Wrong Function For This Caller")),
    (errors.ScriptNotAllowed, Kind(403, "script-not-allowed", "Script Not Allowed")),
)
INTERNAL: Final = Kind(500, "internal", "Internal Server Error")
NOT_FOUND: Final = Kind(404, "not-found", "Not Found")
GENERIC_DETAIL: Final = {500: "unexpected error; it has been logged",
                         503: "a backend is unavailable; retry after Retry-After seconds"}
METHOD_NOT_ALLOWED: Final = Kind(405, "method-not-allowed", "Method Not Allowed")


def kind_of(exc: BaseException) -> Kind:
    for cls, kind in _KINDS:
        if isinstance(exc, cls):
            return kind
    return INTERNAL


def problem(kind: Kind, detail: str, *, code: str, instance: str | None = None,
            field_errors: list[FieldError] | None = None) -> Problem:
    return Problem(type=TYPE_BASE + kind.slug, title=kind.title, status=kind.status, detail=detail,
                   instance=instance, code=code, errors=field_errors or None)


def from_exception(exc: BaseException, instance: str | None = None) -> Problem:
    kind = kind_of(exc)
    code = exc.code if isinstance(exc, errors.SluiceError) else "INTERNAL"
    # Never echo a server-side failure's text (an unexpected exception, a backend's error): it
    # may carry internals such as secret ARNs, host names or Kafka errors. The caller logs it.
    detail = str(exc) if kind.status < 500 else GENERIC_DETAIL.get(kind.status, GENERIC_DETAIL[500])
    field_errors = None
    index = getattr(exc, "details", {}).get("index") if isinstance(exc, errors.SluiceError) else None
    if isinstance(index, int):
        field_errors = [FieldError(pointer=f"/jobs/{index}/payload", detail=detail, index=index)]
    if isinstance(exc, errors.PayloadInvalid):  # each failing field of each job, by JSON pointer
        field_errors = [FieldError(pointer=p, detail=m, index=i) for p, m, i in exc.details.get("errors", [])]
    return problem(kind, detail, code=code, instance=instance, field_errors=field_errors)


def headers_for(p: Problem, exc: BaseException | None = None) -> dict[str, str]:
    # 429: when the gateway's view of the queue is read again (sluice.gateway.admission), or when
    # the caller's bucket holds enough again (sluice.gateway.throttle)
    if p.status == 429:
        after = getattr(exc, "details", {}).get("retry_after_s") if exc is not None else None
        return {"Retry-After": str(after if isinstance(after, int) and after > 0 else RETRY_AFTER_SECONDS)}
    return {"Retry-After": str(RETRY_AFTER_SECONDS)} if p.status == 503 else {}


def _pointer(loc: Iterable[Any]) -> tuple[str, int | None]:
    """pydantic/Powertools ``loc`` -> (JSON pointer, batch index)."""
    parts = [str(p) for p in loc]
    if parts and parts[0] == "body":
        body = parts[1:]
        index = int(body[1]) if len(body) >= 2 and body[0] == "jobs" and body[1].isdigit() else None
        escaped = [p.replace("~", "~0").replace("/", "~1") for p in body]
        return "/" + "/".join(escaped), index
    return "#/" + "/".join(p.lower() for p in parts), None


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def from_validation(raw_errors: Sequence[Mapping[str, Any]], instance: str | None = None) -> Problem:
    """A 400 naming every failing field; for a batch, the first failing job's index leads the detail."""
    field_errors: list[FieldError] = []
    for err in raw_errors:
        pointer, index = _pointer(err.get("loc", ()))
        message = str(err.get("msg", "invalid"))
        if err.get("type") == "extra_forbidden":
            message = "unknown field (job ids, attempts and tokens are assigned by Sluice)"
        elif tuple(err.get("loc", ()))[-1:] == ("idempotency-key",) and "," in _text(err.get("input")):
            message = IDEMPOTENCY_KEY_COMMA  # two headers joined, or a comma of its own: the pattern's why
        elif tuple(err.get("loc", ()))[-1:] == ("idempotency-key",) and isinstance(err.get("input"), list):
            message = f"{len(err['input'])} Idempotency-Key headers: send one"  # a REST API's repeated header
        field_errors.append(FieldError(pointer=pointer, detail=message, index=index))
    indexes = sorted({e.index for e in field_errors if e.index is not None})
    first = field_errors[0] if field_errors else None
    if indexes:
        lead = next(e for e in field_errors if e.index == indexes[0])
        detail = f"job {indexes[0]} is invalid: {lead.pointer}: {lead.detail}"
        if len(indexes) > 1:
            detail += f" (and jobs {', '.join(map(str, indexes[1:6]))}{'...' if len(indexes) > 6 else ''})"
        detail += "; nothing was enqueued"
    elif first is not None:
        detail = f"{first.pointer}: {first.detail}"
    else:
        detail = "request failed validation"
    kind = Kind(400, "validation-failed", "Request Validation Failed")
    return problem(kind, detail, code=errors.InvalidInput.code, instance=instance, field_errors=field_errors)
