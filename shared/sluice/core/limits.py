"""The limits that keep callers from filling Redis, and the pure decisions over them.

Redis runs with ``noeviction``: when it is full every write fails, leases and acks
included, for every tenant. So what a caller can make Redis hold is bounded
(docs/deploy.md, "Limits" and "Sizing Redis"):

- a queue's delayed jobs (``max_delayed``) and dead jobs (``max_dead``): the gateway
  refuses with 429 from a cached view of the queue, and the relay holds back in Kafka
  what the gateway accepted over the cap (it never drops it);
- dead jobs are trimmed by count and age once the jobs table holds their ending;
- the registry of queue names (``max_queues``, or an operator's allow-list);
- a queue's bytes (``max_bytes``, else ``queue_budget``): push.lua counts each job's bytes
  (``job_bytes``) against the queue's budget in the same atomic step as the push, and takes
  no job beyond it; the relay holds the queue (``budget_held``) until its jobs leave;
- every queue's bytes together (``redis_budget``): the relay sums the queues' use and holds the
  largest ones at the total (``total_held``), which ``sluice check`` fits to the node type's
  memory (``budget_problems``);
- Redis memory as a whole: above ``push_memory_percent`` the relay pushes nothing and
  the gateway answers 429, so leases, acks and fails keep the headroom they need.

No I/O here: the relay and the gateway's ``QueueViews`` feed these functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from sluice.core.errors import QueueNotAllowed
from sluice.core.models import MAX_DELAY_MS, QueueConfig, QueueStats, is_reserved_queue

if TYPE_CHECKING:
    from sluice.core.config import Settings

# -- the life bound (docs/security.md, "Records") ------------------------------------------------
# One bound on how long a job may live between its 202 and its run: the longest delay, plus the
# longest a record may wait past its due time before its push (held by a pause, a cap or the memory
# guard, or replayed after a Redis loss), plus a margin for clocks and Scheduler's retries. The
# relay refuses a record past it (``seal.life_refusal``: the job ends ``dead`` with the reason), so
# a record replayed later is never run again. Everything else is sized from it: the job id keys
# must verify for at least this long, Kafka must keep a record this long, and a finished job's
# item must outlive it (the relay's finality read is what refuses a replay within it).
HOUR_MS: Final = 3_600_000
DAY_MS: Final = 24 * HOUR_MS
MAX_HOLD_MS: Final = 5 * DAY_MS  # past its due time, a record waits this long for its push at most
LIFE_MARGIN_MS: Final = 2 * DAY_MS
JOB_LIFE_MS: Final = MAX_DELAY_MS + MAX_HOLD_MS + LIFE_MARGIN_MS  # 14 days
CLOCK_MARGIN_MS: Final = 5 * 60_000  # a record sealed further in the future than this is refused
# The job id key window: rotated every KEY_ROTATION_DAYS, the current and PREVIOUS_KEYS older keys
# verify, so an id verifies for at least KEY_ROTATION_DAYS * PREVIOUS_KEYS days (template.yaml's
# JobIdSecretRotation; Secrets Manager keeps AWSCURRENT and AWSPREVIOUS).
KEY_ROTATION_DAYS: Final = 30
PREVIOUS_KEYS: Final = 1
KEY_WINDOW_MS: Final = KEY_ROTATION_DAYS * PREVIOUS_KEYS * DAY_MS


def life_bound_problems(kafka_retention_hours: int, retention_days: int,
                        rotation_days: int = KEY_ROTATION_DAYS, previous_keys: int = PREVIOUS_KEYS,
                        ) -> list[str]:
    """What in a deployment's retentions and key window does not honour ``JOB_LIFE_MS`` (empty: all
    do). ``sluice check`` refuses a deployment with any; template.yaml's Rules say the same."""
    life_h, life_d = JOB_LIFE_MS // HOUR_MS, JOB_LIFE_MS // DAY_MS
    window_h = rotation_days * previous_keys * 24
    problems = []
    if window_h < life_h:
        problems.append(f"the job id key window ({rotation_days} d rotation x {previous_keys} previous "
                        f"key(s) = {window_h} h) is shorter than the {life_h} h a job may live: records "
                        "would stop verifying before they run")
    if kafka_retention_hours < life_h:
        problems.append(f"KafkaRetentionHours {kafka_retention_hours} is below the {life_h} h a job may "
                        "live: a held record would leave Kafka before the relay pushed or refused it")
    if kafka_retention_hours > window_h:
        problems.append(f"KafkaRetentionHours {kafka_retention_hours} is beyond the job id key window "
                        f"({window_h} h): records replayed from Kafka would no longer verify")
    if retention_days < life_d:
        problems.append(f"RetentionDays {retention_days} is below the {life_d} days a job may live: a "
                        "replayed record of a job whose item expired would run again")
    return problems

