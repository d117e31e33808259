"""In-memory fakes of the gateway's own ports: the idempotency store (``sluice.gateway.api.Idempotency``)
the schedules' store and trigger (``sluice.gateway.schedules.ScheduleStore``, ``Trigger``) and the
callers' buckets (``sluice.core.ports.CallerThrottle``).

The gateway's job queue is ``sluice_dev.fakes.FakeQueue``, the one every caller of ``ports.JobQueue`` uses.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from sluice.core import schedules, throttle
from sluice.core.errors import IdempotencyConflict, InProgress, ScheduleExists, ScheduleNotFound


class FakeIdempotency:
    """The three promised semantics, on a dict: replay, conflict, in progress."""

    def __init__(self) -> None:
        self.records: dict[str, tuple[str, dict[str, Any] | None]] = {}
        self.lock = threading.Lock()
        self.keys_seen: list[str] = []

    def run(self, key: str, fingerprint: Mapping[str, Any], action: Callable[[], dict[str, Any]],
            remaining_ms: Callable[[], int] | None = None) -> tuple[dict[str, Any], bool]:
        digest = json.dumps(fingerprint, sort_keys=True)
        with self.lock:
            self.keys_seen.append(key)
            if key in self.records:
                stored, result = self.records[key]
                if stored != digest:
                    raise IdempotencyConflict("different request")
                if result is None:
                    raise InProgress("in progress")
                return copy.deepcopy(result), True
            self.records[key] = (digest, None)
        try:
            result = action()
        except BaseException:
            with self.lock:
                del self.records[key]
            raise
        with self.lock:
            self.records[key] = (digest, result)
        return result, False


class FakeScheduleStore:
    def __init__(self) -> None:
        self.items: dict[tuple[str, str], schedules.Schedule] = {}
        self.writes = 0

    def create(self, schedule: schedules.Schedule) -> None:
        if (schedule.queue, schedule.name) in self.items:
            raise ScheduleExists(name=schedule.name, queue=schedule.queue)
        self.writes += 1
        self.items[schedule.queue, schedule.name] = schedule

    def get(self, queue: str, name: str) -> schedules.Schedule:
        if (queue, name) not in self.items:
            raise ScheduleNotFound(name=name, queue=queue)
        return self.items[queue, name]

    def all(self, queue: str) -> list[schedules.Schedule]:
        return [s for (q, _), s in self.items.items() if q == queue]

    def set_paused(self, queue: str, name: str, paused: bool) -> schedules.Schedule:
        found = self.get(queue, name)
        self.writes += 1
        self.items[queue, name] = dataclasses.replace(found, paused=paused)
        return self.items[queue, name]

    def delete(self, queue: str, name: str) -> None:
        self.get(queue, name)
        self.writes += 1
        del self.items[queue, name]

    def owned(self, owner: str) -> list[schedules.Schedule]:
        return [s for s in self.items.values() if s.owner == owner]

    def find(self, queue: str, name: str) -> schedules.Schedule | None:
        return self.items.get((queue, name))

    def replace(self, schedule: schedules.Schedule) -> None:
        found = self.items.get((schedule.queue, schedule.name))
        if found is None or found.owner != schedule.owner:
            raise ScheduleNotFound(name=schedule.name, queue=schedule.queue)
        self.writes += 1
        self.items[schedule.queue, schedule.name] = schedule


class FakeTrigger:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.fail: Exception | None = None

    def create(self, schedule: schedules.Schedule) -> None:
        if self.fail is not None:
            raise self.fail
        self.calls.append(("create", schedule.name))

    def set_paused(self, schedule: schedules.Schedule) -> None:
        self.calls.append(("pause" if schedule.paused else "resume", schedule.name))

    def delete(self, queue: str, name: str) -> None:
        self.calls.append(("delete", name))


class FakeCallerThrottle:
    """The callers' shared buckets (``ports.CallerThrottle``) in a dict, on a clock the test moves:
    ``sluice.core.throttle.take``, the arithmetic ``throttle.lua`` runs. ``fail``: raised instead."""

    def __init__(self, clock: Callable[[], int]) -> None:
        self.clock = clock
        self.state: dict[str, throttle.Buckets | None] = {}
        self.calls: list[tuple[str, int]] = []  # (identity, size) per take
        self.fail: Exception | None = None

    def take(self, identity: str, limit: throttle.CallerLimit, size: int) -> throttle.Verdict:
        if self.fail is not None:
            raise self.fail
        self.calls.append((identity, size))
        verdict, self.state[identity] = throttle.take(self.state.get(identity), self.clock(), limit, size)
        return verdict


if TYPE_CHECKING:  # each fake is its port's: mypy --strict checks these, nothing runs them
    from sluice.gateway import api
    from sluice.gateway import schedules as gateway_schedules
    from sluice.registrar import schedules as registrar_schedules

    _IDEMPOTENCY: api.Idempotency = FakeIdempotency()
    _SCHEDULE_STORE: gateway_schedules.ScheduleStore = FakeScheduleStore()
    _TRIGGER: gateway_schedules.Trigger = FakeTrigger()
    _DECLARED_STORE: registrar_schedules.DeclaredScheduleStore = FakeScheduleStore()
    from sluice.core import ports

    _CALLER_THROTTLE: ports.CallerThrottle = FakeCallerThrottle(lambda: 0)
