"""The relay's life: one poll-push-commit ``step`` after another until the deadline.

``Relay`` puts the mixins together (ownership, push shaping and dispatch, pushing
and committing) and owns the order of a step; ``run_until`` is one Lambda
invocation, and ``stop`` hands everything back so the next invocation starts clean.
"""

from __future__ import annotations

import logging
from typing import Any

from sluice.config import Settings
from sluice.errors import SluiceError
from sluice.limits import Limits
from sluice.ports import Dispatcher, JobStore
from sluice.relay.control import _Control
from sluice.relay.ports import RecordSource, RelayEngine
from sluice.relay.push import _Pushing
from sluice.relay.state import RelayReport

log = logging.getLogger("sluice.relay")  # one logger for the whole relay, as before the package split


class Relay(_Pushing, _Control):
    """One relay instance. ``run_until`` is the whole life of a Lambda invocation."""

    @classmethod
    def from_settings(cls, settings: Settings, engine: RelayEngine, store: JobStore, source: RecordSource,
                      dispatcher: Dispatcher | None, relay_id: str, **overrides: Any) -> Relay:
        kwargs: dict[str, Any] = {"batch": settings.relay_batch, "poll_ms": settings.relay_poll_ms,
                                  "worker_batch": settings.worker_batch,
                                  "default_rate_per_s": settings.default_rate_per_s,
                                  "default_burst": settings.default_burst,
                                  "partition_groups": settings.relay_partition_groups,
                                  "limits": Limits.from_settings(settings),
                                  "dispatch_per_s": settings.dispatch_budget_per_s,
                                  "dispatch_burst": settings.dispatch_budget_burst}
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
                except Exception as exc:  # a backend hiccup or a bug: log, count, go on
                    self.report.errors += 1
                    self.metrics.count("RelayErrors")
                    if not isinstance(exc, SluiceError):
                        self._unexpected(exc)
                    else:  # nothing was lost, try again
                        log.warning("relay step failed: %s", exc)
                    remaining = max(0.0, (deadline_ms - self.clock.now_ms()) / 1000)
                    self.clock.sleep(min(backoff, remaining))
                    backoff = min(backoff * 2, 2.0)
        finally:
            self._report_lag()
            self.stop()
        return self.report

    def _unexpected(self, exc: Exception) -> None:
        """A step met an error no adapter translated (a bug, or input nobody foresaw): the
        relay's memory of its partitions may be half-updated, so it gives every partition
        back and takes them again from their committed offsets; ``push.lua`` skips what
        Redis already holds. Nothing is lost and the relay goes on."""
        self.report.unexpected_errors += 1
        self.metrics.count("RelayUnexpectedErrors")
        log.error("relay step met an unexpected error; restarting its partitions from their "
                  "committed offsets", exc_info=exc)
        self._next_ownership = float("-inf")
        try:
            self._give_back(list(self._owned))
            self.source.assign([])
        except Exception:  # the leases expire on their own; the loop must go on
            log.exception("could not give the partitions back after an unexpected error")
            self._owned.clear()

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
        self._skip_relayed()
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
