"""``RedisJobQueue``: the ``sluice.core.ports.JobQueue`` port (and ``WorkWaiter``) over Redis,
for the workers and the gateway.

The lease life cycle (enqueue, lease, extend, ack, fail, release, cancel, reap) and a worker's
wait for work are its own; the port's reads and operator calls come from the ``admin`` and
``config`` facades it holds. Every state change is one Lua script (``lua/<verb>.lua``, called
through ``scripts.Scripts``); inputs are checked here first (``checks``).

Lease tokens minted by the scripts (by the queue's counter, strictly increasing for each job)
prove liveness only; the fencing token a handler writes with comes from the job store
(DynamoDB). The state machine, key layout and scripts are described in docs/engine.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

from sluice.backends.redis.admin import RedisAdmin
from sluice.backends.redis.checks import (
    MAX_BATCH,
    MAX_IDLE_MS,
    MAX_WAIT_MS,
    RECLAIM_PER_LEASE,
    checked_int,
    checked_lease_ms,
    checked_token,
    job_fields,
    text,
)
from sluice.backends.redis.config import RedisQueueConfig
from sluice.backends.redis.connection import RedisConnection
from sluice.backends.redis.scripts import REDIS_ERRORS, JobFields, translate
from sluice.core import read_bounds, timeline
from sluice.core.clock import wall_ms
from sluice.core.config import Settings
from sluice.core.errors import InvalidInput, SluiceError
from sluice.core.listing import DEFAULT_PAGE, JobPage
from sluice.core.models import (
    MAX_ATTEMPTS,
    MAX_DELAY_MS,
    DeadJob,
    Extended,
    JobSpec,
    LeasedJob,
    QueueConfig,
    QueueStats,
    truncate_error,
    validate_job_id,
    validate_public_queue,
)


class RedisJobQueue:
    """The worker's and the gateway's queue, over a shared ``RedisConnection``."""

    def __init__(self, conn: RedisConnection) -> None:
        self.conn = conn
        self.admin = RedisAdmin(conn)
        self.config = RedisQueueConfig(conn)

    @classmethod
    def from_settings(cls, settings: Settings) -> RedisJobQueue:
        return cls(RedisConnection.from_settings(settings))

    def close(self) -> None:
        self.conn.close()

    # --- enqueue --------------------------------------------------------------------------

    def enqueue(self, spec: JobSpec) -> bool:
        """True if newly added, False if a job with that id already existed (left untouched)."""
        return self.enqueue_many([spec])[0]

    def enqueue_many(self, specs: Sequence[JobSpec]) -> list[bool]:
        """Enqueue several jobs (any public queues); one script call per queue and 1000 jobs.

        Everything is validated before the first call, so one bad job writes nothing. A
        reserved queue (``models.RESERVED_QUEUE_PREFIX``) raises ReservedQueue.
        """
        return enqueue_specs(self.conn, specs, internal=False)

    # --- the lease life cycle ---------------------------------------------------------------

    def lease(self, queue: str, n: int, lease_ms: int | None = None, worker_id: str = "",
              policy_attempts: int | None = None) -> list[LeasedJob]:
        """Lease up to ``n`` (1..1000) jobs for ``lease_ms`` (None: each job's own lease_ms).

        Due delayed jobs and expired leases are reclaimed first (up to 100 of each).
        ``worker_id`` is validated but not stored in Redis (that would cost a write per
        job); the job store records the lease owner. ``policy_attempts`` (0..100, 0: the handler
        has no retry policy; None: say nothing) is kept in the queue's config hash, written only
        when it changes, and bounds the attempts a lapsed lease uses up (lease.lua ARGV[4]).
        """
        k = self.conn.keys(queue)
        checked_int(n, 1, MAX_BATCH, "n")
        ms = 0 if lease_ms is None else checked_lease_ms(lease_ms)
        if not isinstance(worker_id, str) or len(worker_id) > 256:
            raise InvalidInput(f"worker_id must be a string of at most 256 characters, got {worker_id!r}")
        if policy_attempts is not None:
            checked_int(policy_attempts, 0, MAX_ATTEMPTS, "policy_attempts")
        return self.conn.scripts.lease(k, n, ms, RECLAIM_PER_LEASE, policy_attempts)

    def extend(self, queue: str, job_id: str, lease_token: int, lease_ms: int) -> Extended:
        """New deadline = now + lease_ms. Raises LeaseLost (or StaleToken) unless ``lease_token`` holds it."""
        k = self.conn.keys(queue)
        return self.conn.scripts.extend(k, validate_job_id(job_id), checked_token(lease_token),
                                        checked_lease_ms(lease_ms))

    def ack(self, queue: str, job_id: str, lease_token: int) -> None:
        """Finish a job. A stale or unknown token raises and changes nothing."""
        error = self.ack_many(queue, [(job_id, lease_token)])[0]
        if error is not None:
            raise error

    def ack_many(self, queue: str, jobs: Sequence[tuple[str, int]]) -> list[SluiceError | None]:
        """Ack several jobs in one script call each 1000; per job None (acked) or the error."""
        k = self.conn.keys(queue)
        checked = []
        for pair in jobs:
            if not isinstance(pair, tuple | list) or len(pair) != 2:
                raise InvalidInput(f"expected (job_id, token) pairs, got {pair!r}")
            checked.append((validate_job_id(pair[0]), checked_token(pair[1])))
        out: list[SluiceError | None] = []
        for start in range(0, len(checked), MAX_BATCH):
            out += self.conn.scripts.ack(k, checked[start:start + MAX_BATCH])
        return out

    def fail(self, queue: str, job_id: str, lease_token: int, error: str,
             retry_after_ms: int | None = None, permanent: bool = False) -> str:
        """"retry" (after retry_after_ms; None = now), "dead" (permanent or out of attempts) or
        "cancelled" (a cancel was requested: the job is removed, its ending left to settle)."""
        k = self.conn.keys(queue)
        if not isinstance(error, str):
            raise InvalidInput(f"error must be a string, got {type(error).__name__}")
        error = truncate_error(error)
        after = 0 if retry_after_ms is None else checked_int(retry_after_ms, 0, MAX_DELAY_MS,
                                                              "retry_after_ms")
        if not isinstance(permanent, bool):
            raise InvalidInput("permanent must be a bool")
        return self.conn.scripts.fail(k, validate_job_id(job_id), checked_token(lease_token), error, after,
                                      permanent)

    def release(self, queue: str, job_id: str, lease_token: int) -> None:
        """Give a lease back; the attempt is not counted. A cancel-requested job is removed."""
        k = self.conn.keys(queue)
        self.conn.scripts.release(k, validate_job_id(job_id), checked_token(lease_token))

    def cancel(self, queue: str, job_id: str, settle: bool = False, cancelled: bool = False) -> str:
        """"removed" (it was waiting) or "requested" (leased: its worker sees it on extend).

        ``settle``: the jobs table says the job is leased (its holder died and the lease
        was reclaimed): a removal then also records the ending in the settle set, so the
        relay ends the item even if the caller cannot (docs/engine.md, Cancel).
        ``cancelled``: the jobs table says cancelled: a job Redis dead-lettered meanwhile is
        removed too, since the dead set holds only dead jobs (else ``AlreadyFinished``)."""
        k = self.conn.keys(queue)
        if not isinstance(settle, bool) or not isinstance(cancelled, bool):
            raise InvalidInput("settle and cancelled must be bools")
        if settle and cancelled:
            raise InvalidInput("the jobs table says leased (settle) or cancelled, not both")
        return self.conn.scripts.cancel(k, validate_job_id(job_id), settle, cancelled)

    def reap(self, queue: str, limit: int = 1000, timeline_ttl_ms: int | None = None) -> int:
        """Reclaim up to ``limit`` expired leases (and promote due delayed jobs); returns expired.
        ``timeline_ttl_ms`` > 0 (timelines on): each lapsed lease's job gets a "reap" step."""
        k = self.conn.keys(queue)
        ttl = checked_int(timeline_ttl_ms, 1000, 604_800_000, "timeline_ttl_ms") if timeline_ttl_ms else 0
        return self.conn.scripts.reap(k, checked_int(limit, 1, 10_000, "limit"), ttl, timeline.CAP)[0]

    def holds(self, queue: str, job_id: str) -> bool:
        """Whether Redis holds ``job_id`` live (ready, delayed or leased). A read, for ``GET``:
        the relay's ``queued`` status write is best effort (``relay/status.py`` drops what it
        cannot write at full rate), so an ``accepted`` item may be a job Redis already has."""
        k = self.conn.keys(queue)
        try:
            p = self.conn.client.pipeline(transaction=False)
            for zset in (k.ready, k.delayed, k.leased):
                p.zscore(zset, job_id)
            p.hstrlen(k.job(job_id), "grp")  # type: ignore[no-untyped-call]
            *scores, length = p.execute(raise_on_error=False)
            if isinstance(length, redis.exceptions.NoPermissionError):
                length = 1  # a user whose access string predates HSTRLEN: read it, as before
            for reply in (*scores, length):
                if isinstance(reply, Exception):
                    raise reply
            if any(score is not None for score in scores):
                return True
            # A grouped job waits in its group's ready zset (lua/_lib.lua, "Fair groups"). Its grp is
            # read only as long as a group name: the queue's team may write the field by hand, and a
            # 10 MB one was copied out of Redis at every GET of the job (read_bounds).
            if not 0 < int(length) <= read_bounds.CAPS["grp"]:
                return False
            group = self.conn.client.hget(k.job(job_id), "grp")
            return group is not None and self.conn.client.zscore(k.group(text(group)), job_id) is not None
        except redis.exceptions.RedisError as exc:
            raise translate(exc) from exc

    # --- waiting for work (a worker's linger) -------------------------------------------------

    def idle(self, queue: str, worker_id: str, ms: int) -> int:
        """``worker_id`` waits for work in ``queue`` until now + ``ms`` (0: no longer); the relay
        counts such workers (``stats``) and starts none for jobs they will take. Returns how many
        wait now."""
        if not isinstance(worker_id, str) or not 0 < len(worker_id) <= 256:
            raise InvalidInput(f"worker_id must be a string of 1 to 256 characters, got {worker_id!r}")
        return self.conn.scripts.idle(self.conn.keys(queue), worker_id, checked_int(ms, 0, MAX_IDLE_MS, "ms"))

    def wait_for_work(self, queue: str, timeout_ms: int, worker_id: str = "") -> bool:
        """Block until ``push.lua`` pushes a job into ``queue`` (True) or ``timeout_ms`` passes (False).

        BLPOP on ``worker_id``'s own wake list (push.lua wakes the workers waiting, those that
        began last first) and the queue's shared one (a token left by a push when nobody waited):
        a token may be stale, so True means "lease now", not "a job is surely there"."""
        timeout_ms = checked_int(timeout_ms, 1, MAX_WAIT_MS, "timeout_ms")
        if not isinstance(worker_id, str) or len(worker_id) > 256:
            raise InvalidInput(f"worker_id must be a string of at most 256 characters, got {worker_id!r}")
        keys = self.conn.keys(queue)
        lists = [keys.wake_of(worker_id), keys.wake] if worker_id else [keys.wake]
        try:
            return self.conn.client.blpop(lists, timeout=timeout_ms / 1000) is not None
        except REDIS_ERRORS as exc:
            raise translate(exc) from exc

    # --- the port's reads and operator calls (``admin``, ``config``) --------------------------

    def stats(self, queue: str) -> QueueStats:
        return self.admin.stats(queue)

    def overdue_leases(self, queue: str) -> int:
        return self.admin.overdue_leases(queue)

    def queues(self) -> list[str]:
        return self.admin.queues()

    def registry(self, queue: str) -> tuple[bool, int]:
        return self.admin.registry(queue)

    def register(self, queue: str, *, admitted: bool = False) -> bool:
        """The gateway's reservation of ``queue`` within the registry's limit (``register.lua``)."""
        return self.conn.register(queue, admitted=admitted)

    def memory_percent(self) -> float | None:
        return self.admin.memory_percent()

    def dead_letters(self, queue: str, limit: int = 100) -> list[DeadJob]:
        return self.admin.dead_letters(queue, limit)

    def list_jobs(self, queue: str, state: str, limit: int = DEFAULT_PAGE, cursor: str | None = None,
                  prefix: str | None = None) -> JobPage:
        return self.admin.list_jobs(queue, state, limit, cursor, prefix)

    def dead_spec(self, queue: str, job_id: str) -> JobSpec:
        return self.admin.dead_spec(queue, job_id)

    def redrive(self, queue: str, job_id: str | None = None, generation: int = 0) -> int:
        return self.admin.redrive(queue, job_id, generation)

    def purge_dead(self, queue: str) -> int:
        return self.admin.purge_dead(queue)

    def get_config(self, queue: str) -> QueueConfig:
        return self.config.get_config(queue)

    def set_config(self, queue: str, **changes: Any) -> QueueConfig:
        return self.config.set_config(queue, **changes)


def enqueue_specs(conn: RedisConnection, specs: Sequence[JobSpec], *, internal: bool) -> list[bool]:
    """enqueue.lua for ``specs``, one call per queue and ``MAX_BATCH`` jobs, each queue registered
    first; every spec is checked before the first call. ``internal``: Sluice's own queues."""
    now = wall_ms()
    by_queue: dict[str, list[tuple[int, JobFields]]] = {}
    for index, spec in enumerate(specs):
        queue = getattr(spec, "queue", None)
        conn.keys(queue)  # type: ignore[arg-type]
        if not internal:
            validate_public_queue(queue)
        by_queue.setdefault(queue, []).append((index, job_fields(spec, queue, now)))  # type: ignore[arg-type]
    out = [False] * len(specs)
    for queue, jobs in by_queue.items():
        conn.register(queue)
        for start in range(0, len(jobs), MAX_BATCH):
            chunk = jobs[start:start + MAX_BATCH]
            added = conn.scripts.enqueue(conn.keys(queue), [fields for _, fields in chunk], internal=internal)
            for (index, _), was_added in zip(chunk, added, strict=True):
                out[index] = was_added
    return out
