"""The relay: its parts put together, and the order of one poll-push-commit ``step``.

``Relay`` composes partition ownership, intake, the push planner, the pusher, the
committer, dispatch and maintenance, each built here from one ``RelayConfig``; the
hooks (``RelayHooks``; Redis-loss recovery in the Lambda) are handed in. ``run_until``
is one Lambda invocation, and ``stop`` hands everything back so the next one starts clean.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Final

from sluice.backends.aws.metrics import NullMetrics
from sluice.core import bus as ev
from sluice.core.bus import EventBus
from sluice.core.errors import SluiceError
from sluice.core.ids import Verifier
from sluice.core.ports import Dispatcher, JobStore, Metrics
from sluice.relay.committer import Committer
from sluice.relay.config import RelayConfig
from sluice.relay.dispatch import Dispatch
from sluice.relay.hooks import RelayHooks
from sluice.relay.intake import Intake
from sluice.relay.maintenance import Maintenance
from sluice.relay.observers import observe
from sluice.relay.ownership import Ownership
from sluice.relay.parking import Parking
from sluice.relay.planner import Planner, waiting
from sluice.relay.ports import Clock, ParkingLot, RecordSource, RelayEngine, SystemClock
from sluice.relay.pusher import Pusher
from sluice.relay.queues import QueueStates
from sluice.relay.state import Item, RelayReport

log = logging.getLogger("sluice.relay")  # one logger for the whole relay, as before the package split
STEP_WINDOW: Final = 100  # the last steps whose longest sets the margin a new step needs (about 20 s)
MAX_STEP_MARGIN_MS: Final = 30_000  # a step slower than this once must not end an invocation early for long
STOP_SAFETY_MS: Final = 500  # ``run_for_lambda``: stop's waits end this long before the invocation's timeout


class Relay:
    """One relay instance. ``run_until`` is the whole life of a Lambda invocation."""

    def __init__(self, engine: RelayEngine, store: JobStore, source: RecordSource,
                 dispatcher: Dispatcher | None = None, *, relay_id: str, config: RelayConfig | None = None,
                 clock: Clock | None = None, metrics: Metrics | None = None, hooks: RelayHooks | None = None,
                 job_ids: Verifier | None = None, events: EventBus,
                 parking: ParkingLot | None = None) -> None:
        """``job_ids``: the keys every record's id must verify with (``intake.unminted``); None
        trusts every record. ``events``: the bus the relay and each of its parts emit on
        (``RecordsRead``, ``Pushed``, ``ConfigRead``, ``Committed``, ``Settled``, ``JobEnded``, the
        incidents); the composition root hands it in (``sluice.entry.relay``), a test its own.
        ``Pushed`` is emitted on the pusher thread after each push and before the Kafka commit:
        the chaos run's kill point subscribes to it. ``parking``: the lot held records wait in
        (relay/parking.py); None: a held queue's records wait in the buffer, as before issue 28."""
        self.relay_id, self.source = relay_id, source
        self.config = config = config or RelayConfig()
        self.clock: Clock = clock or SystemClock()
        self.metrics: Metrics = metrics or NullMetrics()
        self.hooks = hooks = hooks or RelayHooks()
        self.report = report = RelayReport()
        self.events = bus = events
        # Its metrics and incident logs observe the bus until ``stop`` (relay/observers.py).
        self._unobserve = observe(bus, self.metrics, relay_id)
        self.ownership = Ownership(engine, source, config, relay_id=relay_id, started=self.clock.monotonic(),
                                   report=report, hooks=hooks, events=bus)
        self.intake = Intake(engine, source, config, self.ownership, report=report, hooks=hooks,
                             monotonic=self.clock.monotonic, job_ids=job_ids, events=bus, store=store,
                             now_ms=self.clock.now_ms)
        self.queues = QueueStates(engine, config, events=bus)
        self.planner = Planner(config)
        self.pusher = Pusher(engine, store, config, self.ownership, topic=source.topic, report=report,
                             hooks=hooks, events=bus)
        self.committer = Committer(source, config, self.ownership, clock=self.clock, report=report,
                                   hooks=hooks, events=bus)
        self.dispatch = Dispatch(dispatcher, config, report=report, events=bus)
        self.maintenance = Maintenance(engine, store, config, self.queues, self.dispatch, report=report,
                                       events=bus)
        self.parking = None if parking is None else Parking(
            parking, config, self.ownership, self.intake, store, self.pusher, report=report, events=bus,
            now_ms=self.clock.now_ms)
        self.intake.parking = parking is not None
        self._take_rate = engine.take_rate
        self._next_maintenance = float("-inf")
        self._steps: deque[float] = deque(maxlen=STEP_WINDOW)  # the last steps' durations (ms)
        self._stop_by_ms: int | None = None

    # -- the loop ---------------------------------------------------------------------------------

    def run_until(self, deadline_ms: int, *, stop_by_ms: int | None = None) -> RelayReport:
        """Relay until ``deadline_ms`` (epoch ms), then commit and give every partition back.

        A step is started only if it would end by ``deadline_ms`` at the pace of the slowest of the
        last ``STEP_WINDOW`` steps (``step_margin_ms``): a step cannot be cut short (its DynamoDB and
        Redis calls block), and one begun just before the deadline used to run past the stop margin,
        where the invocation was killed and committed nothing. ``stop_by_ms``: the time by which ``stop``
        is done, its waits bounded by what is left (None: each waits as long as it allows)."""
        backoff = 0.05
        self._stop_by_ms = stop_by_ms
        try:
            while self.clock.now_ms() + self.step_margin_ms() < deadline_ms:
                try:
                    self._timed_step()
                    backoff = 0.05
                except Exception as exc:  # a backend hiccup or a bug: log, count, go on
                    self.report.errors += 1
                    self.events.emit(ev.RelayStepFailed(error=ev.error_text(exc),
                                                        unexpected=not isinstance(exc, SluiceError)))
                    if not isinstance(exc, SluiceError):
                        self._unexpected(exc)
                    else:  # nothing was lost, try again
                        log.warning("relay step failed: %s", exc)
                    remaining = max(0.0, (deadline_ms - self.clock.now_ms()) / 1000)
                    self.clock.sleep(min(backoff, remaining))
                    backoff = min(backoff * 2, 2.0)
        finally:
            self.committer.report_lag()
            self.stop()
        return self.report

    def _timed_step(self) -> None:
        """A step, its duration kept (a failed one's too, without the back-off after it)."""
        started = self.clock.monotonic()
        try:
            self.step()
        finally:
            self._steps.append((self.clock.monotonic() - started) * 1000)

    def step_margin_ms(self) -> float:
        """How long before the deadline the last step starts: the slowest recent step, capped."""
        return min(max(self._steps, default=0.0), MAX_STEP_MARGIN_MS)

    def time_left_s(self) -> float | None:
        """Seconds until ``stop`` must be done (None: no bound was given)."""
        if self._stop_by_ms is None:
            return None
        return max(0.0, (self._stop_by_ms - self.clock.now_ms()) / 1000)

    def _unexpected(self, exc: Exception) -> None:
        """A step met an error no adapter translated (a bug, or input nobody foresaw): the
        relay's memory of its partitions may be half-updated, so it gives every partition
        back and takes them again from their committed offsets; ``push.lua`` skips what
        Redis already holds. Nothing is lost and the relay goes on."""
        self.report.unexpected_errors += 1
        log.error("relay step met an unexpected error; restarting its partitions from their "
                  "committed offsets", exc_info=exc)
        self.ownership.look_again()
        if self.parking is not None:  # their markers written before the partitions change hands
            self.parking.calls.settle()
        try:
            self.ownership.give_back(list(self.ownership.owned))
            self.ownership.assign()
        except Exception:  # the leases expire on their own; the loop must go on
            log.exception("could not give the partitions back after an unexpected error")
            self.ownership.owned.clear()

    def run_for_lambda(self, remaining_ms: int, stop_before_ms: int) -> RelayReport:
        """Relay until ``stop_before_ms`` before the timeout; ``stop`` is done ``STOP_SAFETY_MS``
        (at most half the stop margin) before it."""
        now = self.clock.now_ms()
        safety = min(STOP_SAFETY_MS, stop_before_ms // 2)
        return self.run_until(now + max(0, remaining_ms - stop_before_ms),
                              stop_by_ms=now + max(0, remaining_ms - safety))

    def step(self) -> int:
        """One poll-push-commit round; returns how many jobs were pushed."""
        self.report.loops += 1
        now = self.clock.monotonic()
        self.ownership.check(now)
        if now >= self._next_maintenance:
            self._next_maintenance = now + self.config.maintenance_s
            self.maintenance.run(now)
            if self.parking is not None:
                self.parking.sweep()
        if self.parking is not None:
            self.parking.prepare()  # a partition's lanes are known before any of its records is taken
        if not self.ownership.owned:  # waiting for partitions: the outgoing relay's release
            self.clock.sleep(min(self.config.poll_ms / 1000, self.config.takeover_s))
            return 0
        self.intake.skip_relayed()
        plan = self._plan()
        pushing = self.pusher.start(plan) if plan else None
        pushed = 0
        try:  # while Redis runs the push, fetch and decode what comes next
            records = self.source.poll(0 if plan or self._held_up() else self.config.poll_ms,
                                       self.config.batch * 2)
            self.intake.take(records)
        finally:
            if pushing is not None:
                pushed = self.pusher.finish(plan, pushing.result(), self.queues.states)
        if self.parking is not None:  # before the commit, which may then pass what was parked
            self.parking.turn(self.planner.held, self._blocked)
        self.committer.commit()
        self._recount_waiting()
        self.dispatch.pushed(self.queues.states, self.clock.monotonic())
        self.intake.flow_control()
        if self.clock.monotonic() >= self.committer.next_lag:
            self.committer.report_lag()
        if not records and (self.planner.throttled or (pushed == 0 and self._held_up())):
            # The bucket is empty: let it fill for a moment rather than ask Redis in a tight loop.
            self.clock.sleep(min(0.02, self.config.poll_ms / 1000))
        return pushed

    def _recount_waiting(self) -> None:
        """Re-read (every ``recount_s``) the queues whose new jobs were left to workers waiting for
        work (``Dispatch.pushed``): if those have just left, the jobs get workers now."""
        now = self.clock.monotonic()
        for queue, state in list(self.queues.states.items()):
            if state.pushed_since_dispatch and state.idle_workers and \
                    now - state.refreshed_at >= self.config.recount_s:
                self.queues.refresh_or_hold(queue, state, now)

    def _plan(self) -> list[Item]:
        """Which records to push now: the planner's decision on freshly read queue states."""
        by_queue = waiting(self.ownership.owned.values())
        memory = self.queues.redis_memory(self.clock.monotonic())
        states = {queue: self.queues.get(queue, self.clock.monotonic()) for queue in by_queue}
        return self.planner.plan(by_queue, states, memory, self.clock.now_ms(), self._take_rate)

    def _blocked(self, queue: str) -> bool:
        return self.queues.get(queue, self.clock.monotonic()).blocked

    def _held_up(self) -> bool:
        """Records wait for a queue that is not paused: the rate limit, or a full batch."""
        now = self.clock.monotonic()
        return any(q and not self.queues.get(name, now).blocked
                   for owned in self.ownership.owned.values() for name, q in owned.pending.items())

    def stop(self) -> None:
        """Commit what was pushed and release every partition lease (best effort). Each wait is
        bounded by the time the invocation has left (``time_left_s``): the lot's calls in flight and
        the status writes are abandoned after it (neither is committed past: a call's records are
        taken from Kafka again by the next owner; a status write is only late), and the hooks are told
        how long is left before the assignment is cleared (recovery skips its final checkpoint when it
        would not fit: a checkpoint is only ever late, never wrong)."""
        self.pusher.close()  # a round in flight: none, the step finished it
        if self.parking is not None:
            self.parking.close(self.time_left_s())
        try:
            self.committer.commit(force=True)
        except SluiceError as exc:
            log.warning("final commit failed: %s", exc)
        self.ownership.give_back(list(self.ownership.owned))
        left = self.time_left_s()
        if left is not None:
            self.hooks.stopping(left)
        try:
            self.ownership.assign()
        except SluiceError as exc:
            log.warning("could not clear the assignment: %s", exc)
        self.pusher.drain(self.time_left_s())
        self._unobserve()
