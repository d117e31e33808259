"""The Redis lease engine: ``RedisQueue`` implements ``sluice.core.ports.JobQueue``.

Every state change is one Lua script (``lua/<verb>.lua``, called through
``scripts.Scripts``). This module validates every input in Python first, so bad
input raises a typed ``InvalidInput`` before anything is sent, and turns replies
into models. The scripts validate again before their first write.

Lease tokens minted here (by the queue's counter, strictly increasing for each job)
prove liveness only; the fencing token a handler writes with comes from the job store
(DynamoDB). The state machine, key layout and scripts are described in docs/engine.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import redis

from sluice.backends.redis.auth import RotatingToken
from sluice.backends.redis.client import connect, is_cluster
from sluice.backends.redis.keys import QUEUES_KEY, QueueKeys
from sluice.backends.redis.scripts import REDIS_ERRORS, JobFields, PushResult, Scripts, push_argv, translate
from sluice.core.clock import wall_ms
from sluice.core.config import Settings
from sluice.core.errors import InvalidInput, InvalidQueueName, JobNotFound, SluiceError
from sluice.core.limits import Limits
from sluice.core.models import (
    MAX_ATTEMPTS,
    MAX_DELAY_MS,
    MAX_LEASE_MS,
    MAX_PRIORITY,
    MIN_LEASE_MS,
    QUEUE_NAME_RE,
    DeadJob,
    DecodedJob,
    EndedJob,
    Extended,
    JobSpec,
    LeasedJob,
    QueueConfig,
    QueueStats,
    dump_json,
    is_reserved_queue,
    truncate_error,
    validate_job_id,
    validate_public_queue,
    validate_queue_name,
    validate_token,
)

__all__ = ["PushItem", "PushResult", "RedisQueue"]

MAX_BATCH = 1000  # jobs per script call: bounds the script's run time and Lua's unpack()
MAX_PAYLOAD_BYTES = 1024 * 1024
MAX_TOKEN = 2**53 - 1  # Lua numbers are doubles: larger integers would lose precision
MAX_WAIT_MS = 4_000  # one BLPOP: below the client's 5 s socket timeout
MAX_IDLE_MS = 60_000  # idle.lua's bound on how long a worker says it waits
RECLAIM_PER_LEASE = 100  # expired leases and due delayed jobs each lease call reclaims first


def _int(value: object, lo: int, hi: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise InvalidInput(f"{what} must be an integer in {lo}..{hi}, got {value!r}")
    return value


def _token(value: object) -> int:
    token = validate_token(value)
    if token > MAX_TOKEN:
        raise InvalidInput(f"invalid token {token}: larger than any token Redis can issue")
    return token


def _lease_ms(value: object) -> int:
    return _int(value, MIN_LEASE_MS, MAX_LEASE_MS, "lease_ms (10 ms..12 h)")


# How far past the 7-day horizon of this host's clock a run_at may be. enqueue: another host's
# clock, or a delay computed a moment ago. push: the gateway bounded the delay when it accepted
# the job, on its clock; refusing it here (this host's clock, then Redis's TIME) would refuse the
# whole batch over a little skew, so the relay allows what the scripts allow (MAX_SKEW_MS in
# _lib.lua), and Redis clamps every run_at to its own TIME + 7 days.
DELAY_SKEW_MS = 30_000
RELAY_SKEW_MS = 3_600_000


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
    priority = _int(spec.priority, 0, MAX_PRIORITY, "priority")
    max_attempts = _int(spec.max_attempts, 1, MAX_ATTEMPTS, "max_attempts")
    lease_ms = _lease_ms(spec.lease_ms)
    run_at_ms = _int(spec.run_at_ms, 0, horizon, "run_at_ms (at most 7 days ahead)")
    enqueued_at_ms = _int(spec.enqueued_at_ms, 0, horizon, "enqueued_at_ms")  # 0: the script's TIME
    meta = f"{priority},{max_attempts},{lease_ms},{enqueued_at_ms}"
    return JobFields(spec.job_id, payload, meta, run_at_ms)


class RedisQueue:
    """The lease engine over one redis client: a single node, or a cluster client whose scripts
    each touch one queue's keys, so one slot (the ``{queue}`` hash tag)."""

    def __init__(self, client: redis.Redis[Any], limits: Limits | None = None) -> None:
        self.client = client
        self.scripts = Scripts(client)
        self.limits = limits or Limits()  # only the registry limits and the allow-list apply here
        self._keys: dict[str, QueueKeys] = {}

    @classmethod
    def from_url(cls, url: str, limits: Limits | None = None, **kwargs: Any) -> RedisQueue:
        """Over one node (``redis://``, ``rediss://``) or a cluster (``redis+cluster://``,
        ``rediss+cluster://``); no automatic retries either way (``sluice.backends.redis.client``)."""
        return cls(connect(url, **kwargs), limits)

    @classmethod
    def from_settings(cls, settings: Settings) -> RedisQueue:
        arn = settings.redis_auth_secret_arn
        limits = Limits.from_settings(settings)
        if not arn:
            return cls.from_url(settings.redis_url, limits)
        # A token that can be read again: after a rotation, WRONGPASS re-reads the secret.
        token = RotatingToken(lambda: redis_auth_token(arn, settings))
        return cls.from_url(settings.redis_url, limits, credential_provider=token,
                            redis_connect_func=token.on_connect)

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
        """Advisory registry for ``queues()``: outside scripts, as it lives in another slot.

        One ``register.lua`` per enqueue or push call, never skipped: the relay's maintenance
        and the safety net drain only registered queues, and Redis can lose the registry (a
        restart without persistence) while this process still believes it registered. A job
        pushed into an unregistered queue would wait in ready with nobody ever sent to lease it
        (found by the chaos suite; docs/break-it.md). The cost is one round trip per batch.

        Raises QueueNotAllowed for a name off the allow-list, or a new name once the registry
        holds ``limits.max_queues`` (relay maintenance walks every registered queue).
        """
        self.limits.check_name(queue)
        self.scripts.register(QUEUES_KEY, queue, self.limits.registry_limit(queue))

    def register(self, queue: str) -> None:
        """Register ``queue`` (QueueNotAllowed beyond the limits): the relay asks before taking
        a record for a queue it has not seen, so a refused one goes to the dead-letter topic."""
        self._register(self.keys(queue).queue)

    def registry(self, queue: str) -> tuple[bool, int]:
        """(``queue`` is registered, how many names are): the gateway's view of the limit."""
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.sismember(QUEUES_KEY, self.keys(queue).queue)
            pipe.scard(QUEUES_KEY)
            member, size = pipe.execute()
        except REDIS_ERRORS as exc:
            raise translate(exc) from exc
        return bool(member), int(size)

    def memory_percent(self) -> float | None:
        """used_memory as a percentage of maxmemory (None when Redis has no maxmemory); on a
        cluster, the fullest primary's (one shard full refuses its queues' pushes)."""
        try:
            if is_cluster(self.client):
                primaries = redis.cluster.RedisCluster.PRIMARIES
                infos = list(self.client.info("memory", target_nodes=primaries).values())
            else:
                infos = [self.client.info("memory")]
        except REDIS_ERRORS as exc:
            raise translate(exc) from exc
        shares = [100.0 * int(i.get("used_memory", 0)) / int(i["maxmemory"])
                  for i in infos if int(i.get("maxmemory", 0) or 0) > 0]
        return max(shares) if shares else None

    # --- enqueue --------------------------------------------------------------------------

    def enqueue(self, spec: JobSpec) -> bool:
        """True if newly added, False if a job with that id already existed (left untouched)."""
        return self.enqueue_many([spec])[0]

    def enqueue_many(self, specs: Sequence[JobSpec]) -> list[bool]:
        """Enqueue several jobs (any public queues); one script call per queue and 1000 jobs.

        Everything is validated before the first call, so one bad job writes nothing. A
        reserved queue (``models.RESERVED_QUEUE_PREFIX``) raises ReservedQueue.
        """
        return self._enqueue(specs, internal=False)

    def enqueue_internal(self, spec: JobSpec) -> bool:
        """Enqueue one job into one of Sluice's own queues (only the relay's partition
        ownership does this); a public queue raises InvalidQueueName."""
        return self.enqueue_internal_many([spec])[0]

    def enqueue_internal_many(self, specs: Sequence[JobSpec]) -> list[bool]:
        """``enqueue_internal`` of several jobs, one script call per queue: a relay registers
        every partition's ownership job at once (cold start: 2 round trips, not 2 per partition)."""
        for spec in specs:
            queue = getattr(spec, "queue", None)
            if not is_reserved_queue(queue):
                raise InvalidQueueName(f"enqueue_internal is for reserved queues, not {queue!r}")
        return self._enqueue(specs, internal=True)

    def _enqueue(self, specs: Sequence[JobSpec], *, internal: bool) -> list[bool]:
        now = wall_ms()
        by_queue: dict[str, list[tuple[int, JobFields]]] = {}
        for index, spec in enumerate(specs):
            queue = getattr(spec, "queue", None)
            self.keys(queue)  # type: ignore[arg-type]
            if not internal:
                validate_public_queue(queue)
            by_queue.setdefault(queue, []).append((index, job_fields(spec, queue, now)))  # type: ignore[arg-type]
        out = [False] * len(specs)
        for queue, jobs in by_queue.items():
            self._register(queue)
            for start in range(0, len(jobs), MAX_BATCH):
                chunk = jobs[start:start + MAX_BATCH]
                added = self.scripts.enqueue(self._keys[queue], [fields for _, fields in chunk],
                                             internal=internal)
                for (index, _), was_added in zip(chunk, added, strict=True):
                    out[index] = was_added
        return out

    # --- the lease life cycle ---------------------------------------------------------------

    def lease(self, queue: str, n: int, lease_ms: int | None = None, worker_id: str = "") -> list[LeasedJob]:
        """Lease up to ``n`` (1..1000) jobs for ``lease_ms`` (None: each job's own lease_ms).

        Due delayed jobs and expired leases are reclaimed first (up to 100 of each).
        ``worker_id`` is validated but not stored in Redis (that would cost a write per
        job); the job store records the lease owner.
        """
        k = self.keys(queue)
        _int(n, 1, MAX_BATCH, "n")
        ms = 0 if lease_ms is None else _lease_ms(lease_ms)
        if not isinstance(worker_id, str) or len(worker_id) > 256:
            raise InvalidInput(f"worker_id must be a string of at most 256 characters, got {worker_id!r}")
        return self.scripts.lease(k, n, ms, RECLAIM_PER_LEASE)

    def extend(self, queue: str, job_id: str, lease_token: int, lease_ms: int) -> Extended:
        """New deadline = now + lease_ms. Raises LeaseLost (or StaleToken) unless ``lease_token`` holds it."""
        k = self.keys(queue)
        return self.scripts.extend(k, validate_job_id(job_id), _token(lease_token), _lease_ms(lease_ms))

    def ack(self, queue: str, job_id: str, lease_token: int) -> None:
        """Finish a job. A stale or unknown token raises and changes nothing."""
        error = self.ack_many(queue, [(job_id, lease_token)])[0]
        if error is not None:
            raise error

    def ack_many(self, queue: str, jobs: Sequence[tuple[str, int]]) -> list[SluiceError | None]:
        """Ack several jobs in one script call each 1000; per job None (acked) or the error."""
        k = self.keys(queue)
        checked = []
        for pair in jobs:
            if not isinstance(pair, tuple | list) or len(pair) != 2:
                raise InvalidInput(f"expected (job_id, token) pairs, got {pair!r}")
            checked.append((validate_job_id(pair[0]), _token(pair[1])))
        out: list[SluiceError | None] = []
        for start in range(0, len(checked), MAX_BATCH):
            out += self.scripts.ack(k, checked[start:start + MAX_BATCH])
        return out

    def fail(self, queue: str, job_id: str, lease_token: int, error: str,
             retry_after_ms: int | None = None, permanent: bool = False) -> str:
        """"retry" (after retry_after_ms; None = now) or "dead" (permanent, cancelled or out of attempts)."""
        k = self.keys(queue)
        if not isinstance(error, str):
            raise InvalidInput(f"error must be a string, got {type(error).__name__}")
        error = truncate_error(error)
        after = 0 if retry_after_ms is None else _int(retry_after_ms, 0, MAX_DELAY_MS, "retry_after_ms")
        if not isinstance(permanent, bool):
            raise InvalidInput("permanent must be a bool")
        return self.scripts.fail(k, validate_job_id(job_id), _token(lease_token), error, after, permanent)

    def release(self, queue: str, job_id: str, lease_token: int) -> None:
        """Give a lease back; the attempt is not counted. A cancel-requested job is removed."""
        k = self.keys(queue)
        self.scripts.release(k, validate_job_id(job_id), _token(lease_token))

    def cancel(self, queue: str, job_id: str, settle: bool = False) -> str:
        """"removed" (it was waiting) or "requested" (leased: its worker sees it on extend).

        ``settle``: the jobs table says the job is leased (its holder died and the lease
        was reclaimed): a removal then also records the ending in the settle set, so the
        relay ends the item even if the caller cannot (docs/engine.md, Cancel)."""
        k = self.keys(queue)
        if not isinstance(settle, bool):
            raise InvalidInput("settle must be a bool")
        return self.scripts.cancel(k, validate_job_id(job_id), settle)

    def reap(self, queue: str, limit: int = 1000) -> int:
        """Reclaim up to ``limit`` expired leases (and promote due delayed jobs); returns expired."""
        k = self.keys(queue)
        return self.scripts.reap(k, _int(limit, 1, 10_000, "limit"))[0]

    # --- dead letters -----------------------------------------------------------------------

    def _oldest_with_fields(self, zset: str, prefix: str, limit: int, fields: tuple[str, ...],
                            job_id_of: Callable[[Any], str] | None = None,
                            ) -> list[tuple[str, int, list[Any]]]:
        """(member, score, the member's job-hash fields) for the ``limit`` lowest scores of
        ``zset``: two round trips, a read, so no script."""
        job_id_of = job_id_of or _text
        try:
            entries = self.client.zrange(zset, 0, limit - 1, withscores=True)
            pipe = self.client.pipeline(transaction=False)
            for member, _ in entries:
                pipe.hmget(prefix + job_id_of(member), *fields)
            values = pipe.execute()
        except REDIS_ERRORS as exc:
            raise translate(exc) from exc
        return [(_text(m), int(score), [None if v is None else _text(v) for v in f])
                for (m, score), f in zip(entries, values, strict=True)]

    def dead_letters(self, queue: str, limit: int = 100) -> list[DeadJob]:
        k = self.keys(queue)
        rows = self._oldest_with_fields(k.dead, k.job_prefix, _int(limit, 1, 10_000, "limit"), ("a", "err"))
        return [DeadJob(job_id=job_id, queue=queue, attempts=int(f[0] or 0), last_error=f[1], died_at_ms=died)
                for job_id, died, f in rows]

    def dead_spec(self, queue: str, job_id: str) -> JobSpec:
        """A dead job as its Kafka record had it (ready now), for a redrive to append again
        (``sluice.gateway.redrive``); ``JobNotFound`` if the job is not dead-lettered. A read: no script."""
        k = self.keys(queue)
        key = k.job(validate_job_id(job_id))
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.zscore(k.dead, job_id)
            pipe.hmget(key, "p", "m")
            score, (payload, meta) = pipe.execute()
        except REDIS_ERRORS as exc:
            raise translate(exc) from exc
        if score is None or payload is None or meta is None:
            raise JobNotFound(f"job {job_id} is not dead-lettered in {queue}", job_id=job_id)
        priority, max_attempts, lease_ms, enqueued_at_ms = (int(v) for v in _text(meta).split(","))
        return JobSpec(job_id=job_id, queue=queue, payload=json.loads(_text(payload)), priority=priority,
                       max_attempts=max_attempts, lease_ms=lease_ms, enqueued_at_ms=enqueued_at_ms)

    # --- endings the jobs table has not been told (keys.settle) -------------------------------

    def unsettled(self, queue: str, limit: int = 100) -> list[EndedJob]:
        """The oldest ``limit`` entries of the settle set, with the job's last error if it has one."""
        k = self.keys(queue)
        rows = self._oldest_with_fields(k.settle, k.job_prefix, _int(limit, 1, 1000, "limit"), ("err",),
                                        job_id_of=lambda member: _text(member).rpartition(":")[2])
        return [EndedJob.parse(member, queue, score, err) for member, score, (err,) in rows]

    def settled(self, queue: str, jobs: Sequence[EndedJob]) -> int:
        """Forget entries the jobs table now reflects (unless they changed since they were read)."""
        if not jobs:
            return 0
        k = self.keys(queue)
        removed = 0
        for start in range(0, len(jobs), 1000):
            removed += self.scripts.settled(k, [(j.member, j.ended_at_ms) for j in jobs[start:start + 1000]])
        return removed

    def redrive(self, queue: str, job_id: str | None = None, generation: int = 0) -> int:
        """Move one dead job (NOT_FOUND if it is not dead) or all of them back to ready.

        ``generation``: the redrive generation the jobs table minted for this job's redrive
        (``sluice.gateway.redrive``, which every redrive of a queue with a jobs table goes through);
        the worker's grant needs it to leave the job's final item. 0 (only for all, or for
        queues with no jobs table, such as the relay's own) leaves the job's generation alone.
        """
        k = self.keys(queue)
        if job_id is not None:
            generation = _int(generation, 0, MAX_TOKEN, "generation")
            return self.scripts.redrive(k, validate_job_id(job_id), 1, generation)
        if generation:
            raise InvalidInput("a redrive generation belongs to one job: give its job_id")
        total = 0
        while moved := self.scripts.redrive(k, None, MAX_BATCH):
            total += moved
        return total

    def trim_dead(self, queue: str, keep: int, max_age_ms: int, limit: int = 1000) -> tuple[int, int]:
        """Delete the oldest dead jobs beyond ``keep`` or older than ``max_age_ms`` (0 = no such
        limit), at most ``limit`` looked at; one whose ending is not settled yet stays.
        Returns (trimmed, kept unsettled). Their endings live on in the jobs table."""
        k = self.keys(queue)
        return self.scripts.trim(k, _int(keep, 0, 1_000_000_000, "keep"),
                                 _int(max_age_ms, 0, MAX_TOKEN, "max_age_ms"), _int(limit, 1, 1000, "limit"))

    def purge_dead(self, queue: str) -> int:
        k = self.keys(queue)
        total = 0
        while deleted := self.scripts.purge(k, MAX_BATCH):
            total += deleted
        return total

    # --- queues -----------------------------------------------------------------------------

    def stats(self, queue: str) -> QueueStats:
        k = self.keys(queue)
        r = self.scripts.stats(k)
        return QueueStats(queue=queue, ready=r.ready, delayed=r.delayed, leased=r.leased, dead=r.dead,
                          oldest_ready_age_ms=None if r.oldest_ready_age_ms < 0 else r.oldest_ready_age_ms,
                          config=_config(r.config), idle_workers=r.idle, finished=r.finished)

    def overdue_leases(self, queue: str) -> int:
        """Leases past their deadline that nobody has reaped yet (a crashed or frozen worker), by
        Redis's clock; a read, for ``sluice top``."""
        try:
            seconds, micros = self.client.time()
            now_ms = int(seconds) * 1000 + int(micros) // 1000
            return int(self.client.zcount(self.keys(queue).leased, 0, now_ms))
        except redis.exceptions.RedisError as exc:
            raise translate(exc) from exc

    def holds(self, queue: str, job_id: str) -> bool:
        """Whether Redis holds ``job_id`` live (ready, delayed or leased). A read, for ``GET``:
        the relay's ``queued`` status write is best effort (``relay/status.py`` drops what it
        cannot write at full rate), so an ``accepted`` item may be a job Redis already has."""
        k = self.keys(queue)
        try:
            p = self.client.pipeline(transaction=False)
            for zset in (k.ready, k.delayed, k.leased):
                p.zscore(zset, job_id)
            return any(score is not None for score in p.execute())
        except redis.exceptions.RedisError as exc:
            raise translate(exc) from exc

    # --- waiting for work (a worker's linger) -------------------------------------------------

    def idle(self, queue: str, worker_id: str, ms: int) -> int:
        """``worker_id`` waits for work in ``queue`` until now + ``ms`` (0: no longer); the relay
        counts such workers (``stats``) and starts none for jobs they will take. Returns how many
        wait now."""
        if not isinstance(worker_id, str) or not 0 < len(worker_id) <= 256:
            raise InvalidInput(f"worker_id must be a string of 1 to 256 characters, got {worker_id!r}")
        return self.scripts.idle(self.keys(queue), worker_id, _int(ms, 0, MAX_IDLE_MS, "ms"))

    def wait_for_work(self, queue: str, timeout_ms: int) -> bool:
        """Block until ``push.lua`` pushes a job into ``queue`` (True) or ``timeout_ms`` passes (False).

        BLPOP on the queue's wake list, one token per job pushed: a token may be stale (nobody
        waited when it was pushed), so True means "lease now", not "a job is surely there"."""
        timeout_ms = _int(timeout_ms, 1, MAX_WAIT_MS, "timeout_ms")
        try:
            return self.client.blpop([self.keys(queue).wake], timeout=timeout_ms / 1000) is not None
        except REDIS_ERRORS as exc:
            raise translate(exc) from exc

    def get_config(self, queue: str) -> QueueConfig:
        k = self.keys(queue)
        try:
            return _config(self.client.hgetall(k.config))
        except REDIS_ERRORS as exc:
            raise translate(exc) from exc

    def set_config(self, queue: str, **changes: Any) -> QueueConfig:
        """Change some knobs (max_in_flight, rate_per_s, burst, paused, high/low_watermark)."""
        k = self.keys(queue)
        if not changes:
            raise InvalidInput("set_config needs at least one change")
        fields = {name: _config_value(name, value) for name, value in changes.items()}
        self._register(queue)
        self.scripts.config(k, fields)
        return self.get_config(queue)

    def queues(self) -> list[str]:
        """Every queue ever enqueued to or configured (the advisory registry)."""
        try:
            names = self.client.smembers(QUEUES_KEY)
        except REDIS_ERRORS as exc:
            raise translate(exc) from exc
        return sorted(n for n in map(_text, names) if QUEUE_NAME_RE.fullmatch(n))

    # --- relay ----------------------------------------------------------------------------

    def push(self, queue: str, topic: str, partition: int, owner_token: int,
             records: Sequence[tuple[int, JobSpec]], gens: Mapping[str, int] | None = None) -> PushResult:
        """Enqueue Kafka records exactly once per (topic, partition) offset, fenced by owner.

        Records at or below the partition's stored offset are skipped, as are ids that
        already exist. Raises StaleToken if a newer relay owns the partition, ReservedQueue
        for one of Sluice's own queues. Batches over 1000 records are sent in offset order,
        1000 at a time (each chunk atomic). ``gens``: the redrive generation of jobs that
        have one (the jobs table's), stored on the new job for its grant.
        """
        k = self.keys(validate_public_queue(queue))
        _topic(topic)
        _int(partition, 0, 1_000_000, "partition")
        _token(owner_token)
        now = wall_ms()
        checked = []
        for record in records:
            if not isinstance(record, tuple) or len(record) != 2:
                raise InvalidInput("records must be (offset, JobSpec) pairs")
            fields = job_fields(record[1], queue, now, RELAY_SKEW_MS)
            gen = _int((gens or {}).get(fields.job_id, 0), 0, MAX_TOKEN, "redrive generation")
            checked.append((_int(record[0], 0, MAX_TOKEN, "offset"), fields, gen))
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

    def push_many(self, topic: str, items: Sequence[PushItem],
                  gens: Mapping[str, int] | None = None) -> list[PushResult | SluiceError]:
        """The relay's push: ``push`` for each (queue, partition, owner token, records) item, for
        records already decoded (``DecodedJob``: checked against ``JobSpec``'s fields, payload
        canonical JSON), in two round trips however many items: the registry, then push.lua per
        item (per 1000 records) in one pipeline. ``gens``: the jobs table's redrive generation of
        the jobs that have one, stored on each new job for its grant.

        Per item, in order: its result, or the error that refused it (``StaleToken``: a newer
        relay owns the partition; ``InvalidInput``; ``QueueNotAllowed``), nothing of a refused
        item written. Raises ``BackendUnavailable`` if a round trip failed (any item may have
        landed: push.lua's offset record makes the retry safe).
        """
        _topic(topic)
        horizon = wall_ms() + MAX_DELAY_MS + RELAY_SKEW_MS
        out: list[PushResult | SluiceError] = []
        calls: list[tuple[QueueKeys, str, int, list[Any]]] = []
        owners: list[int] = []  # per call: its item's index
        for i, (queue, partition, owner_token, records) in enumerate(items):
            try:
                k = self.keys(validate_public_queue(queue))
                _int(partition, 0, 1_000_000, "partition")
                for args in _push_args(queue, _token(owner_token), records, horizon, gens):
                    calls.append((k, topic, partition, args))
                    owners.append(i)
            except SluiceError as exc:
                out.append(exc)
                continue
            out.append(PushResult(0, 0, -1))
        refused = self._register_all({k.queue for k, _, _, _ in calls})
        sent = []
        for c, (k, _, _, _) in enumerate(calls):
            if k.queue in refused:
                out[owners[c]] = refused[k.queue]
            else:
                sent.append(c)
        for c, result in zip(sent, self.scripts.push_many([calls[c] for c in sent]), strict=True):
            before = out[owners[c]]
            if isinstance(before, SluiceError):
                continue  # an earlier chunk of this item was refused: its first error stands
            out[owners[c]] = result if isinstance(result, SluiceError) else PushResult(
                before.pushed + result.pushed, before.skipped + result.skipped, result.offset)
        return out

    def _register_all(self, queues: set[str]) -> dict[str, SluiceError]:
        """``_register`` for several queues in one round trip; the refused ones, with why."""
        refused: dict[str, SluiceError] = {}
        asked = []
        for queue in sorted(queues):
            try:
                self.limits.check_name(queue)
                asked.append(queue)
            except SluiceError as exc:
                refused[queue] = exc
        replies = self.scripts.register_many(QUEUES_KEY, [(q, self.limits.registry_limit(q)) for q in asked])
        refused.update((q, r) for q, r in zip(asked, replies, strict=True) if isinstance(r, SluiceError))
        return refused

    def relayed_offset(self, queue: str, topic: str, partition: int, owner_token: int) -> int:
        """The partition's offset recorded by push.lua in ``queue`` (-1: nothing pushed yet)."""
        k = self.keys(queue)
        _int(partition, 0, 1_000_000, "partition")
        try:
            value = self.client.hget(k.relayed(topic, partition), "offset")
        except REDIS_ERRORS as exc:
            raise translate(exc) from exc
        return -1 if value is None else int(value)

    def take_rate(self, queue: str, wanted: int) -> int:
        """How many of ``wanted`` jobs the queue's shared token bucket allows now."""
        k = self.keys(queue)
        return self.scripts.rate(k, _int(wanted, 1, 1_000_000, "wanted"))


