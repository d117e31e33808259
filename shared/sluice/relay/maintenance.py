"""Maintenance, every ``maintenance_s``: the queues' upkeep that no push triggers.

Per queue: reap expired leases; settle, that is copy into the jobs table the endings
Redis made on its own (``keys.settle``); trim old dead jobs; and start workers for a
backlog nobody is draining.
"""

from __future__ import annotations

import logging

from sluice.core import bus as ev
from sluice.core.bus import EventBus
from sluice.core.endings import Settled
from sluice.core.errors import BackendUnavailable, SluiceError
from sluice.core.models import SettleEntry, is_reserved_queue
from sluice.core.ports import JobStore
from sluice.relay.config import RelayConfig
from sluice.relay.dispatch import Dispatch
from sluice.relay.ports import RelayEngine
from sluice.relay.queues import QueueStates
from sluice.relay.state import QueueState, RelayReport

SETTLE_LIMIT = 100  # per queue per maintenance: a backlog of endings drains over a few rounds
log = logging.getLogger("sluice.relay")  # one logger for the whole relay, as before the package split


class Maintenance:
    def __init__(self, engine: RelayEngine, store: JobStore, config: RelayConfig, queues: QueueStates,
                 dispatch: Dispatch, *, report: RelayReport, events: EventBus) -> None:
        self.engine, self.store, self.config, self.queues = engine, store, config, queues
        self.dispatch, self.report = dispatch, report
        self.events = events

    def run(self, now: float) -> None:
        """Reap expired leases, settle the endings nobody reported, and start workers for
        backlogs nobody is draining."""
        for queue in self.engine.queues():
            if is_reserved_queue(queue):
                continue
            try:
                self._maintain(queue, now)
            except BackendUnavailable:
                raise
            except (SluiceError, ValueError) as exc:  # its own keys (its team's by hand): the rest go on
                log.error("could not maintain queue %s; the other queues go on: %s", queue, exc)

    def _maintain(self, queue: str, now: float) -> None:
        reaped = self.engine.reap(queue, self.config.reap_limit)
        self.report.reaped += reaped
        self._settle(queue)
        state = self.queues.states.setdefault(queue, QueueState())
        self.queues.refresh_or_hold(queue, state, now)
        if state.unreadable:
            return
        if state.dead:  # most queues have none: no round trip for them
            self._trim(queue)
        if (self.dispatch.dispatcher is not None and (state.ready > 0 or reaped) and state.leased == 0
                and now - state.dispatched_at >= self.config.maintenance_s):
            state.pushed_since_dispatch = max(1, reaped)
            self.dispatch.queue(queue, state, now)

    def _settle(self, queue: str) -> None:
        """Copy into the jobs table what Redis ended on its own (``keys.settle``).

        A lease that expired on its last attempt, or after a cancel request, ends the job
        inside a Redis script; the worker that held it is gone, so the jobs table would say
        "leased" for good. Each entry is forgotten only after its write (or after the store
        said the item had already moved on), so a crash here repeats a write, harmlessly.
        An entry whose item is succeeded or cancelled (its worker crashed before its last
        ack; a cancel won) takes its dead job out of Redis with it: the dead set holds only
        dead jobs (issue 29, item 8).
        """
        try:
            ended = self.engine.unsettled(queue, SETTLE_LIMIT)
        except SluiceError as exc:
            log.warning("could not read the endings to settle in %s: %s", queue, exc)
            return
        done: list[SettleEntry] = []
        residue: list[SettleEntry] = []
        settled = 0
        for job in ended:
            try:
                outcome = self.store.settle_ended(job)
            except SluiceError as exc:
                log.warning("could not settle %s as %s: %s", job.job_id, job.status.value, exc)
                continue
            if outcome is Settled.WRITTEN:
                self.report.settled += 1
                settled += 1
                log.info("settled %s as %s: Redis ended it with no worker left to report",
                         job.job_id, job.status.value, extra={"job_id": job.job_id, "queue": queue})
                self.events.emit(ev.JobEnded(job=job.job_id, queue=queue, state=job.status.value,
                                             source="settle", redrive_gen=job.redrive_gen or 0,
                                             ended_at_ms=job.ended_at_ms))
            elif outcome is Settled.FINAL:
                residue.append(job)
            done.append(job)
        if settled:
            self.events.emit(ev.Settled(queue=queue, n=settled))
        if done:
            try:
                self.engine.settled(queue, done, residue)
            except SluiceError as exc:  # written; the next maintenance writes them again
                log.warning("could not forget %d settled endings in %s: %s", len(done), queue, exc)

    def _trim(self, queue: str) -> None:
        """Forget old dead jobs (``limits.dead_keep``, ``dead_retention_ms``) after ``_settle``,
        so the endings it just wrote to the jobs table are no longer in the way."""
        lim = self.config.limits
        if not (lim.dead_keep or lim.dead_retention_ms):
            return
        try:
            trimmed, _unsettled = self.engine.trim_dead(queue, lim.dead_keep, lim.dead_retention_ms)
        except SluiceError as exc:
            log.warning("could not trim the dead jobs of %s: %s", queue, exc)
            return
        if trimmed:
            self.report.trimmed += trimmed
            log.info("trimmed %d dead jobs of %s (their endings stay in the jobs table)", trimmed, queue)
