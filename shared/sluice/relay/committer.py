"""The committer: tells Kafka how far Redis has got, and measures how far behind it is.

An offset is committed only after every record below it is in Redis (or dead-lettered
and flushed), so a relay killed at any point re-reads only records ``push.lua`` skips.
At most one commit per ``commit_s``: exactly-once needs no hurry.
"""

from __future__ import annotations

import logging

from sluice.core import bus as ev
from sluice.core.bus import EventBus
from sluice.core.errors import SluiceError
from sluice.relay.config import RelayConfig
from sluice.relay.hooks import RelayHooks
from sluice.relay.ownership import Ownership
from sluice.relay.ports import Clock, RecordSource
from sluice.relay.state import RelayReport

log = logging.getLogger("sluice.relay")  # one logger for the whole relay, as before the package split


class Committer:
    """Kafka commits of the owned partitions' commit points, and the ``RelayLag`` metric."""

    def __init__(self, source: RecordSource, config: RelayConfig, ownership: Ownership, *,
                 clock: Clock, report: RelayReport, hooks: RelayHooks,
                 events: EventBus) -> None:
        self.source, self.config, self.ownership = source, config, ownership
        self.clock, self.report, self.hooks = clock, report, hooks
        self.events = events
        self._last_commit = float("-inf")
        self.next_lag = clock.monotonic() + config.lag_every_s

    def commit(self, force: bool = False) -> None:
        now = self.clock.monotonic()
        if not force and now - self._last_commit < self.config.commit_s:
            return
        self._last_commit = now
        owned_by = self.ownership.owned
        offsets: dict[int, int] = {}
        flush = False
        for owned in owned_by.values():
            point = owned.commit_point()
            if point is not None and (owned.committed is None or point > owned.committed):
                offsets[owned.number] = point
                flush |= owned.dead_since_commit
        if not offsets:
            return
        if flush:  # a poison record's offset is committed only once its dead letter is safe
            self.source.flush_dead_letters()
        forward = self.hooks.on_commit(offsets)
        if forward:
            self.source.commit(forward)
            if self.events.listening:
                for p, offset in forward.items():
                    self.events.emit(ev.Committed(topic=self.source.topic, partition=p, offset=offset))
        for p, offset in offsets.items():
            owned_by[p].committed = offset
            owned_by[p].dead_since_commit = False

    def report_lag(self) -> None:
        """``RelayLag``: records in Kafka not yet in Redis, the worst of the owned partitions."""
        self.next_lag = self.clock.monotonic() + self.config.lag_every_s
        lags = []
        for owned in self.ownership.owned.values():
            start = owned.commit_point()
            try:
                end = self.source.highwater(owned.number)
            except SluiceError:
                continue
            if start is not None and end is not None:
                lags.append(max(0, end - start))
        if lags:
            self.report.lag = max(lags)
            self.events.emit(ev.LagMeasured(lag=self.report.lag))
