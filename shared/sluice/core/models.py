"""The data every layer passes around, validated once at the edge.

Times are integer milliseconds since the epoch (``*_ms``) so that Python, Lua and
DynamoDB agree on them without float rounding.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Any, Final, Literal, NamedTuple

from pydantic import ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from sluice.core.base import Model
from sluice.core.errors import InvalidInput, InvalidQueueName, ReservedQueue
from sluice.core.traces import LENGTH as TRACEPARENT_LENGTH
from sluice.core.traces import PATTERN as TRACEPARENT_PATTERN

# Every name pattern, once: the validators, the wire models, the OpenAPI document and the HTTP
# routes read these (template.yaml's AllowedPatterns are tested equal, tests/unit/test_names.py).
QUEUE_NAME: Final = r"[a-z0-9][a-z0-9_-]{0,63}"
QUEUE_NAME_PATTERN: Final = f"^{QUEUE_NAME}$"
QUEUE_NAME_RE = re.compile(QUEUE_NAME)
JOB_ID: Final = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}"
JOB_ID_PATTERN: Final = f"^{JOB_ID}$"
JOB_ID_RE = re.compile(JOB_ID)
# A fair-share group inside a queue (a tenant, a customer id: issue 28, item 5). ':' is allowed
# (ids such as "org:42"); a group name is a Redis key suffix inside its queue's hash tag, never a tag.
GROUP: Final = r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}"
GROUP_PATTERN: Final = f"^{GROUP}$"
GROUP_RE = re.compile(GROUP)
# Printable ASCII without leading or trailing spaces (proxies trim those, changing the key), and
# without commas: an HTTP API (payload 2.0) joins a repeated header's values with commas, so "a,b"
# could be one key or two Idempotency-Key headers, which a REST API request refuses (session 39).
IDEMPOTENCY_KEY_PATTERN: Final = r"^[!-+\--~](?:[ -+\--~]{0,126}[!-+\--~])?$"
IDEMPOTENCY_KEY_COMMA: Final = ("an Idempotency-Key cannot contain a comma: two Idempotency-Key headers "
                                "reach the gateway joined by one (an HTTP API joins a repeated header's "
                                "values), so a comma cannot be told from two keys; send one key, "
                                "without commas")
# Queues whose names start with this are Sluice's own (the relay's partition ownership lives
# in ``sluice-relay``): no caller may enqueue into, read, cancel or operate them, the relay
# never pushes a Kafka record into one, and no worker is dispatched for one. lua/_lib.lua
# holds the same prefix (tests/unit/test_engine_scripts.py checks they agree).
RESERVED_QUEUE_PREFIX: Final = "sluice-"

SCHEMA_VERSION: Final = 1
MIN_LEASE_MS = 10  # the engine's floor; the public API's floor is 1 s
MAX_LEASE_MS = 12 * 3600 * 1000
MAX_DELAY_MS = 7 * 24 * 3600 * 1000
MAX_ATTEMPTS = 100
# A job's max_attempts when its caller sent none: the handler's RetryPolicy decides, else the
# default (``policy.attempts_allowed``). Redis's meta and the record carry the 0 (lua/_lib.lua).
MAX_ATTEMPTS_UNSET: Final = 0
DEFAULT_MAX_ATTEMPTS: Final = 5
MAX_PRIORITY = 9
# A last error is for people: a whole traceback would bloat the Redis hash and push the
# jobs item towards DynamoDB's 400 KB. Redis and the jobs table keep the same text.
MAX_ERROR_CHARS = 4000


def validate_queue_name(name: object) -> str:
    """Return ``name`` if it is a legal queue name, else raise InvalidQueueName."""
    if not isinstance(name, str) or QUEUE_NAME_RE.fullmatch(name) is None:
        raise InvalidQueueName(f"invalid queue name {name!r}: must match {QUEUE_NAME_PATTERN}")
    return name


def is_reserved_queue(name: object) -> bool:
    """Whether ``name`` is (or would be) one of Sluice's internal queues."""
    return isinstance(name, str) and name.startswith(RESERVED_QUEUE_PREFIX)


