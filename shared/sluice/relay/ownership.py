"""Partition ownership: which Kafka partitions this relay may push, held through leases.

Each (topic, partition) is a job of the internal queue ``sluice-relay`` (our own
engine, dogfooded); a relay owns a partition while it holds that job's lease, and
the lease token is the owner token ``push.lua`` checks. ``sluice.relay.recovery`` builds
the same jobs, so the naming lives here with the leasing.

The queue is reserved (``models.RESERVED_QUEUE_PREFIX``): only ``enqueue_internal``
writes into it. Whatever is leased from it is still checked (``_partition_of``) before
it is trusted, because a job could have got there before the queue was reserved: a job
whose id is not its partition's own, or whose payload is not well-formed, is removed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sluice.core import bus as ev
from sluice.core.errors import BackendUnavailable, JobNotFound, LeaseLost, SluiceError
from sluice.core.models import RESERVED_QUEUE_PREFIX, JobSpec, LeasedJob
from sluice.relay.config import RelayConfig
from sluice.relay.hooks import RelayHooks
from sluice.relay.ports import RecordSource, RelayEngine
from sluice.relay.state import OwnedPartition, RelayReport

log = logging.getLogger("sluice.relay")  # one logger for the whole relay, as before the package split

RELAY_QUEUE = RESERVED_QUEUE_PREFIX + "relay"
OWNERSHIP_MAX_ATTEMPTS = 100  # a killed relay costs its partition job one attempt; redrive resets
MAX_PARTITION = 1_000_000  # the engine's bound on a partition number (RedisRelayEngine.push)


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


class Ownership:
    """Taking, keeping and giving back partition leases; ``owned`` is what this relay may push."""

    def __init__(self, engine: RelayEngine, source: RecordSource, config: RelayConfig, *, relay_id: str,
                 started: float, report: RelayReport, hooks: RelayHooks,
                 events: ev.EventBus) -> None:
        self.engine, self.source, self.config = engine, source, config
        self.topic = source.topic
        self.relay_id, self.report, self.hooks = relay_id, report, hooks
        self.events = events  # incidents: a partition lost, a bad ownership job
        self.owned: dict[int, OwnedPartition] = {}
        self._registered: set[int] = set()
        self._next_look = float("-inf")
        self._started = started
        self._first_gain: float | None = None  # when this relay first took a partition

    def check(self, now: float) -> None:
        """Extend the leases due, and every ``ownership_s`` look for free partitions."""
        changed = False
        for owned in list(self.owned.values()):
            if now - owned.leased_at >= self.config.lease_ms / 3000:
                changed |= self._extend(owned, now)
        if now >= self._next_look:
            changed |= self._acquire(now)
            # Owning nothing, this is an invocation waiting for the outgoing one's release: look often.
            self._next_look = now + (self.config.ownership_s if self.owned else self.config.takeover_s)
        if changed:
            self.assign()
            self.report.partitions_owned |= set(self.owned)

    def look_again(self) -> None:
        """Look for free partitions at the next step, not ``ownership_s`` from now."""
        self._next_look = float("-inf")

    def assign(self) -> None:
        """Consume exactly the owned partitions."""
        partitions = sorted(self.owned)
        self.hooks.on_assigned(partitions)
        self.source.assign(partitions)

    def _extend(self, owned: OwnedPartition, now: float) -> bool:
        try:
            self.engine.extend(RELAY_QUEUE, owned.job_id, owned.token, self.config.lease_ms)
        except (LeaseLost, JobNotFound):  # JobNotFound: the ownership job vanished with Redis's data
            self.lose(owned.number, "lease lost")
            return True
        except BackendUnavailable:
            if now - owned.leased_at >= self.config.lease_ms / 1000:
                self.lose(owned.number, "lease expired while Redis was unreachable")
                return True
            raise
        owned.leased_at = now
        return False

    def still_ours(self, owned: OwnedPartition) -> bool:
        """Ask the authority whether ``owned``'s lease is still this relay's, by extending it (as
        ``check`` does, early). Only a newer lease of the partition's job gives a newer owner token
        (lease.lua: from its queue's seq; ``owner_token`` folds in a generation a new session
        starts, and a session starts only with a new lease), and such a lease would have
        replaced ours: so when this succeeds, no relay holds a newer owner token for the
        partition. Any failure (the lease lost, Redis failing) is False: the caller drops the
        partition, as it did on every refusal before session 36."""
        try:
            self.engine.extend(RELAY_QUEUE, owned.job_id, owned.token, self.config.lease_ms)
        except SluiceError as exc:
            log.info("partition %s: its lease is not ours any more: %s", owned.number, exc)
            return False
        return True

    def _acquire(self, now: float) -> bool:
        self._register()
        limit = self.config.max_partitions
        groups = self.config.partition_groups
        if groups > 1 and (self._first_gain is None or now - self._first_gain < self.config.share_grace_s):
            # Several relays run at once, one per group: each takes its share first, and any
            # partition still free after the grace period (a group's invocation did not start).
            # The grace counts from this relay's first partition, not its start: a relay started
            # while the outgoing ones still hold every partition waits for their release first.
            limit = min(limit, -(-len(self._registered) // groups))
        room = limit - len(self.owned)
        if room <= 0 or not self._registered:
            return False
        gained: list[int] = []
        self.hooks.before_lease(self._register_all)
        # n = room, not our partition count: another topic's unowned jobs may sit in the same queue
        for job in self.engine.lease(RELAY_QUEUE, min(room, 100), self.config.lease_ms, self.relay_id):
            found = _partition_of(job)
            if isinstance(found, str):
                self._remove_bad(job, found)
                continue
            topic, p = found
            if topic != self.topic or p in self.owned:
                self.engine.release(RELAY_QUEUE, job.job_id, job.lease_token)  # another relay's topic
                continue
            self.owned[p] = OwnedPartition(number=p, job_id=job.job_id, token=job.lease_token, leased_at=now)
            gained.append(p)
        if gained:
            self._first_gain = now if self._first_gain is None else self._first_gain
            try:
                self.assign()  # rewinding needs the partitions assigned
                self.source.rewind_to_committed(gained)
                self.hooks.on_partitions_taken(gained)
            except SluiceError:
                self.give_back(gained)  # never push a partition whose start is unknown
                raise
            log.info("relay %s took partitions %s", self.relay_id, gained)
        return bool(gained)

    def _remove_bad(self, job: LeasedJob, why: str) -> None:
        """A job in the ownership queue that no relay enqueued: acked, so it is gone for good
        (dead, it would come back with the next redrive)."""
        self.report.bad_ownership_jobs += 1
        self._registered = set()  # if it sat on a partition's own id, that partition needs its job back
        self.events.emit(ev.OwnershipJobRemoved(job=job.job_id, why=why))
        try:
            self.engine.ack(RELAY_QUEUE, job.job_id, job.lease_token)
        except SluiceError as exc:  # its lease expires; the next relay to lease it removes it
            log.warning("could not remove job %r from %s: %s", job.job_id[:140], RELAY_QUEUE, exc)

    def give_back(self, partitions: Sequence[int]) -> None:
        for p in partitions:
            owned = self.owned.pop(p, None)
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
        if new:
            self.engine.enqueue_internal_many([partition_job(self.topic, p, self.config.lease_ms)
                                               for p in sorted(new)])
            # Killed relays spend attempts of their partition jobs; one must never stay dead.
            self.engine.redrive(RELAY_QUEUE)
        self._registered = partitions

    def _register_all(self) -> None:
        """Enqueue every partition's ownership job again (after Redis lost them)."""
        self.engine.enqueue_internal_many([partition_job(self.topic, p, self.config.lease_ms)
                                           for p in self.source.partitions()])

    def lose(self, partition: int, why: str) -> None:
        """Stop pushing ``partition`` at once (a newer owner, or a lost lease); the caller reassigns."""
        owned = self.owned.pop(partition, None)
        if owned is None:
            return
        self.report.partitions_lost += 1
        self.events.emit(ev.PartitionLost(partition=partition, why=why))
