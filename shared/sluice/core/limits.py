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
from typing import TYPE_CHECKING

from sluice.core.errors import QueueNotAllowed
from sluice.core.models import QueueConfig, is_reserved_queue

if TYPE_CHECKING:
    from sluice.core.config import Settings

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
