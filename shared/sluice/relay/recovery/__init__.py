"""Getting back the jobs Redis lost.

Redis is not the system of record: Kafka holds every accepted job and DynamoDB every
job's status. When Redis loses data (a restart without persistence, a failover that
dropped the last writes, a FLUSHALL), the jobs it held are replayed from Kafka:

- the relay records, per partition and in DynamoDB, a checkpoint: the Redis epoch it
  pushed under, and the offsets of the records whose jobs were not final yet;
- a relay taking a partition compares that epoch with Redis's epoch now; if they
  differ, it reads the partition again from the checkpoint's low-water mark, and the
  relay's usual filter (``store.relay_view``) drops the jobs already final.

A relay takes a ``Recovery`` as its hooks (``Relay(..., hooks=...)``); the relay Lambda's is built
from Settings by ``sluice.entry.relay.for_relay``. docs/redis-loss.md has the design and its argument.
"""

from __future__ import annotations

from sluice.relay.recovery.hook import Recovery
from sluice.relay.recovery.tracker import Checkpoint, PartitionTracker, StartPlan, owner_token, plan_start

__all__ = ["Checkpoint", "PartitionTracker", "Recovery", "StartPlan", "owner_token", "plan_start"]

