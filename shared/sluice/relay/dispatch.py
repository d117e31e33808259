"""Starting workers: how many worker invocations a queue's backlog calls for, and the call.

After a push, each queue with new jobs gets workers at most every
``dispatch_interval_s``; maintenance calls ``queue`` for backlogs nobody is draining.
All queues share one budget of invocations per second (a token bucket, shared out
round-robin). Sluice's own queues never get workers.
"""

from __future__ import annotations

from sluice.core import bus as ev
from sluice.core import policy
from sluice.core.errors import RouteRefused, SluiceError
from sluice.core.models import is_reserved_queue
from sluice.core.ports import Dispatcher
from sluice.relay.config import RelayConfig
from sluice.relay.state import QueueState, RelayReport


class Dispatch:
    def __init__(self, dispatcher: Dispatcher | None, config: RelayConfig, *, report: RelayReport,
                 events: ev.EventBus) -> None:
        self.dispatcher, self.config, self.report = dispatcher, config, report
        self.events = events  # incidents: a budget spent, a dispatch failed
        self._bucket = policy.Bucket(tokens=float(max(1, config.dispatch_burst)), updated_ms=0)
        self._turn = 0

    def pushed(self, states: dict[str, QueueState], now: float) -> None:
        """Workers for what was pushed since the last dispatch of each queue."""
        if self.dispatcher is None:
            return
        interval = self.config.dispatch_interval_s
        due = {queue: state for queue, state in states.items()
               # Sluice's own queues are skipped: no worker may ever lease from them.
               if not is_reserved_queue(queue)
               and state.pushed_since_dispatch and now - state.dispatched_at >= interval}
        wanted = {q: self._wanted(s) for q, s in due.items()}
        # Workers waiting for work in this queue (the worker's linger) were woken by push.lua and
        # take these jobs: no invocation for them. The queue stays due, so that if they are gone
        # by the next refresh, workers are started then.
        wanted = {q: max(0, n - due[q].idle_workers) for q, n in wanted.items()
                  if not 0 < n <= due[q].idle_workers}
        for queue, n in self._budgeted(wanted, now).items():
            if n == 0 < wanted[queue]:
                continue  # the budget ran out before its turn: still due, first in line next time
            self._start_workers(queue, due[queue], n, now)

    def queue(self, queue: str, state: QueueState, now: float) -> None:
        """Workers for one queue's backlog (maintenance), within the budget."""
        if self.dispatcher is None:
            return
        wanted = self._wanted(state)
        n = self._budgeted({queue: wanted}, now)[queue]
        if n == 0 < wanted:
            state.pushed_since_dispatch = max(1, state.pushed_since_dispatch)  # due at the next tick
            return
        self._start_workers(queue, state, n, now)

    def _wanted(self, state: QueueState) -> int:
        return policy.dispatch_count(state.ready_estimate, state.leased, state.config.max_in_flight,
                                     self.config.worker_batch)

    def _budgeted(self, wanted: dict[str, int], now: float) -> dict[str, int]:
        """``wanted`` cut to the dispatch budget shared by every queue (a token bucket)."""
        if self.config.dispatch_per_s <= 0:
            return wanted
        now_ms = int(now * 1000)
        rate, burst = self.config.dispatch_per_s, self.config.dispatch_burst
        self._bucket = policy.refill(self._bucket, now_ms, rate, burst)
        granted, self._bucket = policy.take(self._bucket, sum(wanted.values()))
        if granted < sum(wanted.values()):
            self.events.emit(ev.DispatchLimited(wanted=sum(wanted.values()), granted=granted))
        self._turn += 1
        return policy.share_budget(wanted, granted, self._turn)

    def _start_workers(self, queue: str, state: QueueState, n: int, now: float) -> None:
        assert self.dispatcher is not None
        state.pushed_since_dispatch = 0
        if n <= 0:  # nothing started: the next push may start workers at once, not a second later
            return
        state.dispatched_at = now
        try:
            started = self.dispatcher.dispatch(queue, n, self.config.worker_batch)
        except RouteRefused as exc:  # not the team map's: never dispatched, and said loudly
            self.events.emit(ev.DispatchRefused(queue=queue, function=str(exc.details.get("function", "")),
                                                why=str(exc)))
            return
        except SluiceError as exc:  # the scheduled safety net still drains the queue
            self.events.emit(ev.DispatchFailed(queue=queue, error=str(exc)))
            return
        self.report.dispatched += started
