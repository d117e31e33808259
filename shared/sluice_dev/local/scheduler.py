"""EventBridge Scheduler's part in ``sluice dev`` (issue 17): fire the stored schedules.

Moto stores Scheduler schedules but never fires them, and the local gateway keeps no Scheduler
schedule at all (``deployed.BINDINGS`` drops its role), so this reads the same definitions the
gateway serves (the schedules table) and, at each schedule's due time, invokes the gateway
function with the event Scheduler would send (``schedules.firing_event``, the scheduled time in
ISO 8601). The gateway derives the job id from the schedule and that time, so a firing delivered
twice (two schedulers, a retry) makes one job.

Like Scheduler with its flexible window off, a firing's time is the expression's, not the
moment of the tick. A paused schedule does not fire, and on resume fires from then on, not the
firings it missed; after a stall (a suspended laptop) only the latest due firing is sent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from sluice.core import schedules
from sluice.core.schedules import Schedule

log = logging.getLogger("sluice_dev.local.scheduler")
_CATCH_UP_LIMIT = 10_000  # firings stepped over after a stall before giving up the search


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class LocalScheduler:
    """``tick()`` fires every schedule due since its last tick; the caller decides how often."""

    def __init__(self, source: Callable[[], list[Schedule]], fire: Callable[[dict[str, Any]], Any], *,
                 clock: Callable[[], int] = wall_ms) -> None:
        self.source, self.fire, self.clock = source, fire, clock
        self.started_ms = clock()
        self.last: dict[tuple[str, str], int] = {}  # (queue, name) -> the last firing handled

    def due(self, now_ms: int) -> list[tuple[Schedule, int]]:
        """The (schedule, scheduled time) pairs to fire now, each schedule's latest due one."""
        out: list[tuple[Schedule, int]] = []
        for schedule in self.source():
            key = (schedule.queue, schedule.name)
            if schedule.paused:
                self.last[key] = now_ms  # on resume, the next firing after the resume
                continue
            at = schedule.next_after(self.last.get(key, max(schedule.start_ms, self.started_ms)))
            if at is None or at > now_ms:
                continue
            for _ in range(_CATCH_UP_LIMIT):
                after = schedule.next_after(at)
                if after is None or after > now_ms:
                    break
                at = after
            out.append((schedule, at))
        return out

    def tick(self, now_ms: int | None = None) -> list[dict[str, Any]]:
        """Fire what is due; the events sent. A failed read or send is logged and retried later."""
        try:
            found = self.due(self.clock() if now_ms is None else now_ms)
        except Exception as exc:  # the table may not exist yet, or moto may be restarting
            log.warning("cannot read the schedules: %s", exc)
            return []
        sent = []
        for schedule, at in found:
            event = schedules.firing_event(schedule.queue, schedule.name, schedules.iso(at))
            try:
                self.fire(event)
            except Exception as exc:  # not marked handled: the next tick sends it again, as Scheduler retries
                log.warning("firing %s/%s at %s failed: %s", schedule.queue, schedule.name,
                            event["scheduled_time"], exc)
                continue
            self.last[schedule.queue, schedule.name] = at
            sent.append(event)
        return sent
