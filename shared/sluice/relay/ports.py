"""What the relay talks to, and what a Kafka record means to it.

The relay core sees only these protocols; the Kafka, Redis and DynamoDB adapters
are built by the caller (``sluice.entry.root`` in Lambda, fixtures in tests), and the relay
calls them directly: behaviour around them plugs in through ``sluice.relay.hooks``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from sluice.core.clock import wall_ms
from sluice.core.models import DecodedJob, JobSpec, LeasedJob, QueueConfig, QueueStats, SettleEntry
from sluice.core.ports import ParkedRecord, SourceRecord

__all__ = ["Clock", "ParkedCounter", "ParkedRecord", "ParkingLot", "PushItem", "PushOutcome", "RecordSource",
           "RelayEngine", "SourceRecord", "SystemClock"]


PushItem = tuple[str, int, int, Sequence[tuple[int, DecodedJob]]]  # queue, partition, owner token, records


class PushOutcome(Protocol):
    @property
    def pushed(self) -> int: ...
    @property
    def skipped(self) -> int: ...
    @property
    def left(self) -> int:
        """The item's last records not taken (over the queue's byte budget): they stay buffered."""
        ...
    @property
    def paused(self) -> bool:
        """None taken because the queue's config says paused (``left`` is all of them)."""
        ...


class RelayEngine(Protocol):
    """The part of the Redis engine the relay uses: ``ports.JobQueue`` plus push, take_rate and
    the internal enqueue of its partition ownership jobs."""

    def enqueue_internal(self, spec: JobSpec) -> bool:
        """Enqueue into one of Sluice's own queues (the partition ownership jobs)."""
        ...

    def enqueue_internal_many(self, specs: Sequence[JobSpec]) -> list[bool]:
        """``enqueue_internal`` of several jobs at once (every partition's ownership job)."""
        ...

    def lease(self, queue: str, n: int, lease_ms: int | None, worker_id: str) -> list[LeasedJob]: ...
    def extend(self, queue: str, job_id: str, lease_token: int, lease_ms: int) -> Any: ...
    def release(self, queue: str, job_id: str, lease_token: int) -> None: ...
    def ack(self, queue: str, job_id: str, lease_token: int) -> None: ...
    def redrive(self, queue: str, job_id: str | None = None, generation: int = 0) -> int: ...
    def reap(self, queue: str, limit: int) -> int: ...
    def stats(self, queue: str) -> QueueStats: ...
    def queues(self) -> list[str]: ...
    def push_many(self, topic: str, items: Sequence[PushItem],
                  gens: Mapping[str, int] | None = None) -> Sequence[PushOutcome | Exception]:
        """``push.lua`` for each (queue, partition, owner token, records) item, in one round trip.
        Per item its outcome, or the error that refused it (``StaleToken``: a newer relay owns
        the partition). Raises ``BackendUnavailable`` when the round trip failed. ``gens``: the
        jobs table's redrive generation of the jobs that have one (``JobStore.relay_view``)."""
        ...

    def take_rate(self, queue: str, wanted: int) -> int: ...
    def relayed_offset(self, queue: str, topic: str, partition: int, owner_token: int) -> int:
        """The highest offset of (topic, partition) pushed into ``queue`` (-1: none): push.lua skips
        every record at or below it. ``owner_token`` is the token the relay pushes with."""
        ...

    def unsettled(self, queue: str, limit: int = 100) -> list[SettleEntry]: ...
    def settled(self, queue: str, jobs: Sequence[SettleEntry], residue: Sequence[SettleEntry] = ()) -> int:
        """Forget ``jobs``' entries (unless they changed since they were read); the dead jobs of
        ``residue`` (entries among ``jobs`` whose item is succeeded or cancelled) leave the dead set."""
        ...
    def set_config(self, queue: str, **changes: Any) -> QueueConfig:
        """Writes the deployment's default rate for a queue nobody configured."""
        ...

    # The limits' questions (sluice.core.limits)
    def register(self, queue: str, *, admitted: bool = False) -> bool:
        """Admit ``queue`` to the registry; ``QueueNotAllowed`` if the allow-list or the cap refuses it.
        ``admitted``: a record a gateway accepted (minted and sealed): the cap does not apply. True if new."""
        ...

    def trim_dead(self, queue: str, keep: int, max_age_ms: int, limit: int = 1000) -> tuple[int, int]: ...
    def memory_percent(self) -> float | None: ...


