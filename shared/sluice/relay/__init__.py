"""The relay: Kafka records become Redis jobs, exactly once per hand-off.

One relay invocation owns some partitions of the job topic, each through a
lease on a job of the internal queue ``sluice-relay`` (our own engine,
dogfooded). The lease token is the owner token that ``push.lua`` checks, so a
relay that lost a partition to a newer one is refused at its first push and
stops pushing that partition at once. ``push.lua`` also records the highest
offset it enqueued per (queue, topic, partition) in the same atomic step and
skips records at or below it; Kafka offsets are committed only after the push.
A relay killed between the two therefore re-reads records that Redis already
holds, and the script skips them. docs/relay.md has the whole argument.

Pushing is shaped per queue: manual pause, a depth watermark with hysteresis
and a token bucket shared through Redis, all re-read from the queue's config in
Redis every ``refresh_s``. After a push, workers are dispatched for the backlog.

This package talks only to ports; the Kafka, Redis and DynamoDB adapters are
built by the caller (``sluice.wiring`` in Lambda, fixtures in tests).

Modules, in dependency order:
  ports      the protocols the relay talks through, the record type, ``decode``
  status     the background ``mark_queued`` writer
  state      the report, per-partition and per-queue state, the constructor
  ownership  partition leases (``RELAY_QUEUE``, ``partition_job``)
  control    pause, watermark, rate bucket, fetch flow control, dispatch, maintenance
  push       ingest, push rounds, Kafka commits, lag
  loop       ``Relay``: step, run_until, stop

Everything that was importable from the single ``sluice.relay`` module still is,
from here.
"""

from sluice.relay.loop import Relay
from sluice.relay.ownership import OWNERSHIP_MAX_ATTEMPTS, RELAY_QUEUE, partition_job, partition_job_id
from sluice.relay.ports import (
    PushOutcome,
    RecordSource,
    RelayEngine,
    SourceRecord,
    SystemClock,
    decode,
)
from sluice.relay.state import AfterPush, RelayReport
from sluice.relay.status import StatusWriter

__all__ = [
    "OWNERSHIP_MAX_ATTEMPTS",
    "RELAY_QUEUE",
    "AfterPush",
    "PushOutcome",
    "RecordSource",
    "Relay",
    "RelayEngine",
    "RelayReport",
    "SourceRecord",
    "StatusWriter",
    "SystemClock",
    "decode",
    "partition_job",
    "partition_job_id",
]
