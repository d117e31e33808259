"""The one enqueue pipeline: every job the gateway writes passes through it.

A caller's enqueue (``sluice.gateway.api.Api``), a job's children and continuation
(``sluice.gateway.families``) and a schedule's firing (``sluice.gateway.schedules``) all take
the same steps, in this order, and nothing is written before the last:

1. ``check``: the queue's name (malformed or reserved), the payload's size, the priority the
   caller (``sluice.core.caller.Caller``, verified by its entry) may use, the route (a queue no
   deployed worker handles) and the queue's payload schema;
2. ``admit``: whether the queue takes more jobs now (``sluice.gateway.admission``), and its
   reservation in the registry (``sluice.gateway.registry``: QueueNotAllowed for a new queue
   the registry has no room for), so the relay never refuses what the gateway answered 202;
3. ``spec``: the record, with a minted id (``mint``) or one the use case derived; a payload above
   ``Intake.inline_max_bytes`` is written to the payload store now and the record carries its
   pointer (``sluice.core.payloads``), so Kafka and Redis hold mostly small entries;
4. ``append``: to Kafka. What a failed append means is the use case's: an enqueue withdraws
   its jobs, a child's or a firing's id is its own for good and the caller's retry appends again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from sluice.core import ids, payloads, seal
from sluice.core.caller import Caller
from sluice.core.clock import wall_ms
from sluice.core.errors import NoRoute, PayloadInvalid, PayloadTooLarge, PriorityNotAllowed, SluiceError
from sluice.core.lazy import Lazy, resolve
from sluice.core.limits import Limits
from sluice.core.models import MAX_ATTEMPTS_UNSET, PAYLOAD_CHECKED, JobSpec, dump_json, validate_public_queue
from sluice.core.ports import JobLog, ParkedState, PayloadStore
from sluice.core.routes import Route, RouteCache, RouteTable, payload_errors, unrouted_refused
from sluice.core.wire import EnqueueRequest

log = logging.getLogger("sluice.gateway.api")

# Default Kafka retention: an unrelayed record older than this is gone from the log.
DEFAULT_ID_HORIZON_MS: Final = 7 * 24 * 3600 * 1000
KEY_REFRESH_MS = 60_000  # at most one re-read of the job id keys a minute (ids.Verifier)
ENQUEUED_NOTHING = "; nothing was enqueued"  # what an enqueue refused at its checks left undone


class Admission(Protocol):
    """Refuses jobs a queue may not take now (``sluice.gateway.admission``: QueueFull, QueueNotAllowed)."""

    def check(self, queue: str, jobs: int, delayed: int) -> None: ...


class Reservation(Protocol):
    """Reserves a queue in the registry before its first 202 (``sluice.gateway.registry``:
    QueueNotAllowed, BackendUnavailable); idempotent, and cached per container."""

    def reserve(self, queue: str) -> None: ...
    def parked(self) -> dict[str, ParkedState] | None:
        """Every queue of the durable registry with its parking state (the operator's listing);
        None when there is none (Redis's registry is all)."""
        ...

    def parked_of(self, queue: str) -> ParkedState: ...
    def sensitive_of(self, queue: str) -> tuple[str, ...]: ...
    def set_sensitive(self, queue: str, fields: Sequence[str]) -> None: ...


@dataclass(frozen=True, slots=True)
class IdMinting:
    """The job id keys (``sluice.core.ids``): mint with ``key``, verify with it and ``previous``.

    ``refresh`` re-reads both (at most once a KEY_REFRESH_MS) when an id names a key this gateway
    does not hold: another container may already mint with a key rotated in since this one
    started. An unrecorded id counts as ``accepted`` for ``horizon_ms`` (Kafka's retention).
    ``new_id`` (now_ms -> id) names jobs instead of minting (the chaos workload does, so that an
    enqueue with an unknown outcome is named in its history); such ids do not verify.
    """

    key: bytes
    previous: Sequence[bytes] = ()
    refresh: Callable[[], tuple[bytes, Sequence[bytes]]] | None = None
    horizon_ms: int = DEFAULT_ID_HORIZON_MS
    new_id: Callable[[int], str] | None = None
    # Ids minted before this (an upgrade from before seals, docs/deploy.md) may have an unsealed
    # continuation record waiting (``seal.unsealed_before_upgrade``); 0: none may.
    unsealed_before_ms: int = 0


@dataclass(frozen=True, slots=True)
class Intake:
    """What a job must pass before it is written: size, admission, routes and schemas.

    ``admission`` None: no caps (unit tests, the chaos workload). Once any route is known, a queue
    no route covers is refused (NoRoute, 404) unless ``refuse_unrouted`` is off; a typed queue's
    payloads are checked against its JSON Schema (PayloadInvalid, 400). ``payloads``: where a
    payload larger than ``inline_max_bytes`` goes (None: every payload stays inline).
    """

    max_payload_bytes: int = 256 * 1024
    admission: Admission | None = None
    limits: Limits = field(default_factory=Limits)
    routes: RouteCache | None = None
    refuse_unrouted: bool = True
    payloads: PayloadStore | Lazy[PayloadStore] | None = None
    inline_max_bytes: int = 16 * 1024
    registry: Reservation | None = None  # None: no reservation (unit tests, the chaos workload)
    # The relay's delay horizon (Settings.relay_delay_horizon_s; 0: none): a job delayed beyond it
    # waits in the relay's delay lane, not in Redis, so it is not counted toward the delayed cap.
    delay_horizon_s: int = 0


class EnqueuePipeline:
    """check, admit, spec, append: see the module docstring."""

    def __init__(self, log_: JobLog, minting: IdMinting, intake: Intake | None = None, *,
                 clock: Callable[[], int] = wall_ms) -> None:
        intake = intake or Intake()
        self.log, self.clock = log_, clock
        self.verifier = ids.Verifier(minting.key, minting.previous, refresh=minting.refresh, clock=clock,
                                     refresh_ms=KEY_REFRESH_MS)
        self.new_id, self.unsealed_before_ms = minting.new_id, minting.unsealed_before_ms
        self.max_payload_bytes, self.admission, self.limits = (intake.max_payload_bytes, intake.admission,
                                                               intake.limits)
        self.routes, self.refuse_unrouted = intake.routes, intake.refuse_unrouted
        self.payloads, self.inline_max_bytes = intake.payloads, intake.inline_max_bytes
        self.registry = intake.registry
        self.delay_horizon_s = intake.delay_horizon_s
        self._payload_json: dict[int, tuple[EnqueueRequest, str]] = {}

    # -- 1. check ----------------------------------------------------------------------------

    def check(self, queue: str, request: EnqueueRequest, caller: Caller, *, index: int | None = None,
              then: str = ENQUEUED_NOTHING) -> None:
        """Every check of one job before anything is written (``index``: its place in a batch or a
        family; ``then``: what a route or schema refusal says was left undone)."""
        validate_public_queue(queue)
        self.check_size(request, index=index)
        self.check_priority(request, caller, index=index)
        self.check_route(queue, [request], batch=index is not None, offset=index or 0, then=then)

    def check_batch(self, queue: str, requests: Sequence[EnqueueRequest], caller: Caller) -> None:
        """A batch's checks: every job's size and priority, then the route and each payload's schema."""
        validate_public_queue(queue)
        for index, job in enumerate(requests):
            self.check_size(job, index=index)
            self.check_priority(job, caller, index=index)
        self.check_route(queue, requests, batch=True)

    def check_size(self, request: EnqueueRequest, *, index: int | None) -> None:
        """The payload's size; and a payload shaped like a pointer is refused (a forged pointer)."""
        payloads.refuse_reserved(request.payload, index=index)
        payload_json = dump_json(request.payload)
        self._remember(request, payload_json)
        size = len(payload_json.encode("utf-8"))
        if size > self.max_payload_bytes:
            where = "payload" if index is None else f"job {index}: payload"
            raise PayloadTooLarge(f"{where} is {size} bytes as JSON; the limit is {self.max_payload_bytes}",
                                  index=index)

    def check_priority(self, request: EnqueueRequest, caller: Caller, *, index: int | None) -> None:
        if not caller.may_use(request.priority):
            where = "priority" if index is None else f"job {index}: priority"
            raise PriorityNotAllowed(f"{where} {request.priority} is above {caller.max_priority}, the "
                                     "highest a caller may use; higher ones are for operators")

    def check_route(self, queue: str, requests: Sequence[EnqueueRequest], *, batch: bool,
                    offset: int = 0, then: str = ENQUEUED_NOTHING) -> None:
        """NoRoute for a queue nobody runs; PayloadInvalid for payloads its schema refuses
        (no ``requests``: only whether the queue is routed)."""
        route = self.route(queue, then=then)
        if route is None:
            return  # the default worker takes it: no payload schema
        schema = route.schemas.get(queue)
        if schema is None:
            return
        errors: list[tuple[str, str, int | None]] = []
        for index, request in enumerate(requests, start=offset):
            where = f"/jobs/{index}/payload" if batch else "/payload"
            found = payload_errors(schema, request.payload, where)
            errors += [(p, m, index if batch else None) for p, m in found]
        if errors:
            (pointer, message, _i), more = errors[0], len(errors) - 1
            raise PayloadInvalid(f"the payload does not match queue {queue!r}'s schema: {pointer}: {message}"
                                 f"{f' (and {more} more)' if more else ''}{then}",
                                 queue=queue, errors=errors)

    def route_table(self) -> RouteTable | None:
        """The routes as this container last read them (at most ``ttl_s`` old); None without any.

        If the routes table cannot be read, the last table read is used (empty before one):
        a registry outage must not stop enqueues.
        """
        if self.routes is None:
            return None
        try:
            return self.routes.table()
        except SluiceError as exc:
            log.warning("could not read the routes, using the last ones read: %s", exc)
            return self.routes.last()

    def route(self, queue: str, *, then: str = "") -> Route | None:
        """The route covering ``queue``; None: the default worker takes it (no routes known, or
        unrouted queues go to it). Raises NoRoute when routes are known, none covers the queue and
        unrouted queues are refused (``then``: what the refusal left undone)."""
        table = self.route_table()
        route = None if table is None else table.resolve(queue)
        if unrouted_refused(table, route, self.refuse_unrouted):
            raise NoRoute(f"no deployed worker handles queue {queue!r}: no route covers it "
                          f"(sluice routes list){then}", queue=queue)
        return route

    def _remember(self, request: EnqueueRequest, payload_json: str) -> None:
        """Keep ``check_size``'s canonical JSON for ``spec``'s seal: a payload is serialised once on
        the gateway (issue 16). Keyed by the request object (kept, so its id is not reused); a check
        with no spec after it (a refusal) leaves an entry, so the memo is cleared when it grows."""
        if len(self._payload_json) >= 4 * 1024:
            self._payload_json.clear()
        self._payload_json[id(request)] = (request, payload_json)

    def _payload_of(self, request: EnqueueRequest) -> str:
        found = self._payload_json.pop(id(request), None)
        return found[1] if found is not None and found[0] is request else dump_json(request.payload)

    # -- 2. admit ----------------------------------------------------------------------------

    def admit(self, queue: str, requests: Sequence[EnqueueRequest]) -> None:
        """The queue's caps (``admission``), then its place in the registry (``reserve``)."""
        if self.admission is not None:
            horizon = self.delay_horizon_s or None
            self.admission.check(queue, len(requests), sum(
                1 for r in requests if r.delay_seconds and (horizon is None or r.delay_seconds <= horizon)))
        self.reserve(queue)

    def reserve(self, queue: str) -> None:
        """``queue`` is in the registry before anything of it is appended (issue 28: a 202 is
        binding); a continuation's queue is reserved when its family starts."""
        if self.registry is not None:
            self.registry.reserve(queue)

    # -- 3. spec -----------------------------------------------------------------------------

    def mint(self, now_ms: int, queue: str) -> str:
        return ids.mint(now_ms, queue, self.verifier.key) if self.new_id is None else self.new_id(now_ms)

    def spec(self, queue: str, request: EnqueueRequest, now_ms: int, key: str | None, *,
             job_id: str | None = None, traceparent: str | None = None) -> JobSpec:
        """The record for ``request``, whose payload ``check_size`` has serialised already: on the
        gateway a payload becomes canonical JSON once (then the record's own JSON, to Kafka).
        ``job_id``: a child's or a firing's derived id; None mints one. The record is sealed
        (``sluice.core.seal``) with the current job id key: the relay pushes nothing else. A large
        payload is written to the payload store here, and the seal covers its pointer. ``traceparent``:
        the trace the job joins (the use case's enqueue span, ``sluice.core.traces``), sealed too."""
        job_id = job_id or self.mint(now_ms, queue)
        payload, payload_json = request.payload, self._payload_of(request)
        if self.payloads is not None:
            large = payloads.offload(queue, job_id, payload_json, self.inline_max_bytes)
            # A failed put raises: nothing is appended, the caller gets a 503. A batch's large payloads
            # are put one after another (20-60 ms each in AWS); putting them in parallel is left undone.
            if large is not None:
                resolve(self.payloads).put(large.pointer.key, large.body)
                payload = large.pointer.as_payload()
                payload_json = dump_json(payload)
        # None: the caller left it to the handler's retry policy (core.policy.attempts_allowed)
        attempts = MAX_ATTEMPTS_UNSET if request.max_attempts is None else request.max_attempts
        fields = {
            "schema_version": seal.VERSION,
            "job_id": job_id,
            "queue": queue,
            "payload": payload,
            "priority": request.priority,
            "max_attempts": attempts,
            "lease_ms": request.lease_seconds * 1000,
            "run_at_ms": now_ms + request.delay_seconds * 1000 if request.delay_seconds else 0,
            "enqueued_at_ms": now_ms,
            "idempotency_key": key,
            "group": request.group,
            "traceparent": traceparent,
        }
        fields["seal"] = seal.seal(self.verifier.key, seal.message(
            job_id, queue, payload_json, request.priority, attempts,
            fields["lease_ms"], fields["run_at_ms"], now_ms, key, request.group, traceparent))
        return JobSpec.model_validate(fields, context={PAYLOAD_CHECKED: True})

    def sealed(self, spec: JobSpec) -> bool:
        """Whether ``spec`` carries a seal one of this gateway's job id keys made (a stored
        continuation: ``sluice.gateway.families``)."""
        kid = seal.seal_key_id(spec.seal)
        if kid is None:
            return False
        return seal.verify_spec(spec, self.verifier.keys_for(kid))

    def sealed_before_seals(self, spec: JobSpec, job_id: str) -> bool:
        """Whether ``spec`` is ``job_id``'s record as a gateway from before seals stored it, trusted for
        an id minted before the upgrade (``seal.unsealed_before_upgrade``)."""
        minted = self.verifier.verify(job_id)
        return seal.unsealed_before_upgrade(spec, job_id, minted, self.unsealed_before_ms)

    def reseal(self, spec: JobSpec, now_ms: int) -> JobSpec:
        """``spec`` accepted again at ``now_ms`` (a continuation at its release), sealed anew with
        the current key: its life (``limits.JOB_LIFE_MS``) runs from its release."""
        return seal.seal_spec(spec.model_copy(update={"enqueued_at_ms": now_ms}), self.verifier.key)

    def reseal_now(self, spec: JobSpec) -> JobSpec:
        """``reseal`` at this gateway's time: a redriven job's record (``sluice.gateway.redrive``)."""
        return self.reseal(spec, self.clock())

    # -- 4. append ---------------------------------------------------------------------------

    def append(self, specs: Sequence[JobSpec]) -> None:
        """Kafka acknowledged every record, or this raises (the outcome is then unknown)."""
        self.log.append(specs)
