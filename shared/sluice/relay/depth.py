"""``DepthSampler``: the relay's subscriber that keeps each queue's last hour of depths in Redis
(issue 32's closing review; ``sluice.core.depth``, docs/console.md "Depth over time").

The relay re-reads each queue's stats on its own cadence and says so (``QueueMeasured``); at most
every ``every_s`` per queue this records those counts as a sample (``DepthLog.record``:
``sample.lua``, which also takes the waits ``lease.lua`` counted since the last one). So the hour
fills whether or not a console is open, every console reads the same one, and its cost is one
script call per queue per ``every_s``, not per job. A failed sample is logged and dropped: the
chart has a gap, the relay goes on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sluice.core import bus as ev
from sluice.core.depth import SAMPLE_EVERY_S
from sluice.core.errors import SluiceError
from sluice.core.models import is_reserved_queue
from sluice.core.ports import DepthLog

log = logging.getLogger("sluice.relay")


@dataclass
class DepthSampler:
    log: Callable[[], DepthLog]  # built on the first sample (cold start)
    every_s: float = SAMPLE_EVERY_S
    clock: Callable[[], float] = time.monotonic
    last: dict[str, float] = field(default_factory=dict)  # queue -> when this relay last sampled it

    def subscribe(self, bus: ev.EventBus) -> Callable[[], None]:
        return bus.subscribe(self, ev.QueueMeasured)

    def __call__(self, e: ev.Event) -> None:
        if not isinstance(e, ev.QueueMeasured) or is_reserved_queue(e.queue):
            return
        now = self.clock()
        if now - self.last.get(e.queue, float("-inf")) < self.every_s:
            return
        self.last[e.queue] = now
        s = e.stats
        try:
            self.log().record(e.queue, s.ready, s.delayed, s.leased, s.dead)
        except SluiceError as exc:
            log.warning("could not record a depth sample of %s: %s", e.queue, exc)