@dataclass(frozen=True, slots=True)
class Limits:
    max_delayed: int = 0  # per queue, unless its config says otherwise; 0 = no cap
    max_dead: int = 0
    dead_keep: int = 0  # trim: the newest this many dead jobs of a queue stay; 0 = no count trim
    dead_retention_ms: int = 0  # trim: dead jobs older than this go; 0 = no age trim
    max_queues: int = 0  # registered queue names; 0 = no limit
    allow: frozenset[str] | None = None  # None: any valid name
    push_memory_percent: int = 0  # 0 = no memory guard
    memory_guard_depth: int = 100  # above the guard, queues with this many waiting jobs are held
    queue_budget: int = 0  # bytes per queue, unless its config's max_bytes says otherwise; 0 = none
    redis_budget: int = 0  # bytes over every queue together; 0 = no total

    @classmethod
    def from_settings(cls, s: Settings) -> Limits:
        return cls(max_delayed=s.max_delayed_per_queue, max_dead=s.max_dead_per_queue,
                   dead_keep=s.dead_keep_per_queue, dead_retention_ms=s.dead_retention_hours * 3_600_000,
                   max_queues=s.max_queues, allow=s.allowed_queues(),
                   push_memory_percent=s.redis_push_memory_percent,
                   memory_guard_depth=s.memory_guard_depth, queue_budget=s.queue_budget_bytes,
                   redis_budget=s.redis_budget_bytes)

    def caps(self, config: QueueConfig) -> tuple[int, int]:
        """The queue's effective (max_delayed, max_dead): its own config, else the deployment's."""
        return config.max_delayed or self.max_delayed, config.max_dead or self.max_dead

    def budget(self, config: QueueConfig) -> int:
        """The queue's effective byte budget (0 = none): its own ``max_bytes``, else the deployment's."""
        return config.max_bytes or self.queue_budget

    def with_budget(self, stats: QueueStats) -> QueueStats:
        """``stats`` with its effective ``budget_bytes`` (Redis knows only the queue's own max_bytes)."""
        return stats.model_copy(update={"budget_bytes": self.budget(stats.config)})

    def check_name(self, queue: str) -> None:
        """QueueNotAllowed unless the allow-list (if any) names ``queue``."""
        # Sluice's own (reserved, sluice-) queues are never refused: callers cannot use them anyway.
        if self.allow is not None and queue not in self.allow and not is_reserved_queue(queue):
            raise QueueNotAllowed(f"queue {queue!r} is not on the operator's allow-list "
                                  "(SLUICE_QUEUE_ALLOW_LIST)", queue=queue)

    def registry_limit(self, queue: str) -> int:
        """The registry size beyond which ``queue`` may not be added (0 = none)."""
        return 0 if is_reserved_queue(queue) else self.max_queues

    def memory_hold(self, percent: float | None, waiting: int) -> bool:
        """Whether a queue with ``waiting`` (ready + delayed) jobs may not grow at this memory use.

        Above the guard, a queue whose backlog is at least ``memory_guard_depth`` is held (the
        queues that fill Redis are the ones nobody drains; one whose workers keep up keeps
        flowing); halfway from the guard to 100% every queue is held, so leases, acks and fails
        keep their headroom whatever happens.
        """
        guard = self.push_memory_percent
        if not guard or percent is None or percent < guard:
            return False
        return percent >= guard + (100 - guard) / 2 or waiting >= self.memory_guard_depth


