"""The only place Redis key names are built.

Every key of a queue carries the ``{queue}`` hash tag, so all of one queue's keys
live in one cluster slot and a Lua script may touch any of them atomically.
The registry of queue names is the one global key; it is advisory and written
outside scripts, because a script may not span slots.

Layout of queue ``q`` (docs/engine.md has the state machine):

    sluice:{q}:job:<id>     hash   p payload JSON; m "priority,max_attempts,lease_ms,enqueued_at_ms";
                                   a attempts used; c cancel requested; err last error; g redrive generation;
                                   sz the bytes it counts against the queue's budget; grp its fair group;
                                   v its format (core/formats.py REDIS_JOB; none: format 1, no sz or grp)
    sluice:{q}:ready        zset   score = (9 - priority) * 2**44 + seq: higher priority first, FIFO within
                                   (a job whose lease lapsed: that score - 2**43, the front of its band)
    sluice:{q}:delayed      zset   score = run-at ms (delayed jobs and retries waiting out their backoff)
    sluice:{q}:leased       zset   score = lease deadline ms
    sluice:{q}:tokens       hash   job id -> token of its current lease (present iff leased)
    sluice:{q}:dead         zset   score = died-at ms
    sluice:{q}:settle       zset   "dead:<g>:<id>" / "cancelled:<g>:<id>" (g: redrive generation), score =
                                   when: endings (expiry into a final state, a cancel) the jobs table has
                                   not been told yet (the relay settles them, fenced on g)
    sluice:{q}:seq          string FIFO order and lease tokens (one step per lease call), never below TIME
                                   in microseconds, so lease tokens keep increasing across a Redis loss
                                   and a failover to a lagging replica (_lib.lua take_seq)
    sluice:{q}:config       hash   max_in_flight, rate_per_s, burst, paused, high_watermark, low_watermark;
                                   policy_attempts (lease.lua's: the handler policy's, for lapsed leases)
    sluice:{q}:bucket       hash   token-bucket state shared by every relay
    sluice:{q}:relayed:<topic>:<partition>  hash  offset, owner (exactly-once hand-off)
    sluice:{q}:idle         zset   worker id -> until when (ms) it waits for work (idle.lua)
    sluice:{q}:wake         list   a token per push when no worker waits (push.lua), for BLPOP
    sluice:{q}:wake:<worker> list  a waiting worker's own token (push.lua wakes the last to wait first)
    sluice:{q}:finished     hash   succeeded, dead, cancelled: how many jobs left the queue for good that
                                   way since the key was made (counters only go up; stats.lua reads them)
    sluice:{q}:used         string the bytes its job hashes count against its budget (the sum of their
                                   sz): push.lua reserves, every script that deletes a job hash gives back
    sluice:{q}:g:<group>    zset   a fair group's ready jobs (scores as ready; ungrouped jobs stay in ready)
    sluice:{q}:rota         list   the groups that may have a job to lease, in turn order, each once: the
                                   rotation lease.lua serves round-robin ('' is the default group, while
                                   any group takes turns)
    sluice:{q}:turns        zset   the rotation as the layout before kept it (group -> turn number): only
                                   read, by lease.lua, which moves it into rota (an upgrade)
    sluice:{q}:groups       hash   <group> -> its leased jobs; >group -> 1 while the group is in rota;
                                   #ready -> jobs in every group's ready zset (_lib.lua, "Fair groups")
    sluice:{q}:recent       zset   job id -> when it finished (ms): the last jobs acked, capped (ack.lua
                                   keeps listing.RECENT_KEPT), for the operator's listing (issue 32)
    sluice:{q}:waits        hash   wait bucket -> jobs first leased since the last depth sample (lease.lua),
                                   taken and emptied by sample.lua (core/depth.py)
    sluice:{q}:depth        list   "<ms>,<ready>,<delayed>,<leased>,<dead>[;<bucket>:<n>,...]" per depth
                                   sample of the last hour (sample.lua, the relay), capped, expiring
    sluice:{q}:tl:<id>      list   the job's timeline (timeline.lua, issue 32): its workers' leases, grants,
                                   renewals, writes and acks, and the relay's reap of a lapsed lease
                                   (reap.lua), capped, expiring after its last append

Per caller (issue 27, item 5): sluice:{caller:<digest>}:bucket, a hash (r, b, t) of the caller's
request and byte token buckets, shared by every gateway (throttle.lua); ``<digest>`` is the first
32 hex digits of the SHA-256 of the caller's identity (``sluice.core.throttle.identity``), so an
ARN's characters never reach a key and each caller's bucket has a slot of its own.

Global: sluice:queues (the registry's Redis cache: every queue name; the durable registry is
DynamoDB's queues table, issue 28), with sluice:queues:{sluice:queues}:reserved (the reserved names
in it, not counted toward the limit) and sluice:queues:{sluice:queues}:loaded (set once the cache
was loaded from DynamoDB since Redis lost it), and sluice:epoch (the id of
this Redis dataset; its disappearance tells the relay that Redis lost data). On a cluster,
sluice:epoch:{<tag>} per primary instead, ``tag`` hashing into that primary's slots.

Who touches what (each function's Redis user may touch only that: ``acl``, docs/security.md
"Redis users"). A worker, a team's or the default one: only its queues' keys (lease, extend, ack,
fail, release, idle; BLPOP of ``wake``), never a global key. The gateway: public queues' keys
(stats, cancel, GET's holds) and the registry (admission; its reservation before a 202). The operator: public
queues' keys (stats, dead letters, redrive, purge, config, the listing) and ``sluice:queues`` (list; register
on a config change). The relay: every queue's keys, its reserved ``sluice-relay`` queue's too,
``sluice:queues`` (register, list) and the epochs. The countdown and events functions: nothing.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from sluice.core.models import validate_group, validate_job_id, validate_queue_name

PREFIX = "sluice"
QUEUES_KEY = f"{PREFIX}:queues"
# The registry set's companions (register.lua): the reserved names it holds (not counted toward the
# limit) and the mark that it was loaded from the durable registry since Redis last lost it. Their
# hash tag is the registry's own name, so all three share its cluster slot (one script may touch
# them); they start ``sluice:queues:``, so no queue pattern of ``acl`` (``sluice:{...}``) covers them.
REGISTRY_RESERVED_KEY = f"{QUEUES_KEY}:{{{QUEUES_KEY}}}:reserved"
REGISTRY_LOADED_KEY = f"{QUEUES_KEY}:{{{QUEUES_KEY}}}:loaded"
REGISTRY_KEYS = (QUEUES_KEY, REGISTRY_RESERVED_KEY, REGISTRY_LOADED_KEY)  # register.lua's KEYS
EPOCH_KEY = f"{PREFIX}:epoch"  # random id of this Redis dataset; gone after a data loss (relay.recovery)


CALLER_BUCKETS = f"{PREFIX}:{{caller:*}}:bucket"  # every caller's bucket: the gateway's Redis user's pattern


def caller_bucket(identity: str) -> str:
    """The caller's token buckets (throttle.lua): ``sluice:{caller:<digest>}:bucket``."""
    if not isinstance(identity, str) or not identity:
        raise ValueError("a caller identity is a non-empty string")
    digest = hashlib.sha256(identity.encode("utf-8")).hexdigest()[:32]
    return f"{PREFIX}:{{caller:{digest}}}:bucket"


