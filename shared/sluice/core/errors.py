"""Every failure Sluice reports, under one base class.

Adapters (redis, DynamoDB, Kafka) translate their client libraries' errors into
these, so that nothing above the adapter layer ever catches a botocore or redis
exception. Lua scripts report failures as error replies whose first word is a
code from ``ERROR_CODES``; ``from_code`` turns such a reply into the exception.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

_WORD_START = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


class SluiceError(Exception):
    """Base of every Sluice error. ``code`` is stable and machine-readable: the class's name in
    upper snake case (``QueueFull``: ``QUEUE_FULL``) unless the class sets another. A class's name
    is as public as its code, so one is not renamed without the other (``tests/unit/test_errors.py``
    keeps every code a caller can get back).

    Raised with no message, the error says its ``template`` filled from its details (``{name!r}``
    from ``name=...``), or else its docstring.
    """

    code: ClassVar[str] = "SLUICE_ERROR"
    template: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "code" not in cls.__dict__:
            cls.code = _WORD_START.sub("_", cls.__name__).upper()

    def __init__(self, message: str = "", **details: Any) -> None:
        super().__init__(message or self._message(details))
        self.details = details

    @classmethod
    def _message(cls, details: dict[str, Any]) -> str:
        if cls.template:
            try:
                return cls.template.format_map(details)
            except (KeyError, IndexError, ValueError):  # a detail it names is missing: say the rest
                pass
        return cls.__doc__ or cls.code


class InvalidInput(SluiceError, ValueError):
    """The caller passed a value that Sluice refuses; nothing was written."""


class PayloadTooLarge(InvalidInput):
    """The request body or a job payload is larger than the configured limit."""


class InvalidQueueName(InvalidInput):
    """A queue name outside ``models.QUEUE_NAME_PATTERN``."""

    code = "INVALID_QUEUE"


class ReservedQueue(InvalidQueueName):
    """Queue names starting with ``sluice-`` belong to Sluice's internal queues."""


class JobNotFound(SluiceError, LookupError):
    """No job with that id exists (or it has expired)."""

    code = "NOT_FOUND"


class JobExists(SluiceError):
    """A job with that id already exists with different content."""


class LeaseLost(SluiceError):
    """The caller no longer holds the job's lease (expired, taken over, or released)."""


class StaleToken(LeaseLost):
    """A newer fencing token exists for this job; the write was refused.

    Carries both tokens so the log line can say exactly how far behind the writer was.
    """

    template = "stale fencing token {mine} (current is {current})"

    def __init__(self, message: str = "", *, mine: int | None = None, current: int | None = None,
                 **details: Any) -> None:
        super().__init__(message, mine=mine, current=current, **details)
        self.mine, self.current = mine, current


class JobCancelled(SluiceError):
    """The job was cancelled."""

    code = "CANCELLED"


class WaitTimedOut(SluiceError, TimeoutError):
    """A wait for a job to end gave up: the job had not ended when the timeout passed."""

    code = "WAIT_TIMEOUT"


class AlreadyFinished(SluiceError):
    """The job already reached a final state (succeeded, dead or cancelled)."""


class RedriveRaced(SluiceError):
    """A redrive appended the job's record to Kafka, then found the job gone from Redis's dead set
    (purged, trimmed or redriven meanwhile): the relay brings it back from that record if Redis no
    longer holds it, so the redrive may still take effect (``sluice.gateway.redrive``)."""


class QueuePaused(SluiceError):
    """The queue is paused."""

    code = "PAUSED"


class QueueFull(SluiceError):
    """The queue is at one of its caps (delayed or dead jobs) or Redis is near full; retry later.

    ``details["retry_after_s"]`` says when the gateway's view of the queue is next refreshed."""


class CallerThrottled(SluiceError):
    """This caller sent more requests or body bytes than its limit allows (429); nothing was written.

    ``details["retry_after_s"]`` says when its bucket holds enough again (issue 27, item 5)."""


class QueueNotAllowed(SluiceError):
    """The queue is not on the operator's allow-list, or is new and the registry is at its limit."""


class StoreError(SluiceError):
    """The job store failed in a way that is neither fencing nor not-found."""


class BackendUnavailable(SluiceError):
    """A backing service (Redis, Kafka, DynamoDB, S3) could not be reached; safe to retry."""

    code = "UNAVAILABLE"


class PayloadUnavailable(SluiceError):
    """A job's payload pointer (``sluice.core.payloads``) could not be resolved: the object is
    missing, not the one its record sealed, or not the job's own. The job fails with the reason."""


class RegistryCold(BackendUnavailable):
    """The registry's Redis cache was lost and not loaded again yet (register.lua): the adapter
    loads it from the durable registry and asks again."""


class NotPermitted(SluiceError):
    """A backend refused the call for this function's credentials: its Redis user's key patterns
    or commands do not cover it (Redis NOPERM; ElastiCache RBAC, docs/security.md "Redis users").
    Not retried: the same credentials are refused again."""


class ScriptNotAllowed(SluiceError):
    """The internal function refused to load a worker's script: its text is not one Sluice has
    shipped (``lua/worker_scripts.sha1``), e.g. a team's layer newer than Sluice's stack (deploy
    Sluice's stack first, docs/deploy.md "Upgrade order"). Nothing was loaded."""