PushItem = tuple[str, int, int, Sequence[tuple[int, DecodedJob]]]  # queue, partition, owner token, records


def _topic(topic: object) -> str:
    if not isinstance(topic, str) or not 0 < len(topic) <= 249 or any(c in topic for c in ":{} \r\n"):
        raise InvalidInput(f"invalid topic {topic!r}")
    return topic


def _push_args(queue: str, owner_token: int, records: Sequence[tuple[int, DecodedJob]],
               horizon: int, gens: Mapping[str, int] | None = None) -> list[list[Any]]:
    """push.lua's ARGV for decoded records, per MAX_BATCH in offset order. What ``job_fields``
    checks for a JobSpec that decoding has not (the queue, the clock-relative bounds, the
    size); push.lua checks the id and the meta again, and stores the payload as given."""
    if not records:
        raise InvalidInput("push needs at least one record")
    if len(records) > MAX_BATCH:  # each chunk raises the offset record: chunks go in offset order
        records = sorted(records, key=lambda r: r[0])
    gens = gens or None
    chunks = []
    for start in range(0, len(records), MAX_BATCH):
        chunk = records[start:start + MAX_BATCH]
        flat: list[str] = []
        extend = flat.extend
        for offset, job in chunk:
            if type(job) is not DecodedJob:
                raise InvalidInput(f"expected DecodedJobs of queue {queue!r}, got {job!r:.200}")
            # one unpacking, not an attribute lookup per field
            job_id, job_queue, payload, priority, max_attempts, lease_ms, run_at_ms, enqueued_at_ms = job
            if job_queue != queue:
                raise InvalidInput(f"expected DecodedJobs of queue {queue!r}, got {job!r:.200}")
            if type(offset) is not int or not 0 <= offset <= MAX_TOKEN:
                raise InvalidInput(f"offset must be an integer in 0..{MAX_TOKEN}, got {offset!r}")
            if run_at_ms > horizon or enqueued_at_ms > horizon:
                raise InvalidInput(f"job {job_id!r}: run_at_ms/enqueued_at_ms more than 7 days ahead")
            if len(payload) * 4 > MAX_PAYLOAD_BYTES and len(payload.encode()) > MAX_PAYLOAD_BYTES:
                raise InvalidInput(f"payload of {job_id} is larger than {MAX_PAYLOAD_BYTES} bytes")
            gen = "0"
            if gens is not None and job_id in gens:
                found = gens[job_id]
                if type(found) is not int or not 0 <= found <= MAX_TOKEN:
                    raise InvalidInput(f"redrive generation of {job_id}: 0..{MAX_TOKEN}, not {found!r}")
                gen = str(found)
            extend((str(offset), job_id, payload, f"{priority},{max_attempts},{lease_ms},{enqueued_at_ms}",
                    str(run_at_ms), gen))
        chunks.append(push_argv(owner_token, flat))
    return chunks


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