def shard_epoch_key(tag: str) -> str:
    """On a cluster, one primary's epoch key: ``tag`` is a hash tag whose slot is that primary's
    (``recovery.shards.tag_in``)."""
    return f"{EPOCH_KEY}:{{{tag}}}"


@dataclass(frozen=True, slots=True)
class QueueKeys:
    queue: str

    def __post_init__(self) -> None:
        validate_queue_name(self.queue)

    @property
    def base(self) -> str:
        return f"{PREFIX}:{{{self.queue}}}"

    def job(self, job_id: str) -> str:
        return f"{self.base}:job:{validate_job_id(job_id)}"

    @property
    def job_prefix(self) -> str:
        """Scripts build job keys from ids they pop from a zset: same slot, same prefix."""
        return f"{self.base}:job:"

    @property
    def ready(self) -> str:
        return f"{self.base}:ready"

    @property
    def delayed(self) -> str:
        return f"{self.base}:delayed"

    @property
    def leased(self) -> str:
        return f"{self.base}:leased"

    @property
    def dead(self) -> str:
        return f"{self.base}:dead"

    @property
    def settle(self) -> str:
        """zset of settle entries "<state>:<g>:<id>" (g: the job's redrive generation): an ending
        (dead, or dropped after a cancel request) is recorded here in the same script, because no
        worker is left to tell DynamoDB."""
        return f"{self.base}:settle"

    @property
    def tokens(self) -> str:
        """hash job id -> Redis token of its current lease; a field exists iff the job is leased
        (one HMGET checks a whole batch of acks)."""
        return f"{self.base}:tokens"

    @property
    def seq(self) -> str:
        return f"{self.base}:seq"

    @property
    def config(self) -> str:
        return f"{self.base}:config"

    @property
    def bucket(self) -> str:
        return f"{self.base}:bucket"

    @property
    def idle(self) -> str:
        """zset worker id -> until when (ms) it waits for work: the relay counts them (stats.lua)."""
        return f"{self.base}:idle"

    @property
    def wake(self) -> str:
        """list of tokens, one per push that found no worker waiting (push.lua, capped): a worker
        that begins waiting just after such a push BLPOPs it."""
        return f"{self.base}:wake"

    def wake_of(self, worker_id: str) -> str:
        """list: ``worker_id``'s own token while it waits (push.lua builds it as ``wake`` + ':' + id)."""
        return f"{self.wake}:{worker_id}"

    @property
    def finished(self) -> str:
        """hash succeeded / dead / cancelled -> jobs that ended that way (cumulative; only the scripts
        that end a job add to it: ack, fail, cancel, reclaim). Readers take differences between two
        reads, so nobody resets it, and a lost Redis (all zero again) shows as a drop."""
        return f"{self.base}:finished"

    @property
    def used(self) -> str:
        """string: the bytes the queue's jobs count against its budget (the sum of their ``sz``); lost
        with the jobs in a Redis loss, and rebuilt as the replay pushes them again."""
        return f"{self.base}:used"

    @property
    def group_prefix(self) -> str:
        """A fair group's ready zset is this prefix and the group (``group``); scripts build it from
        the group a job hash names: same slot."""
        return f"{self.base}:g:"

    def group(self, name: str) -> str:
        return f"{self.group_prefix}{validate_group(name)}"

    @property
    def turns(self) -> str:
        """list: the groups lease.lua serves in turn, each once."""
        return f"{self.base}:rota"

    @property
    def turns_zset(self) -> str:
        """The rotation in the layout before ``turns`` (a zset group -> turn number, and ``#turn`` in
        ``groups``): lease.lua moves what it finds there into ``turns``."""
        return f"{self.base}:turns"

    @property
    def groups(self) -> str:
        """hash: a group's leased jobs, >group while it is in turns, and #ready (lua/_lib.lua,
        "Fair groups")."""
        return f"{self.base}:groups"

    @property
    def group_keys(self) -> list[str]:
        """The three KEYS every script that moves a grouped job takes last: prefix, turns, groups."""
        return [self.group_prefix, self.turns, self.groups]

    @property
    def timeline_prefix(self) -> str:
        """reap.lua builds a job's timeline key from the ids it reclaims: ``timeline`` without the id."""
        return f"{self.base}:tl:"

    def timeline(self, job_id: str) -> str:
        """list: the job's timeline (timeline.lua), capped and expiring; workers append, and reap.lua
        a lapsed lease's step while timelines are on; only the operator reads."""
        return f"{self.base}:tl:{validate_job_id(job_id)}"

    def relayed(self, topic: str, partition: int) -> str:
        return f"{self.base}:relayed:{topic}:{int(partition)}"

    @property
    def waits(self) -> str:
        """hash bucket -> count: the enqueue-to-start waits of the jobs first leased since the relay's
        last depth sample (lease.lua counts, sample.lua takes; ``sluice.core.depth``)."""
        return f"{self.base}:waits"

    @property
    def depth(self) -> str:
        """list: the queue's depth samples of the last hour with their waits (sample.lua), capped and
        expiring; the operator's ``GET .../depth`` reads it."""
        return f"{self.base}:depth"

    @property
    def recent(self) -> str:
        """zset job id -> finished-at ms: the queue's last acked jobs, capped (ack.lua), which the
        operator's listing shows as ``finished`` (their hashes are gone)."""
        return f"{self.base}:recent"
