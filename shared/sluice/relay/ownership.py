"""Partition ownership: which Kafka partitions this relay may push, through leases.

Each (topic, partition) is a job of the internal queue ``sluice-relay`` (our own
engine, dogfooded); a relay owns a partition while it holds that job's lease, and
the lease token is the owner token ``push.lua`` checks. ``sluice.recovery`` builds
the same job ids, so the naming lives here with the leasing.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sluice.errors import BackendUnavailable, LeaseLost, SluiceError
from sluice.models import JobSpec
from sluice.relay.state import _Owned, _RelayState

log = logging.getLogger("sluice.relay")  # one logger for the whole relay, as before the package split

RELAY_QUEUE = "sluice-relay"
OWNERSHIP_MAX_ATTEMPTS = 100  # a killed relay costs its partition job one attempt; redrive resets


def partition_job_id(topic: str, partition: int) -> str:
    return f"{topic}.{int(partition)}"


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
            payload = job.payload if isinstance(job.payload, dict) else {}
            if payload.get("topic") != self.topic or job.job_id in (o.job_id for o in self._owned.values()):
                self.engine.release(RELAY_QUEUE, job.job_id, job.token)  # another relay's topic
                continue
            p = int(payload["partition"])
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
            self.engine.enqueue(JobSpec(job_id=partition_job_id(self.topic, p), queue=RELAY_QUEUE,
                                        payload={"topic": self.topic, "partition": p},
                                        max_attempts=OWNERSHIP_MAX_ATTEMPTS, lease_ms=self.lease_ms))
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
