"""``RedisRelayEngine``: what the relay needs of Redis (``sluice.relay.ports.RelayEngine``).

Its own: pushing Kafka records exactly once per (topic, partition) offset (``push.lua``), the
offsets pushed so far, the shared rate bucket, the enqueue of the relay's partition ownership
jobs, and the maintenance that keeps queues drained (the settle set, trimming dead letters).
The lease calls on its ownership jobs go through a ``RedisJobQueue``; the reads and the default
rate through ``RedisAdmin`` and ``RedisQueueConfig``, all over one shared connection.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

import redis

from sluice.backends.redis.admin import RedisAdmin
from sluice.backends.redis.checks import (
    MAX_BATCH,
    MAX_PAYLOAD_BYTES,
    MAX_TOKEN,
    RELAY_SKEW_MS,
    checked_int,
    checked_token,
    checked_topic,
    job_fields,
    text,
)
from sluice.backends.redis.config import RedisQueueConfig
from sluice.backends.redis.connection import RedisConnection
from sluice.backends.redis.keys import QueueKeys
from sluice.backends.redis.queue import RedisJobQueue, enqueue_specs
from sluice.backends.redis.scripts import REDIS_ERRORS, PushResult, push_argv, translate
from sluice.core import read_bounds
from sluice.core.clock import wall_ms
from sluice.core.config import Settings
from sluice.core.errors import InvalidInput, InvalidQueueName, SluiceError
from sluice.core.models import (
    MAX_DELAY_MS,
    DecodedJob,
    Extended,
    JobSpec,
    LeasedJob,
    QueueConfig,
    QueueStats,
    SettleEntry,
    is_reserved_queue,
    validate_public_queue,
)

__all__ = ["PushItem", "PushResult", "RedisRelayEngine", "push_args"]

log = logging.getLogger("sluice.relay")
PushItem = tuple[str, int, int, Sequence[tuple[int, DecodedJob]]]  # queue, partition, owner token, records


# A job's err is read for a settle entry only within the longest one a script writes (its read bound:
# fail.lua refuses a longer one), since the queue's team may write the field by hand (``bounded_fields``).
MAX_ERR_BYTES = read_bounds.MAX_ERR_BYTES
# The longest relayed offset push.lua writes (an integer up to 2**53 - 1).
_OFFSET_DIGITS = 16
_CANONICAL_INT = re.compile(r"-1|0|[1-9][0-9]*")


class RedisRelayEngine:
    """The relay's Redis, over a shared ``RedisConnection``."""

    def __init__(self, conn: RedisConnection, timeline_ttl_ms: int = 0) -> None:
        self.conn = conn
        self.timeline_ttl_ms = timeline_ttl_ms  # > 0: a reaped lease is a step on its job's timeline
        self.jobs = RedisJobQueue(conn)
        self.admin = RedisAdmin(conn)
        self.config = RedisQueueConfig(conn)

    @classmethod
    def from_settings(cls, settings: Settings) -> RedisRelayEngine:
        return cls(RedisConnection.from_settings(settings), settings.timeline_ttl_s * 1000)

    @property
    def client(self) -> redis.Redis[Any]:
        """The redis client (``relay.recovery`` reads and writes its epochs with it)."""
        return self.conn.client

    def close(self) -> None:
        self.conn.close()

    # --- push -------------------------------------------------------------------------------

    def push(self, queue: str, topic: str, partition: int, owner_token: int,
             records: Sequence[tuple[int, JobSpec]], gens: Mapping[str, int] | None = None) -> PushResult:
        """Enqueue Kafka records exactly once per (topic, partition) offset, fenced by owner.

        Records at or below the partition's stored offset are skipped, as are ids that
        already exist. Raises StaleToken if a newer relay owns the partition, ReservedQueue
        for one of Sluice's own queues. Batches over 1000 records are sent in offset order,
        1000 at a time (each chunk atomic). ``gens``: the redrive generation of jobs that
        have one (the jobs table's), stored on the new job for its grant.
        """
        k = self.conn.keys(validate_public_queue(queue))
        checked_topic(topic)
        checked_int(partition, 0, 1_000_000, "partition")
        checked_token(owner_token)
        now = wall_ms()
        checked = []
        for record in records:
            if not isinstance(record, tuple) or len(record) != 2:
                raise InvalidInput("records must be (offset, JobSpec) pairs")
            fields = job_fields(record[1], queue, now, RELAY_SKEW_MS)
            gen = checked_int((gens or {}).get(fields.job_id, 0), 0, MAX_TOKEN, "redrive generation")
            checked.append((checked_int(record[0], 0, MAX_TOKEN, "offset"), fields, gen))
        if not checked:
            raise InvalidInput("push needs at least one record")
        checked.sort(key=lambda r: r[0])
        self.conn.register(queue)
        pushed = skipped = 0
        result = PushResult(0, 0, -1)
        for start in range(0, len(checked), MAX_BATCH):
            result = self.conn.scripts.push(k, topic, partition, owner_token,
                                            checked[start:start + MAX_BATCH], self.conn.limits.queue_budget)
            pushed += result.pushed
            skipped += result.skipped
            if result.left:  # over the budget, or paused: the later chunks must not pass the records left
                return PushResult(pushed, skipped, result.offset, len(checked) - pushed - skipped,
                                  result.paused)
        return PushResult(pushed=pushed, skipped=skipped, offset=result.offset)

    def push_many(self, topic: str, items: Sequence[PushItem],
                  gens: Mapping[str, int] | None = None) -> list[PushResult | SluiceError]:
        """The relay's push: ``push`` for each (queue, partition, owner token, records) item, for
        records already decoded (``DecodedJob``: checked against ``JobSpec``'s fields, payload
        canonical JSON), in two round trips however many items: the registry, then push.lua per
        item (per 1000 records) in one pipeline. ``gens``: the jobs table's redrive generation of
        the jobs that have one, stored on each new job for its grant. A result's ``left`` counts
        the item's last records not taken: their jobs did not fit the queue's byte budget (a later
        chunk takes nothing unless the one before it was taken whole: ``push_args``' follow).

        Per item, in order: its result, or the error that refused it (``StaleToken``: a newer
        relay owns the partition; ``InvalidInput``; ``QueueNotAllowed``), nothing of a refused
        item written. Raises ``BackendUnavailable`` if a round trip failed (any item may have
        landed: push.lua's offset record makes the retry safe).
        """
        checked_topic(topic)
        horizon = wall_ms() + MAX_DELAY_MS + RELAY_SKEW_MS
        out: list[PushResult | SluiceError] = []
        calls: list[tuple[QueueKeys, str, int, list[Any]]] = []
        owners: list[int] = []  # per call: its item's index
        for i, (queue, partition, owner_token, records) in enumerate(items):
            try:
                k = self.conn.keys(validate_public_queue(queue))
                checked_int(partition, 0, 1_000_000, "partition")
                for args in push_args(queue, checked_token(owner_token), records, horizon, gens,
                                      self.conn.limits.queue_budget):
                    calls.append((k, topic, partition, args))
                    owners.append(i)
            except SluiceError as exc:
                out.append(exc)
                continue
            out.append(PushResult(0, 0, -1))
        # The intake admitted every record here (minted and sealed: a gateway's 202 is binding, or a
        # harness's record whose queue it registered under the limit): no limit refuses them now.
        refused = self.conn.register_all({k.queue for k, _, _, _ in calls}, admitted=True)
        sent = []
        for c, (k, _, _, _) in enumerate(calls):
            if k.queue in refused:
                out[owners[c]] = refused[k.queue]
            else:
                sent.append(c)
        for c, result in zip(sent, self.conn.scripts.push_many([calls[c] for c in sent]), strict=True):
            before = out[owners[c]]
            if isinstance(before, SluiceError):
                continue  # an earlier chunk of this item was refused: its first error stands
            out[owners[c]] = result if isinstance(result, SluiceError) else PushResult(
                before.pushed + result.pushed, before.skipped + result.skipped, result.offset,
                before.left + result.left, before.paused or result.paused)
        return out

    def relayed_offset(self, queue: str, topic: str, partition: int, owner_token: int) -> int:
        """The partition's offset recorded by push.lua in ``queue`` (-1: nothing pushed yet)."""
        k = self.conn.keys(queue)
        checked_int(partition, 0, 1_000_000, "partition")
        key = k.relayed(topic, partition)
        try:  # the queue's team may write the hash by hand: read as push.lua does (its small_hget)
            value = self.conn.bounded_fields([key], ("offset",), _OFFSET_DIGITS)[0][0]
        except REDIS_ERRORS as exc:
            raise translate(exc) from exc
        word = None if value is None else text(value)
        return int(word) if word is not None and _CANONICAL_INT.fullmatch(word) else -1

    def take_rate(self, queue: str, wanted: int) -> int:
        """How many of ``wanted`` jobs the queue's shared token bucket allows now."""
        k = self.conn.keys(queue)
        return self.conn.scripts.rate(k, checked_int(wanted, 1, 1_000_000, "wanted"))

    def register(self, queue: str, *, admitted: bool = False) -> bool:
        """Register ``queue`` (QueueNotAllowed beyond the limits): the relay asks before taking
        a record for a queue it has not seen, so a refused one goes to the dead-letter topic.
        ``admitted``: a minted, sealed record (a gateway answered 202): no limit applies. True if new."""
        return self.conn.register(self.conn.keys(queue).queue, admitted=admitted)

    # --- the partition ownership jobs (Sluice's own queues) -----------------------------------

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
        return enqueue_specs(self.conn, specs, internal=True)

    def lease(self, queue: str, n: int, lease_ms: int | None = None, worker_id: str = "",
              policy_attempts: int | None = None) -> list[LeasedJob]:
        return self.jobs.lease(queue, n, lease_ms, worker_id, policy_attempts)

    def extend(self, queue: str, job_id: str, lease_token: int, lease_ms: int) -> Extended:
        return self.jobs.extend(queue, job_id, lease_token, lease_ms)

    def ack(self, queue: str, job_id: str, lease_token: int) -> None:
        self.jobs.ack(queue, job_id, lease_token)

    def release(self, queue: str, job_id: str, lease_token: int) -> None:
        self.jobs.release(queue, job_id, lease_token)

    # --- maintenance --------------------------------------------------------------------------

    def reap(self, queue: str, limit: int = 1000, timeline_ttl_ms: int | None = None) -> int:
        """``RedisJobQueue.reap``, its timeline steps by this engine's ``timeline_ttl_ms`` unless told."""
        ttl = self.timeline_ttl_ms if timeline_ttl_ms is None else timeline_ttl_ms
        return self.jobs.reap(queue, limit, ttl)

    def unsettled(self, queue: str, limit: int = 100) -> list[SettleEntry]:
        """The oldest ``limit`` entries of the settle set (``keys.settle``: endings the jobs table
        has not been told), with the job's last error if it has one."""
        k = self.conn.keys(queue)
        rows = self.conn.oldest_with_fields(k.settle, k.job_prefix, checked_int(limit, 1, 1000, "limit"),
                                            ("err",), max_bytes=MAX_ERR_BYTES,
                                            job_id_of=lambda member: text(member).rpartition(":")[2])
        return [SettleEntry.parse(member, queue, score, err) for member, score, (err,) in rows]

    def settled(self, queue: str, jobs: Sequence[SettleEntry], residue: Sequence[SettleEntry] = ()) -> int:
        """Forget entries the jobs table now reflects (unless they changed since they were read).
        ``residue``: those of ``jobs`` whose item is succeeded or cancelled; their dead jobs go too."""
        if not jobs:
            return 0
        k = self.conn.keys(queue)
        gone = {j.member for j in residue}
        removed = 0
        for start in range(0, len(jobs), 1000):
            chunk = jobs[start:start + 1000]
            removed += self.conn.scripts.settled(k, [(j.member, j.ended_at_ms, j.member in gone)
                                                     for j in chunk])
        return removed

    def trim_dead(self, queue: str, keep: int, max_age_ms: int, limit: int = 1000) -> tuple[int, int]:
        """Delete the oldest dead jobs beyond ``keep`` or older than ``max_age_ms`` (0 = no such
        limit), at most ``limit`` looked at; one whose ending is not settled yet stays.
        Returns (trimmed, kept unsettled). Their endings live on in the jobs table."""
        k = self.conn.keys(queue)
        return self.conn.scripts.trim(k, checked_int(keep, 0, 1_000_000_000, "keep"),
                                      checked_int(max_age_ms, 0, MAX_TOKEN, "max_age_ms"),
                                      checked_int(limit, 1, 1000, "limit"))

    # --- reads and the default rate (``admin``, ``config``) -----------------------------------

    def stats(self, queue: str) -> QueueStats:
        return self.admin.stats(queue)

    def queues(self) -> list[str]:
        """Every registered queue, the registry's cache loaded again from the durable registry first
        if Redis lost it (``RedisConnection.warm_registry``): maintenance walks this list. A load that
        fails is logged; the cache's names are walked, and the next maintenance loads again."""
        try:
            self.conn.warm_registry()
        except SluiceError as exc:
            log.warning("could not load the registry's Redis cache from the durable registry: %s", exc)
        return self.admin.queues()

    def memory_percent(self) -> float | None:
        return self.admin.memory_percent()

    def redrive(self, queue: str, job_id: str | None = None, generation: int = 0) -> int:
        return self.admin.redrive(queue, job_id, generation)

    def get_config(self, queue: str) -> QueueConfig:
        return self.config.get_config(queue)

    def set_config(self, queue: str, **changes: Any) -> QueueConfig:
        return self.config.set_config(queue, **changes)


