"""What a handler gets besides its job: identity, token, lease state and a bound logger."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import ValidationError

from sluice.core.bus import EventBus
from sluice.core.errors import ConfigError, InvalidInput, PayloadTooLarge, SluiceError, TooManyChildren
from sluice.core.families import (
    MAX_CHILDREN,
    MAX_REQUEST_BYTES,
    ChildRequest,
    FamilyAccepted,
    FamilyGateway,
    FamilyRequest,
    FamilyStore,
    ThenRequest,
)
from sluice.core.lazy import Lazy, resolve
from sluice.core.models import JobRecord, describe_validation
from sluice.worker.runtime.telemetry import JobLogger

if TYPE_CHECKING:
    from sluice.worker.runtime.http import FencedHttp

T = TypeVar("T")
FencedTableFactory = Callable[[str, str, int], Any]  # (table name, job id, fencing token) -> FencedTable


@dataclass
class LeaseState:
    """The lease as the runtime last saw it; the heartbeat thread updates it.

    The events are shared by the heartbeat thread (which sets them) and the handler
    (which may poll or wait on them).
    """

    deadline_ms: int
    expires_at: float  # time.monotonic() by which the lease lapses unless renewed
    lease_lost: threading.Event = field(default_factory=threading.Event)
    cancel_requested: threading.Event = field(default_factory=threading.Event)


@dataclass(eq=False)
class JobContext:
    """Passed to every handler next to the ``Job``.

    ``token`` is the fencing token granted by the jobs table: the one to hand to any
    service that can check it. ``lease_lost`` is set when the runtime learns another
    worker may hold the job (or the job hit its hard timeout); from then on nothing
    this handler returns is written, so a cooperative handler stops early.
    """

    job_id: str
    queue: str
    attempt: int
    max_attempts: int
    token: int
    lease_token: int  # the Redis lease token: liveness only, never a fencing token
    worker_id: str
    logger: JobLogger
    timeout_at: float  # time.monotonic() of the hard timeout
    _lease: LeaseState
    _fenced: FencedTableFactory | None = None
    _tables: dict[str, Any] = field(default_factory=dict)
    _progress: Any = None  # a runtime.progress.Progress, if the store records progress

    def progress(self, fraction: float, detail: str = "") -> None:
        """Record how far the job is (``fraction`` in [0, 1], a short ``detail``), fenced on this
        job's token and written at most once a second; see ``sluice.worker.runtime.progress``."""
        if self._progress is None:
            raise SluiceError("this worker's store records no progress")
        self._progress.report(fraction, detail)
    _family_gateway: FamilyGateway | None = None  # the gateway's family entry (sluice.core.families)
    _families: FamilyStore | Lazy[FamilyStore] | None = None  # the jobs table's families, for children()
    _clock: Callable[[], float] = time.monotonic  # the clock ``timeout_at`` is on
    _events: EventBus | None = None  # the drain's bus: ctx.http reports each call there (FencedCall)
    _http: FencedHttp | None = None
    _trace: Callable[[], str | None] | None = None  # the handler span's traceparent (runtime.execute)

    @property
    def traceparent(self) -> str | None:
        """Where this attempt is in its job's trace, as a W3C ``traceparent``: its handler span where
        the worker traces (``Settings.traces``), else the context its job came with; None for an
        untraced job. Send it to the services the handler calls (the ``traceparent`` header); the
        children it starts carry it, so a family is one trace (docs/worker.md, Traces)."""
        return None if self._trace is None else self._trace()

    @property
    def lease_lost(self) -> threading.Event:
        return self._lease.lease_lost

    @property
    def cancel_requested(self) -> threading.Event:
        return self._lease.cancel_requested

    @property
    def lease_deadline_ms(self) -> int:
        """The lease's current deadline (epoch ms, Redis time); moves on every heartbeat."""
        return self._lease.deadline_ms

    def time_left_s(self) -> float:
        """Seconds until the hard timeout."""
        return max(0.0, self.timeout_at - self._clock())

    def should_stop(self) -> bool:
        return self.lease_lost.is_set() or self.cancel_requested.is_set()

    def fenced_table(self, name: str) -> Any:
        """A ``sluice.backends.dynamodb.fenced.FencedTable`` on ``name`` whose writes carry this job's token.

        One per table and attempt, so that sending a write again after ``BackendUnavailable``
        is recognised as a retry (same request token) however the handler gets the table."""
        if self._fenced is None:
            raise SluiceError("this worker's store offers no fenced tables")
        table = self._tables.get(name)
        if table is None:
            table = self._tables[name] = self._fenced(name, self.job_id, self.token)
        return table

    @property
    def http(self) -> FencedHttp:
        """This attempt's HTTP calls (``sluice.worker.runtime.http.FencedHttp``): each carries the
        job id and this token, so a service running the fence middleware (``sluice_fence``)
        refuses them once the token is stale (``StaleToken``), as a fenced table does."""
        if self._http is None:
            from sluice.worker.runtime.http import FencedHttp  # urllib3 only for handlers that call

            self._http = FencedHttp(self.job_id, self.token, self._events or EventBus(), self._trace)
        return self._http

    # -- jobs that start jobs (sluice.core.families, docs/flows.md) ------------------------------------

    def enqueue(self, queue: str, payload: Any, *, key: str, **options: Any) -> str:
        """Start a child job on ``queue``; returns its id. ``key`` names it among this job's
        children: a re-run of this job (same key) gets the same child, never a second one.
        ``options``: ``delay_seconds``, ``priority``, ``max_attempts``, ``lease_seconds``."""
        return self.enqueue_many([{"queue": queue, "payload": payload, "key": key, **options}]).job_ids[0]

    def enqueue_many(self, jobs: Sequence[Mapping[str, Any] | tuple[Any, ...]], *,
                     then: Mapping[str, Any] | tuple[Any, ...] | None = None) -> FamilyAccepted:
        """Start children (each ``(queue, payload, key)`` or a dict with those and enqueue options)
        and, with ``then=(queue, payload)`` (or ``(queue, payload, key)``, or a dict), a
        continuation that runs once after every one of them has ended, whatever its state."""
        if self._family_gateway is None:
            raise ConfigError("this worker cannot start jobs: no internal function is configured "
                              "(SLUICE_INTERNAL_FUNCTION_NAME)")
        try:
            request = FamilyRequest(parent_id=self.job_id, token=self.token,
                                    jobs=[ChildRequest.model_validate(_fields(j, ("queue", "payload", "key")))
                                          for j in jobs],
                                    then=None if then is None else ThenRequest.model_validate(
                                        _fields(then, ("queue", "payload", "key"))),
                                    traceparent=self.traceparent)
        except ValidationError as exc:
            raise InvalidInput(f"invalid children ({describe_validation(exc)})") from None
        if len(request.jobs) > MAX_CHILDREN:  # the gateway refuses it too; say so before sending it
            raise TooManyChildren(f"{len(request.jobs)} children in one request; a job may start at most "
                                  f"{MAX_CHILDREN}", limit=MAX_CHILDREN)
        size = len(request.model_dump_json())
        if size > MAX_REQUEST_BYTES:
            raise PayloadTooLarge(f"these children are {size} bytes as JSON; one request carries at most "
                                  f"{MAX_REQUEST_BYTES} (a synchronous Lambda invoke's limit): split them "
                                  "over several enqueue_many calls, with distinct keys")
        return self._family_gateway.enqueue_children(request)

    def children(self) -> list[JobRecord]:
        """On a continuation: the final records (state, result, error) of the children it ran after."""
        if self._families is None:
            raise ConfigError("this worker's store keeps no families")
        families = resolve(self._families)
        family = families.family(self.job_id)
        found = families.get_jobs(list(family.waits_for))
        return [found[j] for j in family.waits_for if j in found]

    # -- awaitable forms, for ``async def`` handlers (runtime.aio) ------------------------------------
    # The ports are synchronous (boto3, redis-py; no async adapters), so each runs its sync form on
    # the loop's default thread executor: the loop, and the handler's other coroutines, go on
    # meanwhile.

    async def aprogress(self, fraction: float, detail: str = "") -> None:
        """``progress``, awaitable."""
        await _off_loop(lambda: self.progress(fraction, detail))

    async def aenqueue(self, queue: str, payload: Any, *, key: str, **options: Any) -> str:
        """``enqueue``, awaitable."""
        return await _off_loop(lambda: self.enqueue(queue, payload, key=key, **options))

    async def aenqueue_many(self, jobs: Sequence[Mapping[str, Any] | tuple[Any, ...]], *,
                            then: Mapping[str, Any] | tuple[Any, ...] | None = None) -> FamilyAccepted:
        """``enqueue_many``, awaitable."""
        return await _off_loop(lambda: self.enqueue_many(jobs, then=then))

    async def achildren(self) -> list[JobRecord]:
        """``children``, awaitable."""
        return await _off_loop(self.children)


async def _off_loop(call: Callable[[], T]) -> T:
    """``call()`` on the running loop's default thread executor, awaited."""
    import asyncio  # only an async handler gets here (runtime.aio): a sync worker never imports it

    return await asyncio.to_thread(call)


def _fields(value: Mapping[str, Any] | tuple[Any, ...], names: tuple[str, ...]) -> dict[str, Any]:
    if isinstance(value, tuple):
        if not 2 <= len(value) <= len(names):
            raise InvalidInput(f"expected ({', '.join(names)}), got {len(value)} items")
        return dict(zip(names, value, strict=False))
    return dict(value)
