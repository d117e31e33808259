"""A keyed enqueue: at most one set of jobs per Idempotency-Key, for one write of its record.

The promises (docs/api.md, "Idempotency-Key"): the same key with the same request answers the first
request's jobs (200, ``Idempotent-Replayed``); with a different request, 422. Why one write is enough,
and why a repeat appends again, is ``sluice.core.idempotency``'s docstring; the store is a ``KeyStore``
(``sluice.backends.dynamodb.idempotency``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from sluice.core import ids
from sluice.core.bus import EventBus, KeyedJobsNamed
from sluice.core.errors import IdempotencyConflict, InProgress
from sluice.core.idempotency import SEED_BYTES, KeyRecord, Stored, entropy, fingerprint, must_claim
from sluice.core.lazy import Lazy, resolve
from sluice.core.models import JobSpec
from sluice.gateway.pipeline import EnqueuePipeline

log = logging.getLogger(__name__)

DEFAULT_REMAINING_MS: Final = 30_000  # the writer's deadline when no Lambda context gives one
RECORD_LIFE_S: Final = 24 * 3600
TAKES: Final = 2  # a record released under a repeat's feet is taken afresh once


class KeyStore(Protocol):
    """Where Idempotency-Keys' records live. Every method raises ``BackendUnavailable`` (or another
    ``SluiceError``) when the store cannot answer."""

    def take(self, key: str, record: KeyRecord, *, expires_at_s: int,
             now_ms: int) -> KeyRecord | Stored | None:
        """Write ``record`` for ``key`` unless a live record is there: None when written, else the
        live one (a record of before: ``Stored``). Expired records count as absent."""
        ...

    def claim(self, key: str, record: KeyRecord) -> bool:
        """Mark ``record`` claimed; False when ``key`` no longer holds it (its writer released it)."""
        ...

    def release(self, key: str, record: KeyRecord) -> bool:
        """Delete ``record`` unless a repeat claimed it; False when claimed (or no longer there)."""
        ...


@dataclass(frozen=True, slots=True)
class KeyedRequest:
    """One keyed enqueue as the use case hands it over: ``body``, its JSON with defaults applied;
    ``admit``, the queue's caps (run for a first request only); ``build(at_ms, job_id_of)``, its
    records accepted at ``at_ms``, the ``i``-th job named ``job_id_of(i)``."""

    key: str
    op: str
    queue: str
    body: Mapping[str, Any]
    admit: Callable[[], None]
    build: Callable[[int, Callable[[int], str]], list[JobSpec]]


class Once:
    """Runs keyed enqueues over ``store`` (held lazily: built on the first keyed request)."""

    def __init__(self, store: KeyStore | Lazy[KeyStore], pipeline: EnqueuePipeline,
                 withdraw: Callable[[Sequence[JobSpec]], None], clock: Callable[[], int],
                 events: EventBus | None = None) -> None:
        self._store, self.pipeline, self.withdraw, self.clock = store, pipeline, withdraw, clock
        self.events = events

    @property
    def store(self) -> KeyStore:
        return resolve(self._store)

    def run(self, request: KeyedRequest,
            remaining_ms: Callable[[], int] | None = None) -> tuple[list[JobSpec] | dict[str, Any], bool]:
        """(the jobs, replayed); a record of before answers its stored body instead of jobs."""
        digest = fingerprint(request.op, request.queue, request.body)
        for _ in range(TAKES):
            now = self.clock()
            # One read of the key: the record names it, and the ids are minted with it, even if the
            # verifier reads the keys again (a rotation) in between.
            key = self.pipeline.verifier.key
            mine = KeyRecord(digest, now, ids.key_id(key), os.urandom(SEED_BYTES).hex(),
                             now + (remaining_ms or _default_remaining)())
            found = self.store.take(request.key, mine, expires_at_s=now // 1000 + RECORD_LIFE_S, now_ms=now)
            if found is None:
                return self._first(request, mine, key), False
            if isinstance(found, Stored):
                return _stored(found, digest), True
            if found.fingerprint != digest:
                raise _conflict()
            if must_claim(found, now) and not self.store.claim(request.key, found):
                continue  # its writer's append failed and it let the key go: this request is a first one
            return self._again(request, found), True
        raise InProgress("the first request with this Idempotency-Key is still ending; retry shortly")

    def _first(self, request: KeyedRequest, mine: KeyRecord, key: bytes) -> list[JobSpec]:
        try:
            request.admit()
            specs = request.build(mine.accepted_at_ms, self._naming(request.queue, mine, key))
        except BaseException:
            self._release(request.key, mine)  # nothing appended: the key is free again
            raise
        try:
            self._append(request.queue, specs, repeat=False)
        except BaseException:
            # The outcome is unknown. Withdraw only a record nobody else took over: a repeat that
            # claimed it answered 200 for these ids.
            if self._release(request.key, mine):
                self.withdraw(specs)
            raise
        return specs

    def _again(self, request: KeyedRequest, found: KeyRecord) -> list[JobSpec]:
        keys = self.pipeline.verifier.keys_for(found.key_id)
        if not keys:
            raise IdempotencyConflict("this Idempotency-Key's jobs were named with a job id key retired "
                                      "since; send the request with a new key")
        specs = request.build(found.accepted_at_ms, self._naming(request.queue, found, keys[0]))
        # Its writer may have died before its registry reservation or its append: do both again (a
        # 202 is binding; the relay and Redis keep one job per id).
        self.pipeline.reserve(request.queue)
        self._append(request.queue, specs, repeat=True)
        return specs

    def _append(self, queue: str, specs: Sequence[JobSpec], *, repeat: bool) -> None:
        if self.events is not None and self.events.listening:
            self.events.emit(KeyedJobsNamed(queue=queue, jobs=tuple(s.job_id for s in specs), repeat=repeat))
        self.pipeline.append(specs)

    def _release(self, key: str, mine: KeyRecord) -> bool:
        try:
            return self.store.release(key, mine)
        except Exception as exc:  # never mask the request's own error
            log.error("could not release Idempotency-Key record %s: %r; its jobs stay live", key, exc)
            return False

    @staticmethod
    def _naming(queue: str, record: KeyRecord, key: bytes) -> Callable[[int], str]:
        return lambda i: ids.mint(record.accepted_at_ms, queue, key, entropy(record.seed, i))


def _default_remaining() -> int:
    return DEFAULT_REMAINING_MS


def _stored(found: Stored, digest: str) -> dict[str, Any]:
    if found.fingerprint is not None and found.fingerprint != digest:
        raise _conflict()
    if found.response is None:
        raise InProgress("a request with this Idempotency-Key is still in progress; retry shortly")
    return found.response


def _conflict() -> IdempotencyConflict:
    return IdempotencyConflict("this Idempotency-Key was already used with a different request")