def push_args(queue: str, owner_token: int, records: Sequence[tuple[int, DecodedJob]],
              horizon: int, gens: Mapping[str, int] | None = None, budget: int = 0) -> list[list[Any]]:
    """push.lua's ARGV for decoded records, per MAX_BATCH in offset order. What ``job_fields``
    checks for a JobSpec that decoding has not (the queue, the clock-relative bounds, the
    size); push.lua checks the id and the meta again, and stores the payload as given."""
    if not records:
        raise InvalidInput("push needs at least one record")
    if len(records) > MAX_BATCH:  # each chunk raises the offset record: chunks go in offset order
        records = sorted(records, key=lambda r: r[0])
    gens = gens or None
    chunks, follow = [], -1
    for start in range(0, len(records), MAX_BATCH):
        chunk = records[start:start + MAX_BATCH]
        flat: list[str] = []
        extend = flat.extend
        for offset, job in chunk:
            if type(job) is not DecodedJob:
                raise InvalidInput(f"expected DecodedJobs of queue {queue!r}, got {job!r:.200}")
            # one unpacking, not an attribute lookup per field
            (job_id, job_queue, payload, priority, max_attempts, lease_ms, run_at_ms, enqueued_at_ms, group,
             trace) = job
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
                    str(run_at_ms), gen, group or "", trace or ""))
        # Each chunk after the first follows the one before: push.lua takes nothing of it unless
        # the stored offset reached that chunk's last offset (taken whole, not stopped by the budget).
        chunks.append(push_argv(owner_token, flat, budget, follow))
        follow = chunk[-1][0]
    return chunks