class RecordTampered(StoreError):
    """A stored job record (a continuation's, under ``~family~<id>``) whose seal does not match it:
    it was altered after the gateway sealed it, so it is not appended (docs/security.md, "Records")."""


class IdempotencyConflict(SluiceError):
    """The idempotency key was reused with a different request body."""


class InProgress(SluiceError):
    """An identical request with the same idempotency key is still being processed."""


class HandlerNotFound(SluiceError):
    """No handler is registered for the job's queue."""

    code = "NO_HANDLER"


class PriorityNotAllowed(SluiceError):
    """The priority is above what this caller may use; operators (an allow-list of principals) may."""


class ConfigError(SluiceError):
    """The deployment's configuration is missing or inconsistent; the component refuses to start."""


class RedisTopologyError(ConfigError):
    """The Redis URL does not match the server: a cluster URL at a single node, a single-node
    URL at a cluster (a MOVED reply), hash slots left unassigned, or keys across slots."""

    code = "REDIS_TOPOLOGY"


class HandlerDoesNotFit(ConfigError):
    """A handler's hard timeout is longer than the worker function's invocation budget: no
    invocation could ever lease its jobs. The worker refuses to start rather than lease nothing."""


class TooManyChildren(InvalidInput):
    """A parent asked for more children than one job may have (``flows.MAX_CHILDREN``)."""


class FamilyConflict(InvalidInput):
    """A continuation's key was used again with other children (a handler that is not deterministic)."""


class RouteConflict(InvalidInput):
    """Another owner already routes this queue (or a pattern that overlaps it)."""


class InvalidSchema(InvalidInput):
    """A typed queue's schema is not a valid JSON Schema."""


class UnknownFunction(InvalidInput):
    """A route names a worker function that does not exist."""


class RouteRefused(SluiceError):
    """A route names a team's function for a queue the team map does not give that team: the relay
    does not follow it (docs/teams.md, "The team map")."""


class RegistrationRefused(InvalidInput):
    """A registrar refused a registration: a queue outside its team's map, or a request naming
    another team or function. Nothing was written."""


class NoRoute(InvalidInput):
    """No deployed worker handles this queue: the gateway refuses its jobs (404)."""


class PayloadInvalid(InvalidInput):
    """A typed queue's payload does not validate against the queue's JSON Schema (400).

    ``details["errors"]``: (JSON pointer into the request, message, batch index or None) per failure."""


class InvalidSchedule(InvalidInput):
    """A schedule whose name, expression or queue Sluice refuses; nothing was written."""


class FiringRefused(InvalidSchedule):
    """A schedule firing at a time its expression does not produce (or too far from now); nothing
    was enqueued (issue 27)."""


class ScheduleTooFrequent(InvalidSchedule):
    """A schedule that would fire more often than once a minute."""


class UnsupportedSchedule(InvalidSchedule):
    """A valid EventBridge Scheduler expression using a feature Sluice does not compute (L, W, #)."""


class ScheduleNotFound(SluiceError, LookupError):
    """No schedule with that name."""

    template = "no schedule named {name!r}"


class ScheduleExists(SluiceError):
    """A schedule with that name exists already; delete it first to change it."""

    template = "a schedule named {name!r} exists; delete it first"


class NotOperator(SluiceError):
    """The caller is not an operator: the operator API (``/v1/admin/...``) is refused (403)."""


class WrongFunction(SluiceError):
    """This function does not serve this kind of caller (issue 27: one function per caller):
    refused before anything is read or written (403)."""

    template = "the {function} function serves {serves} only, not {kind}"


class BadBody(InvalidInput):
    """The request body is not acceptable JSON; nothing was written."""


class UnsupportedMediaType(InvalidInput):
    """The request body must be sent as application/json (UTF-8)."""


# Every error a caller can get back by its code: from a Lua script's error reply, or from the
# gateway's problem document (``code``), which the client turns back into the same type. A
# test checks that every error the gateway answers with a status of its own is here.
ERROR_CODES: dict[str, type[SluiceError]] = {
    cls.code: cls
    for cls in (
        SluiceError, InvalidInput, InvalidQueueName, ReservedQueue, JobNotFound, JobExists, LeaseLost,
        StaleToken, JobCancelled, AlreadyFinished, QueuePaused, QueueFull, QueueNotAllowed, StoreError,
        BackendUnavailable, IdempotencyConflict, InProgress, HandlerNotFound, PayloadTooLarge,
        PriorityNotAllowed, TooManyChildren, FamilyConflict, RouteConflict, InvalidSchema, UnknownFunction,
        RouteRefused, RegistrationRefused,
        NoRoute, PayloadInvalid, InvalidSchedule, FiringRefused, ScheduleTooFrequent, UnsupportedSchedule,
        ScheduleNotFound, ScheduleExists, NotOperator, BadBody, UnsupportedMediaType, CallerThrottled,
        WrongFunction, RegistryCold, ScriptNotAllowed,
    )
}


def from_code(code: str, message: str = "", **details: Any) -> SluiceError:
    """Build the exception for a stable error code; unknown codes become SluiceError."""
    cls = ERROR_CODES.get(code, SluiceError)
    return cls(message or code, **details)