def validate_public_queue(name: object) -> str:
    """``validate_queue_name``, and raise ReservedQueue for an internal queue's name."""
    queue = validate_queue_name(name)
    if is_reserved_queue(queue):
        raise ReservedQueue(f"queue {queue!r} is reserved: names starting with {RESERVED_QUEUE_PREFIX!r} "
                            "belong to Sluice's internal queues", queue=queue, prefix=RESERVED_QUEUE_PREFIX)
    return queue


def validate_job_id(job_id: object) -> str:
    """Return ``job_id`` if legal (1..128 of [A-Za-z0-9_.-], not starting with punctuation)."""
    if not isinstance(job_id, str) or JOB_ID_RE.fullmatch(job_id) is None:
        raise InvalidInput(f"invalid job id {job_id!r}: must match {JOB_ID_PATTERN}")
    return job_id


def validate_group(group: object) -> str:
    """Return ``group`` if legal (``GROUP_PATTERN``): a fair-share group's name."""
    if not isinstance(group, str) or GROUP_RE.fullmatch(group) is None:
        raise InvalidInput(f"invalid group {group!r}: must match {GROUP_PATTERN}")
    return group


def validate_token(token: object) -> int:
    """Fencing tokens are positive integers; bool is rejected even though it is an int."""
    if isinstance(token, bool) or not isinstance(token, int) or token <= 0:
        raise InvalidInput(f"invalid fencing token {token!r}: must be a positive integer")
    return token


MAX_PROGRESS_DETAIL_BYTES = 1024  # a progress note (ctx.progress), UTF-8; longer is refused


def validate_progress(fraction: object, detail: object) -> tuple[float, str]:
    """A progress report as stored: a fraction in [0, 1] and a short note; InvalidInput otherwise."""
    if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0.0 <= fraction <= 1.0:
        raise InvalidInput(f"invalid progress {fraction!r}: a number from 0 to 1")
    if not isinstance(detail, str):
        raise InvalidInput("the progress detail must be a string")
    size = len(detail.encode("utf-8"))
    if size > MAX_PROGRESS_DETAIL_BYTES:
        raise InvalidInput(f"progress detail of {size} bytes is over the {MAX_PROGRESS_DETAIL_BYTES}-byte "
                           "limit: keep it a short note, put data in the result")
    return float(fraction), detail


def truncate_error(text: str) -> str:
    """``text`` cut to ``MAX_ERROR_CHARS``, its end marked with an ellipsis when cut."""
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS - 1] + "\u2026"


def describe_validation(exc: ValidationError, *, root: str = "event", limit: int | None = None) -> str:
    """A pydantic error as one line, "field.path: why; ..." (``root`` names an error of the whole)."""
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or root}: {e['msg']}" for e in exc.errors()[:limit])


# json.dumps(value, **these) builds a new encoder on every call; this one is built once.
_CANONICAL = json.JSONEncoder(separators=(",", ":"), sort_keys=True, allow_nan=False, ensure_ascii=False)


def _not_json(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _c_encoder() -> Callable[[Any, int], Any] | None:
    """``_CANONICAL``'s C encoder, built once: ``JSONEncoder.encode`` builds one (and a closure)
    on every call, half of its cost for a small payload (1.2 -> 0.6 us; the relay makes one per
    record). Without the circular-reference markers: a payload is shared by threads, and a
    circular value still fails, with RecursionError. None where the C accelerator is missing."""
    try:
        from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
    except ImportError:
        return None
    if c_make_encoder is None:
        return None
    encoder: Callable[[Any, int], Any] = c_make_encoder(None, _not_json, encode_basestring, None, ":", ",",
                                                        True, False, False)
    return encoder


_ENCODE = _c_encoder()


def dump_json(value: Any) -> str:
    """Serialise a payload or result canonically, or raise InvalidInput.

    NaN and Infinity are refused because they are not JSON and DynamoDB and other
    languages' parsers would choke on them later, far from the caller.
    """
    try:
        if _ENCODE is None or isinstance(value, str):
            return _CANONICAL.encode(value)
        return "".join(_ENCODE(value, 0))
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidInput(f"value is not JSON-serialisable: {exc}") from exc


class JobState(StrEnum):
    ACCEPTED = "accepted"  # in Kafka, not yet relayed
    QUEUED = "queued"  # in Redis: ready, delayed or waiting for a retry
    LEASED = "leased"
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # the handler raised Fail: permanent, no retries
    DEAD = "dead"  # retries exhausted (or no handler); in the dead-letter set
    CANCELLED = "cancelled"

    @property
    def final(self) -> bool:
        return self in FINAL_STATES


FINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.DEAD, JobState.CANCELLED})

