"""Partition ownership: which Kafka partitions this relay may push, through leases.

Each (topic, partition) is a job of the internal queue ``sluice-relay`` (our own
engine, dogfooded); a relay owns a partition while it holds that job's lease, and
the lease token is the owner token ``push.lua`` checks. ``sluice.recovery`` builds
the same jobs, so the naming lives here with the leasing.

The queue is reserved (``models.RESERVED_QUEUE_PREFIX``): only ``enqueue_internal``
writes into it. Whatever is leased from it is still checked (``_partition_of``) before
it is trusted, because a job could have got there before the queue was reserved: a job
whose id is not its partition's own, or whose payload is not well-formed, is removed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sluice.errors import BackendUnavailable, LeaseLost, SluiceError
from sluice.models import RESERVED_QUEUE_PREFIX, JobSpec, LeasedJob
from sluice.relay.state import _Owned, _RelayState

log = logging.getLogger("sluice.relay")  # one logger for the whole relay, as before the package split

RELAY_QUEUE = RESERVED_QUEUE_PREFIX + "relay"
OWNERSHIP_MAX_ATTEMPTS = 100  # a killed relay costs its partition job one attempt; redrive resets
MAX_PARTITION = 1_000_000  # the engine's bound on a partition number (RedisQueue.push)


def partition_job_id(topic: str, partition: int) -> str:
    return f"{topic}.{int(partition)}"


def partition_job(topic: str, partition: int, lease_ms: int) -> JobSpec:
    """The ownership job of one partition (enqueued with ``enqueue_internal``)."""
    return JobSpec(job_id=partition_job_id(topic, partition), queue=RELAY_QUEUE,
                   payload={"topic": topic, "partition": partition},
                   max_attempts=OWNERSHIP_MAX_ATTEMPTS, lease_ms=lease_ms)


def _partition_of(job: LeasedJob) -> tuple[str, int] | str:
    """(topic, partition) of a well-formed ownership job, or why it is not one."""
    payload = job.payload
    if not isinstance(payload, dict) or set(payload) != {"topic", "partition"}:
        return "payload is not {topic, partition}"
    topic, partition = payload["topic"], payload["partition"]
    if not isinstance(topic, str) or not topic:
        return "topic is not a non-empty string"
    if isinstance(partition, bool) or not isinstance(partition, int) or not 0 <= partition <= MAX_PARTITION:
        return f"partition is not an integer in 0..{MAX_PARTITION}"
    if job.job_id != partition_job_id(topic, partition):
        return f"job id is not the partition's own ({partition_job_id(topic, partition)!r})"
    return topic, partition


class _Ownership(_RelayState):
    """Taking, keeping and giving back partition leases (a mixin of ``Relay``)."""

    def _check_ownership(self, now: float) -> None:
        changed = False
        for owned in list(self._owned.values()):
            if now - owned.leased_at >= self.lease_ms / 3000:
                changed |= self._extend(owned, now)
        if now >= self._next_ownership:
            self._next_ownership = now + self.ownership_s
            changed |= self._acquire(now)
        if changed:
            self.source.assign(sorted(self._owned))
            self.report.partitions_owned |= set(self._owned)

    def _extend(self, owned: _Owned, now: float) -> bool:
        try:
            self.engine.extend(RELAY_QUEUE, owned.job_id, owned.token, self.lease_ms)
        except LeaseLost:
            self._lose(owned.number, "lease lost")
            return True
        except BackendUnavailable:
            if now - owned.leased_at >= self.lease_ms / 1000:
                self._lose(owned.number, "lease expired while Redis was unreachable")
                return True
            raise
        owned.leased_at = now
        return False

    def _acquire(self, now: float) -> bool:
        self._register()
        limit = self.max_partitions
        if self.partition_groups > 1 and now - self._started < self.share_grace_s:
            # Several relays run at once, one per group: each takes its share first, and any
            # partition still free after the grace period (a group's invocation did not start).
            limit = min(limit, -(-len(self._registered) // self.partition_groups))
        room = limit - len(self._owned)
        if room <= 0 or not self._registered:
            return False
        gained: list[int] = []
        # n = room, not our partition count: another topic's unowned jobs may sit in the same queue
        for job in self.engine.lease(RELAY_QUEUE, min(room, 100), self.lease_ms, self.relay_id):
            found = _partition_of(job)
            if isinstance(found, str):
                self._remove_bad(job, found)
                continue
            topic, p = found
            if topic != self.topic or p in self._owned:
                self.engine.release(RELAY_QUEUE, job.job_id, job.token)  # another relay's topic
                continue
            self._owned[p] = _Owned(number=p, job_id=job.job_id, token=job.token, leased_at=now)
            gained.append(p)
        if gained:
            try:
                self.source.assign(sorted(self._owned))  # rewinding needs the partitions assigned
                self.source.rewind_to_committed(gained)
            except SluiceError:
                self._give_back(gained)  # never push a partition whose start is unknown
                raise
            log.info("relay %s took partitions %s", self.relay_id, gained)
        return bool(gained)

    def _remove_bad(self, job: LeasedJob, why: str) -> None:
        """A job in the ownership queue that no relay enqueued: acked, so it is gone for good
        (dead, it would come back with the next redrive)."""
        self.report.bad_ownership_jobs += 1
        self._registered = set()  # if it sat on a partition's own id, that partition needs its job back
        self.metrics.count("RelayBadOwnershipJob")
        log.warning("relay %s removes job %r from %s: %s", self.relay_id, job.job_id[:140], RELAY_QUEUE, why)
        try:
            self.engine.ack(RELAY_QUEUE, job.job_id, job.token)
        except SluiceError as exc:  # its lease expires; the next relay to lease it removes it
            log.warning("could not remove job %r from %s: %s", job.job_id[:140], RELAY_QUEUE, exc)

    def _give_back(self, partitions: Sequence[int]) -> None:
        for p in partitions:
            owned = self._owned.pop(p, None)
            if owned is None:
                continue
            try:
                self.engine.release(RELAY_QUEUE, owned.job_id, owned.token)
            except SluiceError as exc:  # it expires on its own
                log.warning("could not release partition %s: %s", p, exc)

    def _register(self) -> None:
        """Make sure every partition has its ownership job (idempotent enqueue)."""
        partitions = set(self.source.partitions())
        new = partitions - self._registered
        for p in sorted(new):
            self.engine.enqueue_internal(partition_job(self.topic, p, self.lease_ms))
        if new:
            # Killed relays spend attempts of their partition jobs; one must never stay dead.
            self.engine.redrive(RELAY_QUEUE)
        self._registered = partitions

    def _lose(self, partition: int, why: str) -> None:
        owned = self._owned.pop(partition, None)
        if owned is None:
            return
        self.report.partitions_lost += 1
        log.warning("relay %s stops pushing partition %s: %s", self.relay_id, partition, why)
        self.metrics.count("RelayPartitionLost")
