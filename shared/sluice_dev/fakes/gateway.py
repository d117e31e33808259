"""In-memory fakes of the gateway's own ports: Idempotency-Keys' store (``sluice.gateway.keyed.KeyStore``),
the schedules' store and trigger (``sluice.gateway.schedules.ScheduleStore``, ``Trigger``) and the
callers' buckets (``sluice.core.ports.CallerThrottle``).

The gateway's job queue is ``sluice_dev.fakes.FakeQueue``, the one every caller of ``ports.JobQueue`` uses.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from sluice.core import schedules, throttle
from sluice.core.errors import ScheduleExists, ScheduleNotFound
from sluice.core.idempotency import KeyRecord, Stored


class FakeKeyStore:
    """``sluice.gateway.keyed.KeyStore`` on a dict: take, claim and release as the table does them.
    ``writes`` counts the writes a real table would bill (take, claim, release)."""

    def __init__(self) -> None:
        self.records: dict[str, tuple[KeyRecord | Stored, int]] = {}  # key -> (record, expires_at_s)
        self.lock = threading.Lock()
        self.keys_seen: list[str] = []
        self.writes = 0

    def take(self, key: str, record: KeyRecord, *, expires_at_s: int,
             now_ms: int) -> KeyRecord | Stored | None:
        with self.lock:
            self.keys_seen.append(key)
            found = self.records.get(key)
            if found is not None and found[1] >= now_ms // 1000 and not _overdue(found[0], now_ms):
                return found[0]
            self.writes += 1
            self.records[key] = (record, expires_at_s)
            return None

    def claim(self, key: str, record: KeyRecord) -> bool:
        with self.lock:
            found = self.records.get(key)
            if found is None or not _same(found[0], record):
                return False
            self.writes += 1
            self.records[key] = (dataclasses.replace(record, claimed=True), found[1])
            return True

    def release(self, key: str, record: KeyRecord) -> bool:
        with self.lock:
            found = self.records.get(key)
            held = None if found is None else found[0]
            if not isinstance(held, KeyRecord) or not _same(held, record) or held.claimed:
                return False
            self.writes += 1
            del self.records[key]
            return True


def _same(found: KeyRecord | Stored, record: KeyRecord) -> bool:
    return isinstance(found, KeyRecord) and found.accepted_at_ms == record.accepted_at_ms \
        and found.seed == record.seed


def _overdue(found: KeyRecord | Stored, now_ms: int) -> bool:
    """A record of before in progress past its deadline, which ``take`` overwrites."""
    return isinstance(found, Stored) and found.response is None and found.in_progress_until_ms is not None \
        and found.in_progress_until_ms < now_ms


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
    from sluice.gateway import schedules as gateway_schedules
    from sluice.gateway.keyed import KeyStore
    from sluice.registrar import schedules as registrar_schedules

    _IDEMPOTENCY: KeyStore = FakeKeyStore()
    _SCHEDULE_STORE: gateway_schedules.ScheduleStore = FakeScheduleStore()
    _TRIGGER: gateway_schedules.Trigger = FakeTrigger()
    _DECLARED_STORE: registrar_schedules.DeclaredScheduleStore = FakeScheduleStore()
    from sluice.core import ports

    _CALLER_THROTTLE: ports.CallerThrottle = FakeCallerThrottle(lambda: 0)