def refusal(limits: Limits, config: QueueConfig, waiting: tuple[int, int], dead: int,
            memory_percent: float | None, new_delayed: int) -> str | None:
    """Why the gateway should refuse jobs for a queue in this state (None: accept).

    ``waiting`` is (ready, delayed); ``new_delayed`` of the jobs asked for are delayed. A queue
    at its dead cap takes no job at all (a queue whose jobs all die, e.g. one without a handler,
    would fill it); one at its delayed cap takes ready jobs but no delayed ones. Above the memory
    guard a deep queue takes nothing (``Limits.memory_hold``).
    """
    max_delayed, max_dead = limits.caps(config)
    ready, delayed = waiting
    if limits.memory_hold(memory_percent, ready + delayed):
        return f"Redis is {memory_percent or 0:.0f}% full and this queue holds {ready + delayed} waiting jobs"
    if max_dead and dead >= max_dead:
        return f"the queue holds {dead} dead jobs, its cap is {max_dead}: redrive or purge them"
    if new_delayed and max_delayed and delayed + new_delayed > max_delayed:
        return (f"the queue holds {delayed} delayed jobs; {new_delayed} more would pass its cap of "
                f"{max_delayed}")
    return None


def delayed_room(limits: Limits, config: QueueConfig, delayed: int) -> int | None:
    """How many more delayed jobs the relay may push into a queue now (None: no cap)."""
    max_delayed, _ = limits.caps(config)
    return max(0, max_delayed - delayed) if max_delayed else None


def dead_full(limits: Limits, config: QueueConfig, dead: int) -> bool:
    _, max_dead = limits.caps(config)
    return bool(max_dead) and dead >= max_dead


def take_within(delayed: list[bool], room: int | None) -> int:
    """How many of the next records (``delayed[i]``: is record i delayed) fit ``room`` delayed
    slots. Records keep their Kafka order, so the first delayed record over the room stops the
    take: the ready records before it go, it and everything after wait."""
    if room is None:
        return len(delayed)
    for i, is_delayed in enumerate(delayed):
        if is_delayed:
            if room == 0:
                return i
            room -= 1
    return len(delayed)


# -- byte budgets (issue 28, item 4; docs/deploy.md "Byte budgets") -------------------------------
# What one job counts against its queue's budget: the bytes push.lua stores (payload, meta, id in
# the job key and in a zset) plus a fixed estimate of Redis's own overhead per job: the hash's
# dict entry and robj, its listpack header and fields (p, m, sz and room for a, err, g), the zset
# skiplist node and dict entry, each key's SDS header and allocator rounding. Measured with
# MEMORY USAGE on Redis 7: a job with a 10-byte payload takes about 250 bytes in all. _lib.lua's
# JOB_OVERHEAD must equal it (tests/unit/test_engine_lua.py checks).
JOB_OVERHEAD_BYTES: Final = 200
BUDGET_RESUME: Final = 0.9  # a queue held by its budget takes jobs again below this share of it


def job_bytes(job_id: str, payload: str, meta: str, prefix_len: int, traceparent: str = "") -> int:
    """What push.lua counts for one job (its ``sz`` field); the lengths are bytes, as Lua's ``#``."""
    return (len(payload.encode()) + len(meta) + 2 * len(job_id) + prefix_len + JOB_OVERHEAD_BYTES
            + len(traceparent))


def budget_held(used: int, budget: int, held: bool) -> bool:
    """Whether a queue that counts ``used`` bytes against ``budget`` (0: none) takes no more jobs.

    At the budget it is held; held, it stays so until its use falls below ``BUDGET_RESUME`` of the
    budget, so a queue at its budget does not flap at every job acked (push.lua still takes only
    what fits in between: the hold saves the relay the pushes that would take nothing). A queue
    whose single next job is more than the other tenth of its budget is held by the pusher (push.lua
    left it) and released here below the resume share: one push that takes nothing per refresh,
    until its jobs leave (budgets are meant to hold many jobs)."""
    if budget <= 0:
        return False
    if held:
        return used >= budget * BUDGET_RESUME
    return used >= budget


def total_held(used: int, total_used: int, queues: int, redis_budget: int) -> bool:
    """Whether a queue using ``used`` bytes is held because every queue's use together
    (``total_used`` over the ``queues`` queues that use any) reached ``redis_budget`` (0: no total).

    At the total, a queue holding at least an equal share of it is held: the ones that filled Redis
    wait, one with little in Redis keeps flowing (as the memory guard holds deep queues only).
    Queues live in different slots on a cluster, so no script can see the sum: the relay does."""
    if redis_budget <= 0 or total_used < redis_budget:
        return False
    return used * max(1, queues) >= redis_budget


