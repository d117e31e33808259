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

This module talks only to ports; the Kafka, Redis and DynamoDB adapters are
built by the caller (``sluice.wiring`` in Lambda, fixtures in tests).
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue as queue_mod
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import ValidationError

from sluice import policy
from sluice.config import Settings
from sluice.errors import BackendUnavailable, LeaseLost, SluiceError
from sluice.models import SCHEMA_VERSION, JobSpec, LeasedJob, QueueConfig, QueueStats
from sluice.ports import Dispatcher, JobStore, Metrics

log = logging.getLogger(__name__)

RELAY_QUEUE = "sluice-relay"
OWNERSHIP_MAX_ATTEMPTS = 100  # a killed relay costs its partition job one attempt; redrive resets


@dataclass(frozen=True, slots=True)
class SourceRecord:
    """One Kafka record as the relay sees it: no client library types leak past the adapter."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


class PushOutcome(Protocol):
    @property
    def pushed(self) -> int: ...
    @property
    def skipped(self) -> int: ...


class RelayEngine(Protocol):
    """The part of the Redis engine the relay uses: ``ports.JobQueue`` plus push and take_rate."""

    def enqueue(self, spec: JobSpec) -> bool: ...
    def lease(self, queue: str, n: int, lease_ms: int | None, worker_id: str) -> list[LeasedJob]: ...
    def extend(self, queue: str, job_id: str, token: int, lease_ms: int) -> Any: ...
    def release(self, queue: str, job_id: str, token: int) -> None: ...
    def redrive(self, queue: str, job_id: str | None = None) -> int: ...
    def reap(self, queue: str, limit: int) -> int: ...
    def stats(self, queue: str) -> QueueStats: ...
    def queues(self) -> list[str]: ...
    def push(self, queue: str, topic: str, partition: int, owner_token: int,
             records: list[tuple[int, JobSpec]]) -> PushOutcome: ...
    def take_rate(self, queue: str, wanted: int) -> int: ...


class RecordSource(Protocol):
    """The job topic (``sluice.kafka.source.KafkaSource``), consumed by manual assignment."""

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


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class _NoMetrics:
    def count(self, name: str, value: float = 1, **dimensions: str) -> None:
        return None


def partition_job_id(topic: str, partition: int) -> str:
    return f"{topic}.{int(partition)}"


def decode(record: SourceRecord) -> JobSpec | str:
    """The record's JobSpec, or the reason it is poison (for the dead-letter topic)."""
    if record.value is None:
        return "undecodable: empty value"
    try:
        spec = JobSpec.model_validate_json(record.value)
    except ValidationError as exc:
        return _poison_reason(record.value, exc)
    if record.key is not None and record.key != spec.job_id.encode():
        return f"invalid: key {record.key[:64]!r} does not match job_id {spec.job_id!r}"
    return spec


def _poison_reason(value: bytes, exc: ValidationError) -> str:
    # Only the failure path parses twice, to tell a newer schema from garbage.
    try:
        doc = json.loads(value)
    except (ValueError, RecursionError):
        return "undecodable: not UTF-8 JSON"
    if not isinstance(doc, dict):
        return "invalid: not a JSON object"
    version = doc.get("schema_version", SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        return f"unknown schema_version {str(version)[:32]}"
    errors = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:5])
    return f"invalid job spec: {errors}"[:1000]


@dataclass
class RelayReport:
    pushed: int = 0
    skipped: int = 0  # already in Redis: at or below the recorded offset, or the job hash exists
    final_dropped: int = 0  # the store said the job is already final (cancelled, done)
    dead_lettered: int = 0
    stale_stops: int = 0  # pushes refused because a newer owner pushed
    partitions_lost: int = 0  # stale stops plus leases lost or expired
    dispatched: int = 0
    reaped: int = 0
    loops: int = 0
    errors: int = 0
    lag: int | None = None  # records in Kafka not yet in Redis, worst owned partition, last measured
    partitions_owned: set[int] = field(default_factory=set)

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "partitions_owned"}
        return out | {"partitions_owned": sorted(self.partitions_owned)}

    def publish(self, metrics: Metrics) -> None:
        """Once per invocation: per-step counts would be one log line each in EMF."""
        for name in ("pushed", "skipped", "final_dropped", "dead_lettered", "dispatched", "reaped"):
            metrics.count("Relay" + name.title().replace("_", ""), getattr(self, name))


