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
built by the caller (``sluice.entry.relay`` in Lambda, fixtures in tests), and so is the
bus every part emits on (``sluice.core.bus``).

Modules, in dependency order; each part is one object that ``Relay`` composes:
  ports        the protocols the relay talks through, the record type
  records      ``decode_job``: a record's value, decoded once (``decode``: the JobSpec model's view)
  config       ``RelayConfig``: every knob, built once from Settings
  state        plain data: the report, each owned partition, each queue
  hooks        ``RelayHooks``: the named points recovery plugs into
  status       the background ``mark_queued`` writer
  ownership    Ownership: partition leases (``RELAY_QUEUE``, ``partition_job``)
  intake       Intake: records in, decoded once; dead letters; fetch flow control
  queues       QueueStates: each queue's config and depth from Redis; memory guard
  planner      Planner: which records to push now (pure: watermarks, caps, holds, rate, fair shares)
  pusher       Pusher: push rounds on a pusher thread, their outcome applied
  committer    Committer: Kafka commits, the lag metric
  dispatch     Dispatch: starting workers
  maintenance  Maintenance: reap, settle, trim, dispatch for idle backlogs
  loop         ``Relay``: the composition, step, run_until, stop
  control      operating the relay: the runtime knobs (``sluice.core.knobs``)
"""

from sluice.relay.config import RelayConfig
from sluice.relay.hooks import RelayHooks
from sluice.relay.loop import Relay
from sluice.relay.ownership import OWNERSHIP_MAX_ATTEMPTS, RELAY_QUEUE, partition_job, partition_job_id
from sluice.relay.ports import (
    PushOutcome,
    RecordSource,
    RelayEngine,
    SourceRecord,
    SystemClock,
)
from sluice.relay.records import decode, decode_job
from sluice.relay.state import RelayReport
from sluice.relay.status import StatusWriter

__all__ = [
    "OWNERSHIP_MAX_ATTEMPTS",
    "RELAY_QUEUE",
    "PushOutcome",
    "RecordSource",
    "Relay",
    "RelayConfig",
    "RelayEngine",
    "RelayHooks",
    "RelayReport",
    "SourceRecord",
    "StatusWriter",
    "SystemClock",
    "decode",
    "decode_job",
    "partition_job",
    "partition_job_id",
]
