"""Keyed enqueues under chaos (issue 33): the workload sends each batch with an Idempotency-Key, and its
gateway dies now and then between the key's record and the append, or after the append.

A Lambda that dies runs nothing after the moment it dies: its key's record stays, and nothing withdraws
its jobs. The workload's gateway (an in-process use case) is made to die so, at seeded batches, by two
wrappers around its own adapters: ``DyingLog`` raises ``GatewayDied`` instead of appending (``before``)
or once Kafka acknowledged (``after``), and ``HeldRelease`` refuses the release that the use case then
tries, as a dead process would never make it. The workload retries with the same key, as a client
whose answer never came: the repeat must name the same jobs, append what the dead one did not, and
the checker must find each job run, none lost, none unexpected.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Sequence
from typing import Any

from sluice.core.errors import BackendUnavailable
from sluice.core.idempotency import KeyRecord, Stored
from sluice.core.models import JobSpec
from sluice_dev.chaos.history import History

DEATH_SHARE = 0.15  # of the batches whose first attempt dies, half before the append, half after
KIND = "gateway_death"


class GatewayDied(Exception):
    """The workload's gateway died here (``before`` or ``after`` its append)."""


class Deaths:
    """Which batches' first attempts die, and how: seeded, so a run replays."""

    def __init__(self, seed: int, history: History) -> None:
        self.rng = random.Random(f"gateway-deaths:{seed}")
        self.history = history
        self.armed: str | None = None  # "before" / "after": the next append dies so
        self.dead = threading.Event()  # set from the death until the release it refuses
        self.count = 0

    def arm(self, batch: int) -> None:
        """Called before a batch's first attempt."""
        self.armed = None
        if self.rng.random() < DEATH_SHARE:
            self.armed = self.rng.choice(("before", "after"))
            self.history.emit("fault", kind=KIND, target="gateway", phase="injected", batch=batch,
                              when=self.armed)

    def disarm(self) -> None:
        self.armed = None


class DyingLog:
    """``ports.JobLog`` of the workload's gateway: Kafka's, or a death when ``deaths`` is armed."""

    def __init__(self, inner: Any, deaths: Deaths) -> None:
        self.inner, self.deaths = inner, deaths

    def append(self, specs: Sequence[JobSpec]) -> None:
        when, self.deaths.armed = self.deaths.armed, None
        if when == "after":
            self.inner.append(specs)
        if when is not None:
            self.deaths.count += 1
            self.deaths.dead.set()
            self.deaths.history.emit("fault", kind=KIND, target="gateway", phase="landed", when=when,
                                     jobs=[s.job_id for s in specs])
            raise GatewayDied(f"the gateway died {when} its append")
        self.inner.append(specs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class HeldRelease:
    """``gateway.keyed.KeyStore`` of the workload's gateway: the real one, save the release a dead
    gateway would never have made."""

    def __init__(self, inner: Any, deaths: Deaths) -> None:
        self.inner, self.deaths = inner, deaths

    def take(self, key: str, record: KeyRecord, *, expires_at_s: int,
             now_ms: int) -> KeyRecord | Stored | None:
        found: KeyRecord | Stored | None = self.inner.take(key, record, expires_at_s=expires_at_s,
                                                           now_ms=now_ms)
        return found

    def claim(self, key: str, record: KeyRecord) -> bool:
        claimed: bool = self.inner.claim(key, record)
        return claimed

    def release(self, key: str, record: KeyRecord) -> bool:
        if self.deaths.dead.is_set():
            self.deaths.dead.clear()
            raise BackendUnavailable("the gateway is dead: it releases nothing")
        released: bool = self.inner.release(key, record)
        return released