QueueName = Annotated[str, Field(pattern=QUEUE_NAME_PATTERN)]
JobId = Annotated[str, Field(pattern=JOB_ID_PATTERN)]
GroupName = Annotated[str, Field(pattern=GROUP_PATTERN)]
# A W3C traceparent, version 00 exactly (sluice.core.traces.PATTERN, which the gateway normalises to)
TraceParentText = Annotated[str, Field(pattern=TRACEPARENT_PATTERN, max_length=TRACEPARENT_LENGTH)]


# Validation context of a JobSpec whose payload the caller has just serialised with ``dump_json``
# (the gateway does, to measure it): the validator need not serialise it a second time.
PAYLOAD_CHECKED: Final = "payload_checked"


class JobSpec(Model):
    """A job as the gateway accepted it: the record in Kafka and the input to ``enqueue``."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    # 1: unsealed (Sluice's own partition jobs; refused from Kafka); 2: sealed (``sluice.core.seal``)
    schema_version: Literal[1, 2] = SCHEMA_VERSION
    job_id: JobId
    queue: QueueName
    payload: Any = None
    priority: int = Field(default=0, ge=0, le=MAX_PRIORITY)
    # MAX_ATTEMPTS_UNSET (0): the caller sent none, so the handler's RetryPolicy decides
    max_attempts: int = Field(default=DEFAULT_MAX_ATTEMPTS, ge=MAX_ATTEMPTS_UNSET, le=MAX_ATTEMPTS)
    lease_ms: int = Field(default=30_000, ge=MIN_LEASE_MS, le=MAX_LEASE_MS)
    run_at_ms: int = Field(default=0, ge=0)  # 0 = ready now
    enqueued_at_ms: int = Field(default=0, ge=0)
    idempotency_key: str | None = None
    seal: str | None = Field(default=None, max_length=64)  # format 2: the gateway's whole-record MAC
    # Its fair-share group (a tenant): leased in turn with the queue's other groups, within their
    # in-flight limit (QueueConfig.max_in_flight_per_group). None: the queue's default group.
    group: GroupName | None = None
    # Its trace (sluice.core.traces): the gateway's enqueue span, or the caller's span it came with.
    # Sealed when present; None: untraced (every record before traces, and the seal of before), and
    # left out of the JSON, so an untraced record is the bytes a relay of before traces reads.
    traceparent: TraceParentText | None = Field(default=None, exclude_if=lambda v: v is None)

    @field_validator("payload")
    @classmethod
    def _payload_is_json(cls, value: Any, info: ValidationInfo) -> Any:
        if not (info.context and info.context.get(PAYLOAD_CHECKED)):
            dump_json(value)
        return value

    def payload_json(self) -> str:
        return dump_json(self.payload)


class DecodedJob(NamedTuple):
    """A ``JobSpec`` as the relay carries it from Kafka to Redis: checked against the model's
    fields once (``sluice.relay.records.decode_job``), its payload already canonical JSON.

    A tuple, not a model: the relay holds tens of thousands of these, and builds one per record.
    """

    job_id: str
    queue: str
    payload: str  # canonical JSON (``dump_json``)
    priority: int
    max_attempts: int
    lease_ms: int
    run_at_ms: int
    enqueued_at_ms: int
    group: str | None = None  # JobSpec.group
    traceparent: str | None = None  # JobSpec.traceparent

    @classmethod
    def of(cls, spec: JobSpec) -> DecodedJob:
        return cls(spec.job_id, spec.queue, dump_json(spec.payload), spec.priority, spec.max_attempts,
                   spec.lease_ms, spec.run_at_ms, spec.enqueued_at_ms, spec.group, spec.traceparent)


class Job(Model):
    """What a handler receives."""

    model_config = ConfigDict(frozen=True)

    job_id: str
    queue: str
    payload: Any
    attempt: int
    max_attempts: int
    priority: int = 0
    enqueued_at_ms: int = 0
    group: str | None = None  # its fair-share group (JobSpec.group)


class LeasedJob(Model):
    """A job handed out by ``lease``: its ``lease_token`` (Redis's) proves liveness of this lease only."""

    model_config = ConfigDict(frozen=True)

    job_id: str
    queue: str
    payload: Any
    lease_token: int  # never a fencing token: the jobs table grants those (glossary, docs/design.md)
    deadline_ms: int
    attempt: int
    max_attempts: int
    priority: int = 0
    lease_ms: int
    enqueued_at_ms: int = 0
    cancel_requested: bool = False
    # The job's redrive generation in Redis (0: never redriven). The grant passes it on: a
    # final item is left only for a generation newer than the one it last ran under.
    redrive_gen: int = 0
    group: str | None = None  # its fair-share group (JobSpec.group)
    traceparent: str | None = None  # its trace (JobSpec.traceparent), as the relay stored it

    def as_job(self) -> Job:
        return Job(job_id=self.job_id, queue=self.queue, payload=self.payload, attempt=self.attempt,
                   max_attempts=self.max_attempts, priority=self.priority,
                   enqueued_at_ms=self.enqueued_at_ms, group=self.group)


class Extended(Model):
    """What a successful ``extend`` returns: the new deadline, and whether cancel was requested."""

    model_config = ConfigDict(frozen=True)

    deadline_ms: int
    cancel_requested: bool = False


class DispatchEvent(Model):
    """The worker Lambda's input: from the relay's dispatch or the scheduled safety net."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    queues: list[QueueName] = Field(min_length=1, max_length=50)
    batch: int = Field(default=10, ge=1, le=1000)
    source: str = "relay"

    @field_validator("queues")
    @classmethod
    def _no_internal_queue(cls, queues: list[str]) -> list[str]:
        reserved = [q for q in queues if is_reserved_queue(q)]
        if reserved:  # a worker leasing the relay's partition jobs would stop the relay
            raise ValueError(f"{reserved} are Sluice's internal queues: no worker drains them")
        return queues


class QueueConfig(Model):
    """Runtime knobs of one queue, stored in Redis so every relay and worker sees changes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_in_flight: int = Field(default=0, ge=0)  # 0 = unlimited
    rate_per_s: float = Field(default=0.0, ge=0.0)  # 0 = unlimited
    burst: int = Field(default=0, ge=0)
    paused: bool = False
    high_watermark: int = Field(default=0, ge=0)  # 0 = no watermark
    low_watermark: int = Field(default=0, ge=0)
    # Caps (docs/deploy.md): 0 = the deployment's default (Settings.max_delayed_per_queue /
    # max_dead_per_queue); sluice.core.limits.Limits turns them into the effective caps.
    max_delayed: int = Field(default=0, ge=0)
    max_dead: int = Field(default=0, ge=0)
    # Byte budget in Redis (issue 28): 0 = the deployment's Settings.queue_budget_bytes; push.lua
    # counts each job's bytes against it (sluice.core.limits.job_bytes) and takes no more beyond.
    max_bytes: int = Field(default=0, ge=0)
    # Leased jobs one group (JobSpec.group) may hold at once; 0 = no limit. Jobs without a group
    # (the default group) are bounded by max_in_flight only (docs/engine.md, "Fair groups").
    max_in_flight_per_group: int = Field(default=0, ge=0)
    # Payload fields the operator's listing shows as [redacted] (issue 32's review), as JSON pointers
    # (sluice.core.listing.check_sensitive), besides those a typed queue's schema marks.
    sensitive: tuple[str, ...] = ()


class FinishedCounts(Model):
    """How many of a queue's jobs left it for good, by how, since its counters began (Redis's
    ``keys.finished``; a Redis data loss starts them again at 0). Cumulative: the rate is the
    difference between two reads. ``dead`` is every job dead-lettered: the handler's ``Fail``
    (status failed) as well as attempts used up (dead); Redis does not tell them apart.
    ``cancelled``: removed after a cancel request."""

    succeeded: int = 0
    dead: int = 0
    cancelled: int = 0

    @property
    def total(self) -> int:
        return self.succeeded + self.dead + self.cancelled


class QueueStats(Model):
    queue: str
    ready: int
    delayed: int
    leased: int
    dead: int
    oldest_ready_age_ms: int | None
    # Factories, not instances: an instance here would build both models' validators at import, and
    # with the first of them pydantic's plugin loader (importlib.metadata), 30+ ms of every function's
    # cold start (issue 30, item 3).
    config: QueueConfig = Field(default_factory=QueueConfig)
    idle_workers: int = 0  # workers waiting for work in BLPOP (worker linger); a relay starts none for them
    finished: FinishedCounts = Field(default_factory=FinishedCounts)  # cumulative endings (keys.finished)
    used_bytes: int = 0  # bytes its jobs count against its budget (keys.used; push.lua reserves them)
    budget_bytes: int = 0  # its effective byte budget (limits.Limits.with_budget); 0: none or not known
    parked: int = 0  # about how many of its records wait in the parking lot (the registry's counter)
    parked_at_ms: int = 0  # when one last parked (epoch ms; 0: never, or no registry)


class DeadJob(Model):
    job_id: str
    queue: str
    attempts: int
    last_error: str | None
    died_at_ms: int


class SettleEntry(Model):
    """A job Redis ended with no worker left to tell the jobs table (``keys.settle``):
    ``status`` is dead (its lease expired on the last attempt) or cancelled (its lease
    ended after a cancel request). ``ended_at_ms`` is Redis's time, and identifies the entry."""

    job_id: str
    queue: str
    status: JobState
    ended_at_ms: int
    last_error: str | None = None
    # The job's redrive generation when it ended: the settle write is fenced on it (it may
    # not land once a newer generation was granted). None: an entry of the older
    # "<state>:<id>" format, written before generations existed (treated as 0).
    redrive_gen: int | None = 0

    @property
    def member(self) -> str:
        if self.redrive_gen is None:
            return f"{self.status.value}:{self.job_id}"
        return f"{self.status.value}:{self.redrive_gen}:{self.job_id}"

    @classmethod
    def parse(cls, member: str, queue: str, ended_at_ms: int, last_error: str | None = None) -> SettleEntry:
        """An entry of the settle set: "<state>:<g>:<id>" (or the older "<state>:<id>")."""
        parts = member.split(":")
        gen = int(parts[1]) if len(parts) == 3 else None
        return cls(job_id=parts[-1], queue=queue, status=JobState(parts[0]), ended_at_ms=ended_at_ms,
                   last_error=last_error, redrive_gen=gen)


class JobRecord(Model):
    """A job's durable state in the jobs table (the token authority)."""

    job_id: str
    queue: str
    status: JobState
    attempts: int = 0
    token: int = 0
    lease_owner: str | None = None
    created_at_ms: int = 0
    updated_at_ms: int = 0
    finished_at_ms: int | None = None
    last_error: str | None = None
    result: Any = None
    result_ref: str | None = None  # s3://bucket/key when the result was too large for the item
    result_token: int | None = None
    cancel_requested: bool = False
    redrive_gen: int = 0  # redrives an operator made (sluice.gateway.redrive); 0: never redriven
    progress: float | None = None  # the holder's last ctx.progress, 0..1 (None: never reported)
    progress_detail: str | None = None
    progress_at_ms: int | None = None
    # Families (sluice.core.families): the job that started this one, the jobs this one started, the
    # continuations it started, the continuation waiting for this one; and, on a continuation,
    # the children it waits for and how many of them have not ended yet.
    parent_id: str | None = None
    children: list[str] = Field(default_factory=list)
    continuations: list[str] = Field(default_factory=list)
    continuation: str | None = None
    waits_for: list[str] = Field(default_factory=list)
    remaining: int | None = None


class WriteOutcome(StrEnum):
    WRITTEN = "written"
    ALREADY_WRITTEN = "already_written"  # a retry of my own write that had landed