_CONFIG_INTS = ("max_in_flight", "burst", "high_watermark", "low_watermark", "max_delayed", "max_dead")


def _config_value(name: str, value: object) -> str:
    if name in _CONFIG_INTS:
        return str(_int(value, 0, 1_000_000_000, name))
    if name == "rate_per_s":
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1e9:
            raise InvalidInput(f"rate_per_s must be a number in 0..1e9, got {value!r}")
        return repr(float(value))
    if name == "paused":
        if not isinstance(value, bool):
            raise InvalidInput(f"paused must be a bool, got {value!r}")
        return "1" if value else "0"
    raise InvalidInput(f"unknown queue setting {name!r}")


def _config(raw: dict[Any, Any]) -> QueueConfig:
    fields = {_text(key): _text(value) for key, value in raw.items()}
    return QueueConfig(
        **{name: int(fields[name]) for name in _CONFIG_INTS if name in fields},
        rate_per_s=float(fields.get("rate_per_s", 0)),
        paused=fields.get("paused") == "1",
    )


def redis_auth_token(arn: str, settings: Settings) -> str:
    """The ElastiCache AUTH token from Secrets Manager (a plain string or {"password": ...})."""
    import json

    from sluice.backends.aws.secrets import secret_string
    from sluice.core.errors import BackendUnavailable

    secret = secret_string(arn, settings, "Redis AUTH secret")
    if secret.startswith("{"):
        value = json.loads(secret)
        secret = value.get("password") or value.get("token") or value.get("auth_token") or ""
    if not secret:
        raise BackendUnavailable(f"the secret {arn} holds no Redis AUTH token")
    return str(secret)
