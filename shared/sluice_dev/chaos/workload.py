"""The chaos workload: N unique jobs, enqueued through the gateway's use case at a steady pace.

Payloads are a function of (seed, index), and a job's correct result a function of its
payload (``agents.expected_result``), so the checker knows every right answer. Job ids
are chosen here too (``s<seed>-<index>-<try>``), through the use case's id hook, so an
enqueue that fails with an unknown outcome (Kafka did not answer) is still named in
the history: if that job runs after all, its result is not "unexpected".

Keyed (``keyed``, issue 33): each batch goes with an Idempotency-Key and its ids are the gateway's,
named from the key's record; the use case says them on its bus before each append
(``KeyedJobsNamed``), which names them here when the answer never comes. A failed attempt is sent
again with the same key, and ``chaos.keyed`` makes the gateway die at seeded batches.
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from sluice.core.errors import SluiceError
from sluice_dev.chaos import families
from sluice_dev.chaos.agents import QUEUE, expected_result
from sluice_dev.chaos.history import History, digest
from sluice_dev.chaos.keyed import Deaths, GatewayDied

MAX_ATTEMPTS = 25  # generous: every kill, freeze and lost lease costs the job an attempt
POISON_SHARE = 0.03  # with the operator on: jobs whose handler fails them (Fail), for it to redrive
RECENT = 40  # the latest accepted jobs the operator picks its cancels from


def payload(seed: int, i: int, poison: bool = False, family: bool = False,
            lease_seconds: int = 30) -> dict[str, Any]:
    """``poison``: a seeded few jobs fail permanently in the handler (``chaos.app``), so that
    the operator has dead-lettered jobs to list, redrive and purge. ``family``: every
    ``families.FAMILY_EVERY``-th job starts children and a continuation (``chaos.families``)."""
    rng = random.Random(f"{seed}:{i}")
    p: dict[str, Any] = {"i": i, "data": f"{rng.getrandbits(64):016x}", "work_ms": rng.randint(0, 30)}
    if poison and rng.random() < POISON_SHARE:
        p["poison"] = True
    elif family and families.is_parent(i):
        p.update(family=families.FAMILY_CHILDREN, lease_seconds=lease_seconds, max_attempts=MAX_ATTEMPTS)
    return p


def job_id(seed: int, i: int, attempt: int) -> str:
    return f"s{seed}-{i:06d}-{attempt}"


class Enqueuer:
    """Enqueues ``jobs`` jobs spread evenly over ``window_s`` seconds, in small batches."""

    def __init__(self, api: Any, history: History, seed: int, jobs: int, window_s: float, *,
                 batch: int = 10, lease_seconds: int = 30, poison: bool = False,
                 mint_key: bytes | None = None, family_key: bytes | None = None,
                 clock: Callable[[], float] = time.monotonic, keyed: bool = False,
                 deaths: Deaths | None = None) -> None:
        self.api, self.history, self.seed, self.jobs = api, history, seed, jobs
        self.poison, self.mint_key = poison, mint_key
        self.family_key = family_key  # with it, families: their parents' ids are minted with it
        self._recent: deque[str] = deque(maxlen=RECENT)  # accepted ids, newest last
        self._recent_lock = threading.Lock()
        self.window_s, self.batch, self.lease_seconds = window_s, batch, lease_seconds
        self.clock = clock
        self.accepted = 0
        self.unknown = 0
        self.done = threading.Event()
        self._ids: deque[str] = deque()
        self.keyed, self.deaths = keyed, deaths
        self._named: list[str] = []  # the keyed ids the gateway named during the current attempt
        self.use(api)

    def use(self, api: Any) -> None:
        """Enqueue through ``api`` from the next batch on: after a key rotation, a gateway holding the
        new key, which seals each record with the key it mints with (``chaos.runner``)."""
        api.new_id = lambda _now_ms: self._ids.popleft()  # the use case's id hook
        if self.keyed:
            from sluice.core.bus import KeyedJobsNamed

            api.events.subscribe(lambda e: self._named.extend(e.jobs), KeyedJobsNamed)
        self.api = api

    def _name(self, indices: list[int], attempt: int) -> list[str]:
        """``s<seed>-<index>-<try>``; or, with ``mint_key``, ids minted as the gateway mints them
        (``sluice.core.ids``), so that a cancel before the relay recorded the job takes the gateway's
        real path for its own ids (``Api.cancel`` -> ``cancel_unrecorded``), and the relay checks
        every record's id and seal as in production (the chaos run always passes it, issue 27)."""
        from sluice.core import ids
        from sluice.core.clock import wall_ms

        now_ms = wall_ms()
        if self.mint_key is not None:
            return [ids.mint(now_ms, QUEUE, self.mint_key) for _ in indices]
        # A parent's id must be one the gateway issued: it checks that before starting children.
        return [ids.mint(now_ms, QUEUE, self.family_key) if self.family_key is not None and
                families.is_parent(i) else job_id(self.seed, i, attempt) for i in indices]

    def recent(self) -> list[str]:
        """The latest accepted job ids, newest last (the operator's cancel candidates)."""
        with self._recent_lock:
            return list(self._recent)

    def run(self, stop: threading.Event) -> None:
        started = self.clock()
        try:
            for first in range(0, self.jobs, self.batch):
                due = started + self.window_s * first / self.jobs
                if stop.wait(max(0.0, due - self.clock())):
                    return
                self._enqueue(list(range(first, min(first + self.batch, self.jobs))), stop)
        finally:
            self.done.set()

    def _request(self, indices: list[int]) -> tuple[Any, list[dict[str, Any]]]:
        from sluice.core.wire import BatchRequest, EnqueueRequest

        payloads = [payload(self.seed, i, self.poison, self.family_key is not None, self.lease_seconds)
                    for i in indices]
        jobs = [EnqueueRequest(payload=p, max_attempts=MAX_ATTEMPTS, lease_seconds=self.lease_seconds)
                for p in payloads]
        return BatchRequest(jobs=jobs), payloads

    def _enqueue_keyed(self, indices: list[int], stop: threading.Event) -> None:
        request, payloads = self._request(indices)
        key = f"chaos-{self.seed}-{indices[0]}"
        if self.deaths is not None:
            self.deaths.arm(indices[0])
        while not stop.is_set():
            self._named.clear()
            t0 = time.time()
            try:
                answer = self.api.enqueue_batch(QUEUE, request, idempotency_key=key)
                ids, outcome = [j.job_id for j in answer.body.jobs], "ok"
            except (SluiceError, GatewayDied):  # no answer: the ids named, if any, may run
                ids, outcome = list(self._named), "info"
            if self.deaths is not None:
                self.deaths.disarm()
            # a death before the record names no ids: zip stops at them
            if self._record(indices, ids, payloads, outcome, t0, key=key):
                return
            stop.wait(0.5)  # the same request with the same key, once the fault is over

    def _record(self, indices: list[int], ids: list[str], payloads: list[dict[str, Any]], outcome: str,
                t0: float, **extra: Any) -> bool:
        """The attempt's enqueue lines, and its counts; True if it was answered (``ok``)."""
        t1 = time.time()
        for i, jid, p in zip(indices, ids, payloads, strict=False):
            self.history.emit("enqueue", job=jid, i=i, expect=digest(expected_result(p)), outcome=outcome,
                              t0=t0, t1=t1, **extra)
        if outcome != "ok":
            self.unknown += len(ids)
            return False
        self.accepted += len(ids)
        with self._recent_lock:
            self._recent.extend(ids)
        return True

    def _enqueue(self, indices: list[int], stop: threading.Event) -> None:
        if self.keyed:
            self._enqueue_keyed(indices, stop)
            return
        attempt = 0
        while not stop.is_set():
            ids = self._name(indices, attempt)
            request, payloads = self._request(indices)
            self._ids.clear()
            self._ids.extend(ids)
            t0 = time.time()
            try:
                self.api.enqueue_batch(QUEUE, request)
                outcome = "ok"
            except SluiceError:  # Kafka did not acknowledge: the records may or may not be there
                outcome = "info"
            if self._record(indices, ids, payloads, outcome, t0):
                return
            attempt += 1
            stop.wait(0.5)  # the same payloads again, as new jobs, once Kafka is back