# Memory of each ElastiCache node type (AWS's "Supported node types" table, in GiB), the one place
# ``sluice check`` reads it. What Sluice may budget on a node: that memory less ElastiCache's
# reserved memory (``RESERVED_MEMORY_PERCENT``, its default for the parameter group) and below the
# memory guard (``RedisPushMemoryPercent``), above which the relay holds queues anyway.
GIB: Final = 1 << 30
NODE_MEMORY_GIB: Final[dict[str, float]] = {
    "cache.t3.micro": 0.5, "cache.t3.small": 1.37, "cache.t3.medium": 3.09,
    "cache.t4g.micro": 0.5, "cache.t4g.small": 1.37, "cache.t4g.medium": 3.09,
    "cache.m5.large": 6.38, "cache.m5.xlarge": 12.93, "cache.m5.2xlarge": 26.04,
    "cache.m6g.large": 6.38, "cache.m6g.xlarge": 12.93, "cache.m6g.2xlarge": 26.04,
    "cache.m6g.4xlarge": 52.26, "cache.m7g.large": 6.38, "cache.m7g.xlarge": 12.93,
    "cache.m7g.2xlarge": 26.04, "cache.m7g.4xlarge": 52.26,
    "cache.r5.large": 13.07, "cache.r5.xlarge": 26.32, "cache.r5.2xlarge": 52.82,
    "cache.r6g.large": 13.07, "cache.r6g.xlarge": 26.32, "cache.r6g.2xlarge": 52.82,
    "cache.r6g.4xlarge": 105.81, "cache.r7g.large": 13.07, "cache.r7g.xlarge": 26.32,
    "cache.r7g.2xlarge": 52.82, "cache.r7g.4xlarge": 105.81,
}
RESERVED_MEMORY_PERCENT: Final = 25


def node_budget_bytes(node_type: str, push_memory_percent: int, shards: int = 1) -> int | None:
    """The most bytes the budgets may total on ``shards`` primaries of ``node_type`` (None: a node
    type the table does not know)."""
    gib = NODE_MEMORY_GIB.get(node_type)
    if gib is None:
        return None
    guard = push_memory_percent or 100
    return int(gib * GIB * (100 - RESERVED_MEMORY_PERCENT) / 100 * guard / 100) * max(1, shards)


def budget_problems(node_type: str, redis_budget: int, queue_budget: int, queues: int,
                    push_memory_percent: int, shards: int = 1) -> tuple[list[str], list[str]]:
    """(errors, warnings) of a deployment's byte budgets against its node type (pure; ``sluice
    check`` refuses a deploy with errors). ``queues``: how many queues it serves (0: unknown)."""
    errors: list[str] = []
    warnings: list[str] = []
    room = node_budget_bytes(node_type, push_memory_percent, shards)
    if room is None:
        warnings.append(f"CacheNodeType {node_type} is not in sluice.core.limits.NODE_MEMORY_GIB: its "
                        "byte budgets are not checked against its memory")
    elif redis_budget == 0:
        warnings.append(f"RedisBudgetBytes is 0 (no total): nothing keeps the queues' budgets within "
                        f"the {room} bytes {node_type} x {shards} can hold")
    elif redis_budget > room:
        errors.append(f"RedisBudgetBytes {redis_budget} is more than {node_type} x {shards} can hold: "
                      f"{room} bytes ({RESERVED_MEMORY_PERCENT}% reserved, below the "
                      f"{push_memory_percent or 100}% memory guard); lower it or pick a larger node")
    if redis_budget and queue_budget and queues and queue_budget * queues > redis_budget:
        warnings.append(f"{queues} queues x QueueBudgetBytes {queue_budget} = {queue_budget * queues} "
                        f"bytes is more than RedisBudgetBytes {redis_budget}: at the total the relay "
                        "holds the queues that use the most (docs/deploy.md, Byte budgets)")
    if not redis_budget and not queue_budget:
        warnings.append("QueueBudgetBytes and RedisBudgetBytes are 0: one queue may fill Redis")
    return errors, warnings