@dataclass
class _Owned:
    number: int
    job_id: str
    token: int
    leased_at: float  # monotonic
    pending: dict[str, deque[tuple[int, JobSpec]]] = field(default_factory=dict)
    pending_count: int = 0
    next_offset: int | None = None  # one past the last record taken from the source
    committed: int | None = None
    fetch_paused: bool = False
    dead_since_commit: bool = False

    def commit_point(self) -> int | None:
        heads = [q[0][0] for q in self.pending.values() if q]
        return min(heads) if heads else self.next_offset


@dataclass
class _QueueState:
    config: QueueConfig = field(default_factory=QueueConfig)
    ready: int = 0
    leased: int = 0
    refreshed_at: float = float("-inf")
    watermark_paused: bool = False
    pushed_since_refresh: int = 0
    pushed_since_dispatch: int = 0
    dispatched_at: float = float("-inf")

    @property
    def ready_estimate(self) -> int:
        return self.ready + self.pushed_since_refresh

    @property
    def blocked(self) -> bool:
        return self.config.paused or self.watermark_paused


class StatusWriter:
    """``store.mark_queued`` off the push path, on one background thread.

    The status is for people (accepted -> queued); nothing depends on it, and a worker's
    grant moves the job on regardless. So a slow table must not slow pushing: batches
    queue up here, and only a long backlog (``max_batches``) makes the relay wait.
    """

    def __init__(self, store: JobStore, metrics: Metrics, max_batches: int = 200) -> None:
        self.store, self.metrics = store, metrics
        self._queue: queue_mod.Queue[list[tuple[str, str]] | None] = queue_mod.Queue(max_batches)
        self._thread: threading.Thread | None = None

    def submit(self, jobs: list[tuple[str, str]]) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="sluice-relay-status", daemon=True)
            self._thread.start()
        self._queue.put(jobs)

    def _run(self) -> None:
        while (jobs := self._queue.get()) is not None:
            try:
                self.store.mark_queued(jobs)
            except Exception as exc:  # a status update must never kill the relay
                self.metrics.count("RelayMarkQueuedFailed", len(jobs))
                log.warning("could not mark %d jobs queued: %s", len(jobs), exc)

    def close(self, timeout_s: float) -> None:
        """Finish what is queued, waiting at most ``timeout_s``; the thread dies with the process."""
        if self._thread is None:
            return
        with contextlib.suppress(queue_mod.Full):
            self._queue.put(None, timeout=timeout_s)
        self._thread.join(timeout_s)
        self._thread = None


