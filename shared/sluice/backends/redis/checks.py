"""What the Redis facades check in Python before a script runs: bad input raises a typed
``InvalidInput`` before anything is sent (the scripts validate again before their first write)."""

from __future__ import annotations

from typing import Any

from sluice.backends.redis.keys import QueueKeys
from sluice.backends.redis.scripts import JobFields
from sluice.core.errors import InvalidInput
from sluice.core.models import (
    MAX_ATTEMPTS,
    MAX_ATTEMPTS_UNSET,
    MAX_DELAY_MS,
    MAX_LEASE_MS,
    MAX_PRIORITY,
    MIN_LEASE_MS,
    JobSpec,
    dump_json,
    validate_group,
    validate_token,
)

MAX_BATCH = 1000  # jobs per script call: bounds the script's run time and Lua's unpack()
MAX_PAYLOAD_BYTES = 1024 * 1024
MAX_TOKEN = 2**53 - 1  # Lua numbers are doubles: larger integers would lose precision
MAX_WAIT_MS = 4_000  # one BLPOP: below the client's 5 s socket timeout
MAX_IDLE_MS = 60_000  # idle.lua's bound on how long a worker says it waits
RECLAIM_PER_LEASE = 100  # expired leases and due delayed jobs each lease call reclaims first

# How far past the 7-day horizon of this host's clock a run_at may be. enqueue: another host's
# clock, or a delay computed a moment ago. push: the gateway bounded the delay when it accepted
# the job, on its clock; refusing it here (this host's clock, then Redis's TIME) would refuse the
# whole batch over a little skew, so the relay allows what the scripts allow (MAX_SKEW_MS in
# _lib.lua), and Redis clamps every run_at to its own TIME + 7 days.
DELAY_SKEW_MS = 30_000
RELAY_SKEW_MS = 3_600_000


def checked_int(value: object, lo: int, hi: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise InvalidInput(f"{what} must be an integer in {lo}..{hi}, got {value!r}")
    return value


def checked_token(value: object) -> int:
    token = validate_token(value)
    if token > MAX_TOKEN:
        raise InvalidInput(f"invalid token {token}: larger than any token Redis can issue")
    return token


def checked_lease_ms(value: object) -> int:
    return checked_int(value, MIN_LEASE_MS, MAX_LEASE_MS, "lease_ms (10 ms..12 h)")


def checked_topic(topic: object) -> str:
    if not isinstance(topic, str) or not 0 < len(topic) <= 249 or any(c in topic for c in ":{} \r\n"):
        raise InvalidInput(f"invalid topic {topic!r}")
    return topic


def job_fields(spec: JobSpec, queue: str, now_ms: int, skew_ms: int = DELAY_SKEW_MS) -> JobFields:
    """Check a JobSpec again (it may have been built with model_construct) for ``queue``."""
    if not isinstance(spec, JobSpec):
        raise InvalidInput(f"expected a JobSpec, got {type(spec).__name__}")
    if spec.queue != queue:
        raise InvalidInput(f"job {spec.job_id!r} is for queue {spec.queue!r}, not {queue!r}")
    QueueKeys(queue).job(spec.job_id)  # validates the id
    horizon = now_ms + MAX_DELAY_MS + skew_ms
    payload = dump_json(spec.payload)
    if len(payload) * 4 > MAX_PAYLOAD_BYTES and len(payload.encode()) > MAX_PAYLOAD_BYTES:
        raise InvalidInput(f"payload of {spec.job_id} is larger than {MAX_PAYLOAD_BYTES} bytes")
    priority = checked_int(spec.priority, 0, MAX_PRIORITY, "priority")
    max_attempts = checked_int(spec.max_attempts, MAX_ATTEMPTS_UNSET, MAX_ATTEMPTS, "max_attempts")
    lease_ms = checked_lease_ms(spec.lease_ms)
    run_at_ms = checked_int(spec.run_at_ms, 0, horizon, "run_at_ms (at most 7 days ahead)")
    enqueued_at_ms = checked_int(spec.enqueued_at_ms, 0, horizon, "enqueued_at_ms")  # 0: the script's TIME
    meta = f"{priority},{max_attempts},{lease_ms},{enqueued_at_ms}"
    group = "" if spec.group is None else validate_group(spec.group)
    return JobFields(spec.job_id, payload, meta, run_at_ms, group, spec.traceparent or "")


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