class RecordSource(Protocol):
    """The job topic (``sluice.backends.kafka.source.KafkaSource``), consumed by manual assignment.

    May also have ``position(partition) -> int | None``: the offset the partition's next poll
    starts at (``KafkaSource``, ``FakeSource``). Parking needs it to read a lane back in order
    after a take-over (``OwnedPartition.read_bound``); without it a lane is read back unbounded."""

    @property
    def topic(self) -> str: ...
    def partitions(self) -> list[int]:
        """The topic's partition numbers; empty if the topic does not exist yet."""
        ...

    def assign(self, partitions: Sequence[int]) -> None:
        """Consume exactly these partitions from now on (replaces the previous set)."""
        ...

    def rewind_to_committed(self, partitions: Sequence[int]) -> None:
        """Next poll of each partition starts at its committed offset (or the log start)."""
        ...

    def poll(self, timeout_ms: int, max_records: int) -> list[SourceRecord]: ...
    def pause(self, partitions: Sequence[int]) -> None: ...
    def resume(self, partitions: Sequence[int]) -> None: ...
    def commit(self, offsets: Mapping[int, int]) -> None:
        """Commit the next offset to read for each partition (Kafka's convention)."""
        ...

    def dead_letter(self, record: SourceRecord, reason: str) -> None: ...
    def flush_dead_letters(self) -> None:
        """Returns once every dead letter sent so far is acknowledged."""
        ...

    def highwater(self, partition: int) -> int | None:
        """The partition's end offset as last seen (None: not known yet); for ``RelayLag``."""
        ...


class ParkedCounter(Protocol):
    """Each queue's parked counter in the durable registry (the queues table's ``state`` map): what
    operators read (``sluice queues``, the operator API) without counting the lot. Raises a
    ``SluiceError`` when the registry cannot be reached."""

    def add_parked(self, counts: Mapping[str, int], at_ms: Mapping[str, int]) -> dict[str, int]:
        """Add ``counts[queue]`` (negative: released) to each counter; ``at_ms``: when they last
        parked. Returns the counters' new values (a queue the registry does not hold: absent)."""
        ...


class ParkingLot(Protocol):
    """Where a held queue's records wait outside the shared partitions (docs/relay.md, "Holds and
    parking"): per (queue, partition), in offset order, plus a marker per partition naming the
    queues that have records parked there. Only the partition's owner writes its lanes. Every
    method raises a ``SluiceError`` when the lot cannot be reached (nothing half done matters: a
    park is an idempotent put, a release an idempotent delete)."""

    def park(self, queue: str, partition: int, records: Sequence[ParkedRecord], *, mark: bool = True,
             delay: bool = False) -> None:
        """Write the partition's marker for ``queue`` (unless ``mark`` is False: written already),
        then each record (same key, same item). ``delay``: into the queue's delay lane of the
        partition, keyed by run time, whose marker is ``DELAY_MARKER`` + the queue."""
        ...

    def due(self, queue: str, partition: int, after: tuple[int, int] | None,
            limit: int) -> list[ParkedRecord]:
        """The first ``limit`` records of (``queue``, ``partition``)'s delay lane after ``after``
        (a ``ParkedRecord.due_key``; None: from its start), in (run time, offset) order."""
        ...

    def page(self, queue: str, partition: int, after: int, limit: int, *,
             whole: bool = False) -> list[ParkedRecord]:
        """The first ``limit`` records of (``queue``, ``partition``) above offset ``after``, in order,
        each once. ``whole``: with the rest of the records stored with the last of them, which the
        read fetched anyway: the sweep's read (a lot that keeps records together deletes them
        together, ``release``), and the relay's read back, which keeps them for its next reads
        (``Lane.ahead``)."""
        ...

    def release(self, queue: str, records: Sequence[ParkedRecord], *, delay: bool = False) -> int:
        """Delete these records (their jobs are final, or refused); ``delay``: of the delay lane.
        Records stored together (``ParkedRecord.item``) are deleted once all of them are released.
        Returns how many records were deleted."""
        ...

    def marked(self, partition: int) -> list[str]:
        """The queues whose marker says they have records parked in ``partition`` (one read); a
        delay lane's marker is ``DELAY_MARKER`` + its queue."""
        ...

    def unmark(self, queue: str, partition: int) -> None: ...

    def count(self, queue: str) -> int:
        """Records of ``queue`` parked, every partition (for operators: a paginated count)."""
        ...


class Clock(Protocol):
    def now_ms(self) -> int: ...
    def monotonic(self) -> float: ...
    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now_ms(self) -> int:
        return wall_ms()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)