def _share(allowed: int, partitions: list[_Owned], queue: str, batch: int,
           rotation: int) -> list[tuple[_Owned, int]]:
    """Split a queue's allowance fairly over partitions, so none starves under a rate limit."""
    if allowed <= 0 or not partitions:
        return []
    k = rotation % len(partitions)
    order = partitions[k:] + partitions[:k]
    caps = [min(len(o.pending[queue]), batch) for o in order]
    counts = [0] * len(order)
    fair = -(-allowed // len(order))
    for i, cap in enumerate(caps):  # everyone's fair share first, then the leftovers in order
        counts[i] = min(cap, fair, allowed)
        allowed -= counts[i]
    for i, cap in enumerate(caps):
        extra = min(cap - counts[i], allowed)
        counts[i] += extra
        allowed -= extra
    return [(o, n) for o, n in zip(order, counts, strict=True) if n > 0]


_Item = tuple[_Owned, str, list[tuple[int, JobSpec]]]  # a partition's next records for one queue


@dataclass
class _Executed:
    # per plan item, in order: the records sent (finals removed), and push's outcome,
    # the LeaseLost that refused it, or None when nothing was sent
    results: list[tuple[list[tuple[int, JobSpec]], PushOutcome | LeaseLost | None]] = field(
        default_factory=list)
    error: SluiceError | None = None


AfterPush = Callable[[int, str, PushOutcome], None]


class Relay:
    """One relay instance. ``run_until`` is the whole life of a Lambda invocation."""

    def __init__(self, engine: RelayEngine, store: JobStore, source: RecordSource,
                 dispatcher: Dispatcher | None = None, *, relay_id: str,
                 clock: Any = None, metrics: Metrics | None = None,
                 batch: int = 500, poll_ms: int = 200, lease_ms: int = 15_000,
                 max_partitions: int = 1_000, max_pending: int = 5_000,
                 refresh_s: float = 0.5, ownership_s: float = 1.0, maintenance_s: float = 5.0,
                 dispatch_interval_s: float = 1.0, worker_batch: int = 10, reap_limit: int = 500,
                 commit_s: float = 0.2, status_drain_s: float = 2.0,
                 default_rate_per_s: float = 0.0, default_burst: int = 0,
                 partition_groups: int = 1, share_grace_s: float = 10.0, lag_every_s: float = 30.0,
                 config_writer: Any = None, highwater: Callable[[int], int | None] | None = None,
                 after_push: AfterPush | None = None) -> None:
        """``config_writer`` (default: the engine) writes default rates; ``highwater`` (default:
        the source's) gives a partition's end offset for the ``RelayLag`` metric. Both are
        optional so that wrapped engines and sources need not pass them through."""
        self.engine, self.store, self.source, self.dispatcher = engine, store, source, dispatcher
        self.topic = source.topic
        self.relay_id = relay_id
        self.clock = clock or SystemClock()
        self.metrics: Metrics = metrics or _NoMetrics()
        self.batch, self.poll_ms, self.lease_ms = batch, poll_ms, lease_ms
        self.max_partitions, self.max_pending = max_partitions, max_pending
        self.refresh_s, self.ownership_s, self.maintenance_s = refresh_s, ownership_s, maintenance_s
        self.dispatch_interval_s, self.worker_batch = dispatch_interval_s, worker_batch
        self.reap_limit = reap_limit
        self.after_push = after_push
        self.status_drain_s = status_drain_s
        self.commit_s = commit_s
        self.default_rate_per_s, self.default_burst = default_rate_per_s, default_burst
        self._defaulted: set[str] = set()
        self.partition_groups, self.share_grace_s = partition_groups, share_grace_s
        self.lag_every_s = lag_every_s
        self._set_config = getattr(config_writer or engine, "set_config", None)
        self._highwater = highwater or getattr(source, "highwater", None)
        self._started = self.clock.monotonic()
        self._next_lag = self._started + lag_every_s
        self.report = RelayReport()
        self._owned: dict[int, _Owned] = {}
        self._queues: dict[str, _QueueState] = {}
        self._registered: set[int] = set()
        self._next_ownership = float("-inf")
        self._next_maintenance = float("-inf")
        self._rotation = 0
        self._throttled = False
        self._status = StatusWriter(store, self.metrics)
        self._executor: ThreadPoolExecutor | None = None
        self._last_commit = float("-inf")

    @classmethod
    def from_settings(cls, settings: Settings, engine: RelayEngine, store: JobStore, source: RecordSource,
                      dispatcher: Dispatcher | None, relay_id: str, **overrides: Any) -> Relay:
        kwargs: dict[str, Any] = {"batch": settings.relay_batch, "poll_ms": settings.relay_poll_ms,
                                  "worker_batch": settings.worker_batch,
                                  "default_rate_per_s": settings.default_rate_per_s,
                                  "default_burst": settings.default_burst,
                                  "partition_groups": settings.relay_partition_groups}
        return cls(engine, store, source, dispatcher, relay_id=relay_id, **(kwargs | overrides))

    # -- the loop ---------------------------------------------------------------------------------

    def run_until(self, deadline_ms: int) -> RelayReport:
        """Relay until ``deadline_ms`` (epoch ms), then commit and give every partition back."""
        backoff = 0.05
        try:
            while self.clock.now_ms() < deadline_ms:
                try:
                    self.step()
                    backoff = 0.05
                except SluiceError as exc:  # a backend hiccup: nothing was lost, try again
                    self.report.errors += 1
                    self.metrics.count("RelayErrors")
                    log.warning("relay step failed: %s", exc)
                    remaining = max(0.0, (deadline_ms - self.clock.now_ms()) / 1000)
                    self.clock.sleep(min(backoff, remaining))
                    backoff = min(backoff * 2, 2.0)
        finally:
            self._report_lag()
            self.stop()
        return self.report

    def run_for_lambda(self, remaining_ms: int, stop_before_ms: int) -> RelayReport:
        return self.run_until(self.clock.now_ms() + max(0, remaining_ms - stop_before_ms))

    def step(self) -> int:
        """One poll-push-commit round; returns how many jobs were pushed."""
        self.report.loops += 1
        now = self.clock.monotonic()
        self._check_ownership(now)
        if now >= self._next_maintenance:
            self._next_maintenance = now + self.maintenance_s
            self._maintain()
        if not self._owned:
            self.clock.sleep(self.poll_ms / 1000)
            return 0
        plan = self._plan()
        pushing = self._pusher().submit(self._execute, plan) if plan else None
        pushed = 0
        try:  # while Redis runs the push, fetch and decode what comes next
            records = self.source.poll(0 if plan or self._held_up() else self.poll_ms, self.batch * 2)
            self._ingest(records)
        finally:
            if pushing is not None:
                pushed = self._apply(plan, pushing.result())
        self._commit()
        self._dispatch()
        self._flow_control()
        if self.clock.monotonic() >= self._next_lag:
            self._report_lag()
        if not records and (self._throttled or (pushed == 0 and self._held_up())):
            # The bucket is empty: let it fill for a moment rather than ask Redis in a tight loop.
            self.clock.sleep(min(0.02, self.poll_ms / 1000))
        return pushed

    def stop(self) -> None:
        """Commit what was pushed and release every partition lease (best effort)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        try:
            self._commit(force=True)
        except SluiceError as exc:
            log.warning("final commit failed: %s", exc)
        self._give_back(list(self._owned))
        try:
            self.source.assign([])
        except SluiceError as exc:
            log.warning("could not clear the assignment: %s", exc)
        self._status.close(self.status_drain_s)

    # -- ownership ----------------------------------------------------------------------------------

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

    # -- records in ---------------------------------------------------------------------------------

    def _ingest(self, records: Sequence[SourceRecord]) -> None:
        for record in records:
            owned = self._owned.get(record.partition)
            if owned is None or (owned.next_offset is not None and record.offset < owned.next_offset):
                continue  # not ours any more, or a re-delivery of something already taken
            if owned.next_offset is None:  # we started at the committed offset: nothing to commit yet
                owned.committed = record.offset
            owned.next_offset = record.offset + 1
            spec = decode(record)
            if isinstance(spec, str):
                self.source.dead_letter(record, spec)
                owned.dead_since_commit = True
                self.report.dead_lettered += 1
                log.warning("poison record %s/%s -> dead-letter topic: %s", record.partition,
                            record.offset, spec)
                continue
            owned.pending.setdefault(spec.queue, deque()).append((record.offset, spec))
            owned.pending_count += 1

    def _held_up(self) -> bool:
        """Records wait for a queue that is not paused: the rate limit, or a full batch."""
        return any(q and not self._state(name).blocked
                   for owned in self._owned.values() for name, q in owned.pending.items())

    def _pusher(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sluice-relay-push")
        return self._executor

    # -- records out --------------------------------------------------------------------------------

    def _state(self, queue: str) -> _QueueState:
        state = self._queues.get(queue)
        if state is None:
            state = self._queues[queue] = _QueueState()
        now = self.clock.monotonic()
        if now - state.refreshed_at >= self.refresh_s:
            self._refresh(queue, state, now)
        return state

    def _refresh(self, queue: str, state: _QueueState, now: float) -> None:
        stats = self.engine.stats(queue)  # carries the queue's config: one round trip
        state.config = stats.config
        if (self.default_rate_per_s > 0 and stats.config == QueueConfig() and queue not in self._defaulted
                and self._set_config is not None):
            # A queue nobody has configured gets the deployment's default rate, written to
            # Redis so that every relay shares the same bucket (rate.lua reads it there).
            self._defaulted.add(queue)
            state.config = self._set_config(
                queue, rate_per_s=self.default_rate_per_s,
                burst=self.default_burst or max(1, int(self.default_rate_per_s)))
        state.ready, state.leased = stats.ready, stats.leased
        state.pushed_since_refresh = 0
        state.refreshed_at = now
        cfg = state.config
        paused = policy.watermark_paused(state.ready, cfg.high_watermark, cfg.low_watermark,
                                         state.watermark_paused)
        if paused != state.watermark_paused:
            log.info("queue %s %s at ready depth %s", queue, "paused" if paused else "resumed", state.ready)
            self.metrics.count("RelayWatermarkPaused" if paused else "RelayWatermarkResumed", queue=queue)
        state.watermark_paused = paused

    def _plan(self) -> list[_Item]:
        """Which records to push now: per queue, after pause, watermark and the shared bucket."""
        by_queue: dict[str, list[_Owned]] = {}
        for owned in self._owned.values():
            for queue, q in owned.pending.items():
                if q:
                    by_queue.setdefault(queue, []).append(owned)
        plan: list[_Item] = []
        self._throttled = False
        for queue, partitions in by_queue.items():
            state = self._state(queue)
            if state.blocked:
                continue
            cfg = state.config
            wanted = sum(min(len(o.pending[queue]), self.batch) for o in partitions)
            if cfg.high_watermark > 0:  # stop at the mark, not a batch past it
                wanted = min(wanted, max(0, cfg.high_watermark - state.ready_estimate + 1))
            allowed = self.engine.take_rate(queue, wanted) if cfg.rate_per_s > 0 and wanted else wanted
            self._throttled |= allowed < wanted
            self._rotation += 1
            for owned, n in _share(allowed, partitions, queue, self.batch, self._rotation):
                q = owned.pending[queue]
                plan.append((owned, queue, [q[i] for i in range(n)]))
        return plan

    def _execute(self, plan: list[_Item]) -> _Executed:
        """The I/O half of a push round, on the pusher thread: final jobs out, then push.lua.

        Reads relay state but changes none of it; ``_apply`` does that on the main thread.
        """
        done = _Executed()
        try:
            final = self.store.final_job_ids([s.job_id for _, _, take in plan for _, s in take])
            stale: set[int] = set()
            for owned, queue, take in plan:
                records = [(off, spec) for off, spec in take if spec.job_id not in final]
                if owned.number in stale or not records:
                    done.results.append((records, None))
                    continue
                try:
                    outcome = self.engine.push(queue, self.topic, owned.number, owned.token, records)
                except LeaseLost as exc:  # StaleToken: a newer relay owns this partition now
                    stale.add(owned.number)
                    done.results.append((records, exc))
                    continue
                done.results.append((records, outcome))
                if self.after_push is not None:
                    self.after_push(owned.number, queue, outcome)
        except SluiceError as exc:  # the rest of the plan stays pending and is tried again
            done.error = exc
        return done

    def _apply(self, plan: list[_Item], done: _Executed) -> int:
        pushed = 0
        queued: list[tuple[str, str]] = []
        for (owned, queue, take), (records, outcome) in zip(plan, done.results, strict=False):
            if self._owned.get(owned.number) is not owned:
                continue  # lost earlier in this round: its records are the new owner's now
            if isinstance(outcome, LeaseLost):
                self.report.stale_stops += 1
                self._lose(owned.number, str(outcome))
                self.source.assign(sorted(self._owned))
                continue
            if outcome is not None:
                pushed += outcome.pushed
                self.report.pushed += outcome.pushed
                self.report.skipped += outcome.skipped
                queued.extend((spec.job_id, queue) for _, spec in records)
                state = self._queues[queue]
                state.pushed_since_refresh += outcome.pushed
                state.pushed_since_dispatch += outcome.pushed
            self.report.final_dropped += len(take) - len(records)
            pending = owned.pending[queue]
            for _ in take:
                pending.popleft()
            owned.pending_count -= len(take)
        self._mark_queued(queued)
        if done.error is not None:
            raise done.error
        return pushed

    def _mark_queued(self, jobs: list[tuple[str, str]]) -> None:
        if jobs:
            self._status.submit(jobs)

    def _commit(self, force: bool = False) -> None:
        """Tell Kafka how far Redis has got; at most every ``commit_s`` (exactly-once needs no hurry)."""
        now = self.clock.monotonic()
        if not force and now - self._last_commit < self.commit_s:
            return
        self._last_commit = now
        offsets: dict[int, int] = {}
        flush = False
        for owned in self._owned.values():
            point = owned.commit_point()
            if point is not None and (owned.committed is None or point > owned.committed):
                offsets[owned.number] = point
                flush |= owned.dead_since_commit
        if not offsets:
            return
        if flush:  # a poison record's offset is committed only once its dead letter is safe
            self.source.flush_dead_letters()
        self.source.commit(offsets)
        for p, offset in offsets.items():
            self._owned[p].committed = offset
            self._owned[p].dead_since_commit = False

    def _flow_control(self) -> None:
        """Stop fetching partitions whose backlog is held up (paused or rate-limited queues)."""
        stop = [o for o in self._owned.values() if not o.fetch_paused and o.pending_count >= self.max_pending]
        go = [o for o in self._owned.values() if o.fetch_paused and o.pending_count < self.max_pending // 2]
        if stop:
            self.source.pause([o.number for o in stop])
        if go:
            self.source.resume([o.number for o in go])
        for o in stop:
            o.fetch_paused = True
        for o in go:
            o.fetch_paused = False

    def _report_lag(self) -> None:
        """``RelayLag``: records in Kafka not yet in Redis, the worst of the owned partitions."""
        self._next_lag = self.clock.monotonic() + self.lag_every_s
        if self._highwater is None:
            return
        lags = []
        for owned in self._owned.values():
            start = owned.commit_point()
            try:
                end = self._highwater(owned.number)
            except SluiceError:
                continue
            if start is not None and end is not None:
                lags.append(max(0, end - start))
        if lags:
            self.report.lag = max(lags)
            self.metrics.count("RelayLag", self.report.lag)

    # -- workers --------------------------------------------------------------------------------------

    def _dispatch(self) -> None:
        if self.dispatcher is None:
            return
        now = self.clock.monotonic()
        for queue, state in self._queues.items():
            if state.pushed_since_dispatch and now - state.dispatched_at >= self.dispatch_interval_s:
                self._dispatch_queue(queue, state, now)

    def _dispatch_queue(self, queue: str, state: _QueueState, now: float) -> None:
        assert self.dispatcher is not None
        n = policy.dispatch_count(state.ready_estimate, state.leased, state.config.max_in_flight,
                                  self.worker_batch)
        state.pushed_since_dispatch = 0
        state.dispatched_at = now
        if n <= 0:
            return
        try:
            started = self.dispatcher.dispatch(queue, n, self.worker_batch)
        except SluiceError as exc:  # the scheduled safety net still drains the queue
            self.metrics.count("RelayDispatchFailed", queue=queue)
            log.warning("dispatch to %s failed: %s", queue, exc)
            return
        self.report.dispatched += started

    def _maintain(self) -> None:
        """Reap expired leases, and start workers for backlogs nobody is draining."""
        now = self.clock.monotonic()
        for queue in self.engine.queues():
            if queue == RELAY_QUEUE:
                continue
            reaped = self.engine.reap(queue, self.reap_limit)
            self.report.reaped += reaped
            state = self._queues.setdefault(queue, _QueueState())
            self._refresh(queue, state, now)
            if (self.dispatcher is not None and (state.ready > 0 or reaped) and state.leased == 0
                    and now - state.dispatched_at >= self.maintenance_s):
                state.pushed_since_dispatch = max(1, reaped)
                self._dispatch_queue(queue, state, now)
