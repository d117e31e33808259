"""Getting back the jobs Redis lost.

Redis is not the system of record: Kafka holds every accepted job and DynamoDB every
job's status. When Redis loses data (a restart without persistence, a failover that
dropped the last writes, a FLUSHALL), the jobs it held are replayed from Kafka:

- the relay records, per partition and in DynamoDB, a checkpoint: the Redis epoch it
  pushed under, and the offsets of the records whose jobs were not final yet;
- a relay taking a partition compares that epoch with Redis's epoch now; if they
  differ, it reads the partition again from the checkpoint's low-water mark, and the
  relay's usual filter (``store.relay_view``) drops the jobs already final.

``for_relay`` builds the ``Recovery`` a relay takes as its hooks (``Relay(..., hooks=...)``).
docs/redis-loss.md has the design and its argument.
"""

from __future__ import annotations

from typing import Any

from sluice.relay.recovery.hook import Recovery
from sluice.relay.recovery.tracker import Checkpoint, PartitionTracker, StartPlan, owner_token, plan_start

__all__ = ["Checkpoint", "PartitionTracker", "Recovery", "StartPlan", "for_relay", "owner_token",
           "plan_start"]


def for_relay(settings: Any, engine: Any, store: Any, source: Any, *, events: Any = None,
              **knobs: Any) -> Recovery:
    """The relay's recovery hooks, from Settings.

    ``engine`` is a ``RedisRelayEngine``, ``source`` a ``KafkaSource``, ``store`` the job store
    (its ``relay_view``); ``events``: the relay's bus, for its incidents. ``knobs``:
    ``interval_s``, ``scan_limit``.
    """
    from sluice.entry import root as wiring
    from sluice.relay.recovery.adapters import KafkaOffsets, RedisEpochs
    from sluice.relay.recovery.checkpoints import DynamoCheckpoints

    # The store's own DynamoDB client: a second client costs a cold start its own set-up.
    client = getattr(store, "client", None) or wiring.dynamodb(settings)
    return Recovery(source.topic, RedisEpochs(engine.client), DynamoCheckpoints(client, settings.jobs_table),
                    KafkaOffsets(source), store, events=events, **knobs)
