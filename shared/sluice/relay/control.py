"""Shaping the push per queue, and starting workers for what was pushed.

Manual pause, a depth watermark with hysteresis and a token bucket shared through
Redis decide how many records a queue may take now; every relay re-reads the
queue's config from Redis every ``refresh_s``, so knobs take effect without a
redeploy. The same per-queue state then decides how many workers to dispatch.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from itertools import islice

from sluice import limits, policy
from sluice.errors import SluiceError
from sluice.models import JobSpec, QueueConfig, is_reserved_queue
from sluice.relay.state import _Item, _Owned, _QueueState, _RelayState

SETTLE_LIMIT = 100  # per queue per maintenance: a backlog of endings drains over a few rounds
log = logging.getLogger("sluice.relay")  # one logger for the whole relay, as before the package split


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


def _delayed(records: Iterable[tuple[int, JobSpec]], n: int, now_ms: int) -> list[bool]:
    """For the first ``n`` records: is each one delayed (due after ``now_ms``)?"""
    return [spec.run_at_ms > now_ms for _, spec in islice(records, n)]


class _Control(_RelayState):
    """Per-queue pause, watermark, rate and dispatch decisions (a mixin of ``Relay``)."""

    # -- how much to push ---------------------------------------------------------------------------

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
        state.delayed, state.dead = stats.delayed, stats.dead
        state.pushed_since_refresh = 0
        state.refreshed_at = now
        cfg = state.config
        full = limits.dead_full(self.limits, cfg, stats.dead)
        if full != state.dead_full:
            log.warning("queue %s %s at %s dead jobs", queue, "held back" if full else "released", stats.dead)
            self.metrics.count("RelayDeadCapHeld" if full else "RelayDeadCapReleased", queue=queue)
        state.dead_full = full
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
        memory = self._redis_memory()
        for queue, partitions in by_queue.items():
            state = self._state(queue)
            if state.blocked or self.limits.memory_hold(memory, state.ready_estimate + state.delayed):
                continue
            cfg = state.config
            wanted = sum(min(len(o.pending[queue]), self.batch) for o in partitions)
            if cfg.high_watermark > 0:  # stop at the mark, not a batch past it
                wanted = min(wanted, max(0, cfg.high_watermark - state.ready_estimate + 1))
            room = limits.delayed_room(self.limits, cfg, state.delayed)
            now_ms = self.clock.now_ms()
            if room is not None:  # up to each partition's first delayed record over the cap
                fits = [limits.take_within(_delayed(o.pending[queue], self.batch, now_ms), room)
                        for o in partitions]
                wanted = min(wanted, sum(fits))
            allowed = self.engine.take_rate(queue, wanted) if cfg.rate_per_s > 0 and wanted else wanted
            self._throttled |= allowed < wanted
            self._rotation += 1
            for owned, n in _share(allowed, partitions, queue, self.batch, self._rotation):
                q = owned.pending[queue]
                take = [q[i] for i in range(n)]
                if room is not None:  # over the delayed cap, a delayed record waits in Kafka
                    delayed = _delayed(take, n, now_ms)
                    take = take[:limits.take_within(delayed, room)]
                    room -= sum(delayed[:len(take)])
                    state.delayed += sum(delayed[:len(take)])
                if take:
                    plan.append((owned, queue, take))
        return plan

    def _redis_memory(self) -> float | None:
        """Redis's memory use in % of maxmemory, read every ``refresh_s`` (``limits.memory_hold``
        decides per queue: the headroom above the guard is for leases, acks and fails)."""
        now = self.clock.monotonic()
        if self._memory_percent is None or not self.limits.push_memory_percent:
            return None
        if now < self._next_memory:
            return self._memory
        self._next_memory = now + self.refresh_s
        try:
            percent: float | None = self._memory_percent()
        except SluiceError as exc:
            log.warning("could not read Redis memory: %s", exc)
            return self._memory
        over = percent is not None and percent >= self.limits.push_memory_percent
        if over != (self._memory is not None and self._memory >= self.limits.push_memory_percent):
            log.warning("Redis at %.0f%% of maxmemory: the memory guard is %s", percent or 0,
                        "on" if over else "off")
            self.metrics.count("RelayMemoryGuardOn" if over else "RelayMemoryGuardOff")
        self._memory = percent
        return percent

    def _held_up(self) -> bool:
        """Records wait for a queue that is not paused: the rate limit, or a full batch."""
        return any(q and not self._state(name).blocked
                   for owned in self._owned.values() for name, q in owned.pending.items())

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

    # -- workers --------------------------------------------------------------------------------------

    def _settle(self, queue: str) -> None:
        """Copy into the jobs table what Redis ended on its own (``keys.settle``).

        A lease that expired on its last attempt, or after a cancel request, ends the job
        inside a Redis script; the worker that held it is gone, so the jobs table would say
        "leased" for good. Each entry is forgotten only after its write (or after the store
        said the item had already moved on), so a crash here repeats a write, harmlessly.
        """
        try:
            ended = self.engine.unsettled(queue, SETTLE_LIMIT)
        except SluiceError as exc:
            log.warning("could not read the endings to settle in %s: %s", queue, exc)
            return
        done = []
        for job in ended:
            try:
                if self.store.settle_ended(job):
                    self.report.settled += 1
                    log.info("settled %s as %s: Redis ended it with no worker left to report",
                             job.job_id, job.state.value, extra={"job_id": job.job_id, "queue": queue})
                done.append(job)
            except SluiceError as exc:
                log.warning("could not settle %s as %s: %s", job.job_id, job.state.value, exc)
        if done:
            try:
                self.engine.settled(queue, done)
            except SluiceError as exc:  # written; the next maintenance writes them again
                log.warning("could not forget %d settled endings in %s: %s", len(done), queue, exc)

    def _trim(self, queue: str) -> None:
        """Forget old dead jobs (``limits.dead_keep``, ``dead_retention_ms``) after ``_settle``,
        so the endings it just wrote to the jobs table are no longer in the way."""
        if self._trim_dead is None or not (self.limits.dead_keep or self.limits.dead_retention_ms):
            return
        try:
            trimmed, _unsettled = self._trim_dead(queue, self.limits.dead_keep, self.limits.dead_retention_ms)
        except SluiceError as exc:
            log.warning("could not trim the dead jobs of %s: %s", queue, exc)
            return
        if trimmed:
            self.report.trimmed += trimmed
            log.info("trimmed %d dead jobs of %s (their endings stay in the jobs table)", trimmed, queue)

    def _dispatch(self) -> None:
        if self.dispatcher is None:
            return
        now = self.clock.monotonic()
        due = {queue: state for queue, state in self._queues.items()
               # Sluice's own queues are skipped: no worker may ever lease from them.
               if not is_reserved_queue(queue)
               and state.pushed_since_dispatch and now - state.dispatched_at >= self.dispatch_interval_s}
        wanted = {q: self._wanted(s) for q, s in due.items()}
        for queue, n in self._budgeted(wanted, now).items():
            if n == 0 < wanted[queue]:
                continue  # the budget ran out before its turn: still due, first in line next time
            self._start_workers(queue, due[queue], n, now)

    def _dispatch_queue(self, queue: str, state: _QueueState, now: float) -> None:
        wanted = self._wanted(state)
        n = self._budgeted({queue: wanted}, now)[queue]
        if n == 0 < wanted:
            state.pushed_since_dispatch = max(1, state.pushed_since_dispatch)  # due at the next tick
            return
        self._start_workers(queue, state, n, now)

    def _wanted(self, state: _QueueState) -> int:
        return policy.dispatch_count(state.ready_estimate, state.leased, state.config.max_in_flight,
                                     self.worker_batch)

    def _budgeted(self, wanted: dict[str, int], now: float) -> dict[str, int]:
        """``wanted`` cut to the dispatch budget shared by every queue (a token bucket)."""
        if self.dispatch_per_s <= 0:
            return wanted
        now_ms = int(now * 1000)
        self._dispatch_bucket = policy.refill(self._dispatch_bucket, now_ms, self.dispatch_per_s,
                                              self.dispatch_burst)
        granted, self._dispatch_bucket = policy.take(self._dispatch_bucket, sum(wanted.values()))
        if granted < sum(wanted.values()):
            self.metrics.count("RelayDispatchBudgetSpent")
        self._dispatch_turn += 1
        return policy.share_budget(wanted, granted, self._dispatch_turn)

    def _start_workers(self, queue: str, state: _QueueState, n: int, now: float) -> None:
        assert self.dispatcher is not None
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
        """Reap expired leases, settle the endings nobody reported, and start workers for
        backlogs nobody is draining."""
        now = self.clock.monotonic()
        for queue in self.engine.queues():
            if is_reserved_queue(queue):
                continue
            reaped = self.engine.reap(queue, self.reap_limit)
            self.report.reaped += reaped
            self._settle(queue)
            state = self._queues.setdefault(queue, _QueueState())
            self._refresh(queue, state, now)
            if state.dead:  # most queues have none: no round trip for them
                self._trim(queue)
            if (self.dispatcher is not None and (state.ready > 0 or reaped) and state.leased == 0
                    and now - state.dispatched_at >= self.maintenance_s):
                state.pushed_since_dispatch = max(1, reaped)
                self._dispatch_queue(queue, state, now)
