"""The Redis lease engine: ``RedisQueue`` implements ``sluice.ports.JobQueue``.

Every state change is one Lua script (``lua/<verb>.lua``, called through
``scripts.Scripts``). This module validates every input in Python first, so bad
input raises a typed ``InvalidInput`` before anything is sent, and turns replies
into models. The scripts validate again before their first write.

Lease tokens minted here (HINCRBY-style on the job hash) prove liveness only; the
fencing token a handler writes with comes from the job store (DynamoDB).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import redis

from sluice.config import Settings
from sluice.errors import InvalidInput
from sluice.models import (
    MAX_ATTEMPTS,
    MAX_DELAY_MS,
    MAX_LEASE_MS,
    MAX_PRIORITY,
    MIN_LEASE_MS,
    JobSpec,
    dump_json,
    validate_queue_name,
    validate_token,
)
from sluice.redis.keys import QUEUES_KEY, QueueKeys
from sluice.redis.scripts import JobFields, PushResult, Scripts, translate

__all__ = ["PushResult", "RedisQueue"]

MAX_BATCH = 1000  # jobs per script call: bounds the script's run time and Lua's unpack()
MAX_PAYLOAD_BYTES = 1024 * 1024
MAX_TOKEN = 2**53 - 1  # Lua numbers are doubles: larger integers would lose precision
_REGISTRY_TTL_S = 60.0


def _int(value: object, lo: int, hi: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise InvalidInput(f"{what} must be an integer in {lo}..{hi}, got {value!r}")
    return value


def _token(value: object) -> int:
    token = validate_token(value)
    if token > MAX_TOKEN:
        raise InvalidInput(f"invalid token {token}: larger than any token Redis can issue")
    return token


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def job_fields(spec: JobSpec, queue: str, now_ms: int) -> JobFields:
    """Check a JobSpec again (it may have been built with model_construct) for ``queue``."""
    if not isinstance(spec, JobSpec):
        raise InvalidInput(f"expected a JobSpec, got {type(spec).__name__}")
    if spec.queue != queue:
        raise InvalidInput(f"job {spec.job_id!r} is for queue {spec.queue!r}, not {queue!r}")
    QueueKeys(queue).job(spec.job_id)  # validates the id
    horizon = now_ms + MAX_DELAY_MS
    payload = dump_json(spec.payload)
    if len(payload) * 4 > MAX_PAYLOAD_BYTES and len(payload.encode()) > MAX_PAYLOAD_BYTES:
        raise InvalidInput(f"payload of {spec.job_id} is larger than {MAX_PAYLOAD_BYTES} bytes")
    return JobFields(
        spec.job_id, payload,
        _int(spec.priority, 0, MAX_PRIORITY, "priority"),
        _int(spec.max_attempts, 1, MAX_ATTEMPTS, "max_attempts"),
        _int(spec.lease_ms, MIN_LEASE_MS, MAX_LEASE_MS, "lease_ms"),
        _int(spec.run_at_ms, 0, horizon, "run_at_ms (at most 7 days ahead)"),
        _int(spec.enqueued_at_ms, 0, horizon, "enqueued_at_ms"),
    )


class RedisQueue:
    """The lease engine over one redis client (a single node or an ElastiCache primary)."""

    def __init__(self, client: redis.Redis[Any]) -> None:
        self.client = client
        self.scripts = Scripts(client)
        self._keys: dict[str, QueueKeys] = {}
        self._registered: dict[str, float] = {}

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisQueue:
        # No automatic retries: a script whose reply was lost may have run already.
        options: dict[str, Any] = {"decode_responses": True, "socket_timeout": 5.0,
                                   "socket_connect_timeout": 2.0, "health_check_interval": 30,
                                   "retry": redis.retry.Retry(redis.backoff.NoBackoff(), 0)}
        options.update(kwargs)
        return cls(redis.Redis.from_url(url, **options))

    @classmethod
    def from_settings(cls, settings: Settings) -> RedisQueue:
        password = _auth_token(settings.redis_auth_secret_arn, settings) \
            if settings.redis_auth_secret_arn else None
        return cls.from_url(settings.redis_url, **({"password": password} if password else {}))

    def close(self) -> None:
        self.client.close()

    # --- helpers --------------------------------------------------------------------------

    def keys(self, queue: str) -> QueueKeys:
        """The (cached) keys of ``queue``; raises InvalidQueueName for a bad name."""
        k = self._keys.get(queue) if type(queue) is str else None
        if k is None:
            k = QueueKeys(validate_queue_name(queue))
            self._keys[queue] = k
        return k

    def _register(self, queue: str) -> None:
        """Advisory registry for ``queues()``: outside scripts, as it lives in another slot."""
        now = time.monotonic()
        if now - self._registered.get(queue, -_REGISTRY_TTL_S) < _REGISTRY_TTL_S:
            return
        try:
            self.client.sadd(QUEUES_KEY, queue)
        except redis.exceptions.RedisError as exc:
            raise translate(exc) from exc
        self._registered[queue] = now

    # --- enqueue --------------------------------------------------------------------------

    def enqueue(self, spec: JobSpec) -> bool:
        """True if newly added, False if a job with that id already existed (left untouched)."""
        return self.enqueue_many([spec])[0]

    def enqueue_many(self, specs: Sequence[JobSpec]) -> list[bool]:
        """Enqueue several jobs (any queues); one script call per queue and 1000 jobs.

        Everything is validated before the first call, so one bad job writes nothing.
        """
        now = _wall_ms()
        by_queue: dict[str, list[tuple[int, JobFields]]] = {}
        for index, spec in enumerate(specs):
            queue = getattr(spec, "queue", None)
            self.keys(queue)  # type: ignore[arg-type]
            by_queue.setdefault(queue, []).append((index, job_fields(spec, queue, now)))  # type: ignore[arg-type]
        out = [False] * len(specs)
        for queue, jobs in by_queue.items():
            self._register(queue)
            for start in range(0, len(jobs), MAX_BATCH):
                chunk = jobs[start:start + MAX_BATCH]
                added = self.scripts.enqueue(self._keys[queue], [fields for _, fields in chunk])
                for (index, _), was_added in zip(chunk, added, strict=True):
                    out[index] = was_added
        return out

    # --- relay ----------------------------------------------------------------------------

    def push(self, queue: str, topic: str, partition: int, owner_token: int,
             records: Sequence[tuple[int, JobSpec]]) -> PushResult:
        """Enqueue Kafka records exactly once per (topic, partition) offset, fenced by owner.

        Records at or below the partition's stored offset are skipped, as are ids that
        already exist. Raises StaleToken if a newer relay owns the partition. Batches over
        1000 records are sent in offset order, 1000 at a time (each chunk atomic).
        """
        k = self.keys(queue)
        if not isinstance(topic, str) or not 0 < len(topic) <= 249 or any(c in topic for c in ":{} \r\n"):
            raise InvalidInput(f"invalid topic {topic!r}")
        _int(partition, 0, 1_000_000, "partition")
        _token(owner_token)
        now = _wall_ms()
        checked = []
        for record in records:
            if not isinstance(record, tuple) or len(record) != 2:
                raise InvalidInput("records must be (offset, JobSpec) pairs")
            checked.append((_int(record[0], 0, MAX_TOKEN, "offset"), job_fields(record[1], queue, now)))
        if not checked:
            raise InvalidInput("push needs at least one record")
        checked.sort(key=lambda r: r[0])
        self._register(queue)
        pushed = skipped = 0
        result = PushResult(0, 0, -1)
        for start in range(0, len(checked), MAX_BATCH):
            result = self.scripts.push(k, topic, partition, owner_token, checked[start:start + MAX_BATCH])
            pushed += result.pushed
            skipped += result.skipped
        return PushResult(pushed=pushed, skipped=skipped, offset=result.offset)

    def take_rate(self, queue: str, wanted: int) -> int:
        """How many of ``wanted`` jobs the queue's shared token bucket allows now."""
        k = self.keys(queue)
        return self.scripts.rate(k, _int(wanted, 1, 1_000_000, "wanted"))


def _auth_token(arn: str, settings: Settings) -> str:
    """The ElastiCache AUTH token from Secrets Manager (a plain string or {"password": ...})."""
    import json

    import boto3
    import botocore.exceptions

    from sluice.errors import BackendUnavailable

    client = boto3.client("secretsmanager", region_name=settings.aws_region,
                          endpoint_url=settings.aws_endpoint_url)
    try:
        secret = str(client.get_secret_value(SecretId=arn)["SecretString"])
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
        raise BackendUnavailable(f"cannot read the Redis AUTH secret: {exc}") from exc
    if secret.startswith("{"):
        value = json.loads(secret)
        return str(value.get("password") or value.get("token") or value.get("auth_token"))
    return secret
