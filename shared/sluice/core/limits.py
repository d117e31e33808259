"""The limits that keep callers from filling Redis, and the pure decisions over them.

Redis runs with ``noeviction``: when it is full every write fails, leases and acks
included, for every tenant. So what a caller can make Redis hold is bounded
(docs/deploy.md, "Limits" and "Sizing Redis"):

- a queue's delayed jobs (``max_delayed``) and dead jobs (``max_dead``): the gateway
  refuses with 429 from a cached view of the queue, and the relay holds back in Kafka
  what the gateway accepted over the cap (it never drops it);
- dead jobs are trimmed by count and age once the jobs table holds their ending;
- the registry of queue names (``max_queues``, or an operator's allow-list);
- Redis memory as a whole: above ``push_memory_percent`` the relay pushes nothing and
  the gateway answers 429, so leases, acks and fails keep the headroom they need.

No I/O here: the relay and the gateway's ``QueueViews`` feed these functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from sluice.core.errors import QueueNotAllowed
from sluice.core.models import MAX_DELAY_MS, QueueConfig, is_reserved_queue

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

    @classmethod
    def from_settings(cls, s: Settings) -> Limits:
        return cls(max_delayed=s.max_delayed_per_queue, max_dead=s.max_dead_per_queue,
                   dead_keep=s.dead_keep_per_queue, dead_retention_ms=s.dead_retention_hours * 3_600_000,
                   max_queues=s.max_queues, allow=s.allowed_queues(),
                   push_memory_percent=s.redis_push_memory_percent,
                   memory_guard_depth=s.memory_guard_depth)

    def caps(self, config: QueueConfig) -> tuple[int, int]:
        """The queue's effective (max_delayed, max_dead): its own config, else the deployment's."""
        return config.max_delayed or self.max_delayed, config.max_dead or self.max_dead

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
