"""Per-queue state: each queue's config and depth, re-read from Redis every ``refresh_s``.

The re-read is what makes the runtime knobs (pause, watermarks, rate, caps) take effect
on every relay within about a second, with no redeploy. It also decides the watermark's
hysteresis, the dead cap's hold and the byte budget's hold (the queue's own budget, and the
total over every queue this relay knows: queues live in different cluster slots, so no script
sees the sum), writes the deployment's default rate for a queue nobody configured, and reads
Redis's memory use for the memory guard.
"""

from __future__ import annotations

import logging

from sluice.core import bus as ev
from sluice.core import limits, policy
from sluice.core.errors import BackendUnavailable, SluiceError
from sluice.core.models import QueueConfig
from sluice.relay.config import RelayConfig
from sluice.relay.ports import RelayEngine
from sluice.relay.state import QueueState

log = logging.getLogger("sluice.relay")  # one logger for the whole relay, as before the package split


class QueueStates:
    """The relay's view of every queue it pushed into or maintained."""

    def __init__(self, engine: RelayEngine, config: RelayConfig, events: ev.EventBus) -> None:
        self.engine, self.config = engine, config
        self.events = events
        self.states: dict[str, QueueState] = {}
        self._defaulted: set[str] = set()
        self._memory: float | None = None
        self._next_memory = float("-inf")
        # every known queue's used_bytes as of its last refresh, and how many use any: maintenance
        # re-reads every registered queue each maintenance_s, so the sum covers the idle ones too
        self.used_total = 0
        self.using = 0

    def get(self, queue: str, now: float) -> QueueState:
        """The queue's state, refreshed if older than ``refresh_s``."""
        state = self.states.get(queue)
        if state is None:
            state = self.states[queue] = QueueState()
        if now - state.refreshed_at >= self.config.refresh_s:
            self.refresh_or_hold(queue, state, now)
        return state

    def refresh_or_hold(self, queue: str, state: QueueState, now: float) -> None:
        """``refresh``; when the read fails on the queue's own keys, the queue is held alone until a
        read succeeds (tried again every ``refresh_s``). Its team's Redis user may write every key of
        it by hand: a key of the wrong type (WRONGTYPE in every script) or a value no script writes
        failed the read, and with it the plan of every queue this relay serves, at every step
        (session 36). Redis itself failing (``BackendUnavailable``) fails the step, as before."""
        try:
            self.refresh(queue, state, now)
        except BackendUnavailable:
            raise
        except (SluiceError, ValueError) as exc:
            if not state.unreadable:
                log.error("could not read queue %s; it is held until a read succeeds: %s", queue, exc)
            state.unreadable = True
            state.refreshed_at = now
            return
        state.unreadable = False

    def refresh(self, queue: str, state: QueueState, now: float) -> None:
        listening = self.events.listening  # nobody listens: no clock read, no event built
        t0 = ev.wall() if listening else 0.0
        stats = self.engine.stats(queue)  # carries the queue's config: one round trip
        if listening:  # what this relay saw, before the default rate below (the chaos pause rule)
            self.events.emit(ev.ConfigRead(queue=queue, paused=bool(stats.config.paused), t0=t0))
        state.config = stats.config
        rate = self.config.default_rate_per_s
        unset = stats.config.model_copy(update={"sensitive": ()}) == QueueConfig()  # no flow knob set
        if rate > 0 and unset and queue not in self._defaulted:
            # A queue nobody has configured gets the deployment's default rate, written to
            # Redis so that every relay shares the same bucket (rate.lua reads it there).
            self._defaulted.add(queue)
            state.config = self.engine.set_config(queue, rate_per_s=rate,
                                                  burst=self.config.default_burst or max(1, int(rate)))
        self.events.emit(ev.QueueMeasured(stats=stats, relayed=state.pushed_since_refresh))
        state.ready, state.leased = stats.ready, stats.leased
        state.delayed, state.dead = stats.delayed, stats.dead
        state.idle_workers = stats.idle_workers
        state.pushed_since_refresh = 0
        state.refreshed_at = now
        cfg = state.config
        full = limits.dead_full(self.config.limits, cfg, stats.dead)
        if full != state.dead_full:
            self.events.emit(ev.QueueHeld(queue=queue, gate="dead_cap", held=full, depth=stats.dead))
        state.dead_full = full
        paused = policy.watermark_paused(state.ready, cfg.high_watermark, cfg.low_watermark,
                                         state.watermark_paused)
        if paused != state.watermark_paused:
            self.events.emit(ev.QueueHeld(queue=queue, gate="watermark", held=paused, depth=state.ready))
        state.watermark_paused = paused
        self.used_total += stats.used_bytes - state.used_bytes
        self.using += (stats.used_bytes > 0) - (state.used_bytes > 0)
        state.used_bytes = stats.used_bytes
        self.budget_check(queue, state)

    def budget_check(self, queue: str, state: QueueState) -> None:
        """Hold or release ``queue`` by its byte budget (``limits.budget_held``) and the total
        (``limits.total_held``). The pusher holds it too, when push.lua left records over its budget."""
        lim = self.config.limits
        budget = lim.budget(state.config)
        full = limits.budget_held(state.used_bytes, budget, state.budget_full) or limits.total_held(
            state.used_bytes, self.used_total, self.using, lim.redis_budget)
        hold_for_budget(self.events, queue, state, full)

    def redis_memory(self, now: float) -> float | None:
        """Redis's memory use in % of maxmemory, read every ``refresh_s`` (``limits.memory_hold``
        decides per queue: the headroom above the guard is for leases, acks and fails)."""
        guard = self.config.limits.push_memory_percent
        if not guard:
            return None
        if now < self._next_memory:
            return self._memory
        self._next_memory = now + self.config.refresh_s
        try:
            percent = self.engine.memory_percent()
        except SluiceError as exc:
            log.warning("could not read Redis memory: %s", exc)
            return self._memory
        over = percent is not None and percent >= guard
        if over != (self._memory is not None and self._memory >= guard):
            self.events.emit(ev.MemoryGuard(on=over, percent=percent or 0))
        self._memory = percent
        return percent


def hold_for_budget(events: ev.EventBus, queue: str, state: QueueState, full: bool) -> None:
    """Set the queue's budget hold, with a ``QueueHeld`` incident (gate budget) when it turns."""
    if full != state.budget_full:
        events.emit(ev.QueueHeld(queue=queue, gate="budget", held=full, depth=state.used_bytes))
    state.budget_full = full
