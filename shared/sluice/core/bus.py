"""What happens to a job, as typed events on one synchronous bus.

The worker, the finisher, the relay and the gateway's use cases emit these; observers
(the JSONL history, the chaos probe and nemesis, metrics, logs) subscribe. Nothing
wraps a port to watch it.

Delivery is synchronous, on the emitting thread, in subscription order, before
``emit`` returns. So a subscriber sees the adapter's state exactly as the emitter
does, and it may block or stop the process at a named point: the chaos nemesis
SIGKILLs on ``ResultWriting`` (before the write), ``Acking`` (before the ack) or
``Pushed`` (after a push). A before-event (``*ing``) is emitted just before the call;
the matching after-event carries the outcome and the call's wall-clock ``t0``/``t1``.

Errors: an ``Exception`` raised by a subscriber is logged and swallowed, so an
observer can never change what a production path does. Anything else
(``BaseException``: ``SystemExit``, ``KeyboardInterrupt``) propagates, and a nemesis
stops the process with a signal, never with an exception.

Call outcomes are strings, the same words the history uses: ``ok``, ``written``,
``already_written``, ``retry``, ``dead``; refused calls say ``rejected`` (stale fencing
token), ``cancelled``, ``lost`` (the Redis lease is gone) or ``error``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, dataclass_transform

from sluice.core.errors import JobCancelled, JobNotFound, LeaseLost, SluiceError, StaleToken
from sluice.core.models import QueueStats

log = logging.getLogger("sluice.core.bus")


# Bound at import: an event's times are the machine's wall clock even where a chaos run skews
# a process's ``time.time`` (``sluice_dev.chaos.skew``), so every observer's lines share one clock.
_wall = time.time


def wall() -> float:
    """The machine's wall clock (never skewed): every event's times, and a call's ``t0``."""
    return _wall()


# Event classes whose dataclass methods are not made yet, with the defaults each declared.
_UNMADE: dict[type, dict[str, Any]] = {}
_making = threading.RLock()


def _make(cls: type, defaults: dict[str, Any]) -> None:
    """``cls`` made, in place, the dataclass it declares (its bases made already). Its fields are
    slots already (``_EventType``): their descriptors step aside while dataclass() reads the
    defaults, and come back (no slotted copy is made: the class keeps its identity)."""
    slots = {n: cls.__dict__[n] for n in cls.__dict__["__slots__"]}
    for n, value in defaults.items():
        setattr(cls, n, value)
    dataclass(frozen=True, kw_only=True)(cls)
    for n in defaults:  # a base's field given a new default here: its base's slot holds it
        if n not in slots and n in cls.__dict__:
            delattr(cls, n)
    for n, slot in slots.items():
        setattr(cls, n, slot)


def _made(cls: type) -> None:
    """``cls`` and its bases made dataclasses, if not done yet. Cold start (issue 30, item 3):
    dataclass() writes and compiles six methods a class, 40 ms of every function's import for the
    catalogue's fifty events; a class is made when first built, unpickled, or asked for its fields,
    so an import makes none, and a first event made costs its own class and bases (about a ms
    each), not the catalogue's."""
    with _making:
        for c in reversed(cls.__mro__):
            if c in _UNMADE:
                _make(c, _UNMADE[c])
                del _UNMADE[c]  # only once made: a thread that finds it gone may build one


class _Unmade:
    """A class's own ``__dataclass_fields__`` and ``__dataclass_params__`` until it is made: reading
    either (``dataclasses.fields``, ``is_dataclass``) makes it, so no class reads its made base's
    fields as its own; dataclass() puts the real ones in their place."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, obj: object, owner: type) -> Any:
        _made(owner)
        return owner.__dict__[self.name]


@dataclass_transform(frozen_default=True, kw_only_default=True, field_specifiers=(field,))
class _EventType(type):
    """Makes every class of the catalogue a frozen, slotted, keyword-only dataclass of the fields it
    declares (after its bases' fields), so an event is its fields and nothing else (PEP 681).

    The slots are made with the class; the dataclass methods when the class is first used
    (``_made``): built, unpickled, or asked for ``__dataclass_fields__`` (``dataclasses.fields``)."""

    def __new__(mcs, name: str, bases: tuple[type, ...], namespace: dict[str, Any], **kw: Any) -> _EventType:
        own = list(namespace.get("__annotations__", {}))
        defaults = {n: namespace.pop(n) for n in own if n in namespace}
        inherited = {n for b in bases for c in b.__mro__ for n in c.__dict__.get("__slots__", ())}
        slots = tuple(n for n in own if n not in inherited)  # a field redeclared keeps its base's slot
        unmade = {n: _Unmade(n) for n in ("__dataclass_fields__", "__dataclass_params__")}
        cls = super().__new__(mcs, name, bases, {**namespace, **unmade, "__slots__": slots}, **kw)
        with _making:
            _UNMADE[cls] = defaults
        return cls

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls in _UNMADE:
            _made(cls)
        return super().__call__(*args, **kwargs)


class Event(metaclass=_EventType):
    """Every event; ``at`` is the wall clock when it was emitted (the call's end for a call).

    A subclass declares only its own fields: it is a dataclass by being an event (``_EventType``),
    so it takes no ``@dataclass`` of its own.
    """

    at: float = field(default_factory=wall)

    # What dataclass(slots=True) gives a frozen class, which slots alone do not: pickling
    # (``_EventType`` makes the dataclass in place, without that copy).
    def __getstate__(self) -> list[Any]:
        return [getattr(self, f) for f in self.__dataclass_fields__]

    def __setstate__(self, state: list[Any]) -> None:
        _made(type(self))
        for f, value in zip(self.__dataclass_fields__, state, strict=True):
            object.__setattr__(self, f, value)


class CallEnded(Event):
    """A port call returned or raised: ``outcome`` as above, ``t0`` when it began."""

    outcome: str
    t0: float
    error: str = ""


class JobEvent(Event):
    """An event about one job: ``job`` is its id, ``queue`` its queue."""

    job: str
    queue: str


class JobCall(CallEnded):
    """A port call about one job (``job``, ``queue``), with its outcome."""

    job: str
    queue: str


# -- worker: Redis side ---------------------------------------------------------------------------


class Leased(JobEvent):
    """``t0``: when the lease call that handed it out began; ``traceparent``: the job's trace, as
    Redis holds it (``sluice.core.traces``; None: untraced)."""

    lease: int  # the Redis lease token
    attempt: int
    deadline_ms: int | None = None
    t0: float | None = None
    traceparent: str | None = None


class LeaseCall(JobCall):
    """A Redis call on one lease of a job (``lease``, the Redis lease token), with its outcome."""

    lease: int


class Renewed(LeaseCall):
    """A heartbeat's extend; ``outcome`` ok, or lost/rejected/error (the lease is gone or unknown)."""

    deadline_ms: int | None = None


class Acking(JobEvent):
    """The result (or a cancel) is recorded in the store; the Redis ack is next."""

    lease: int
    token: int  # the fencing token, 0 if none was granted


class Acked(LeaseCall):
    """The Redis ack that follows ``Acking``."""


class FailReported(LeaseCall):
    """The job handed back to Redis after a failure; ``outcome`` says retry or dead when ok."""


class Released(LeaseCall):
    """A lease given back to Redis without using up an attempt."""


class RoundEnded(Event):
    """A drain's round ran the ``jobs`` it leased on ``queue`` to their end (``worker.registry``): what
    waits for the round (the worker's countdown, ``worker.countdown``) goes now."""

    queue: str
    jobs: int


# -- worker: the jobs table ------------------------------------------------------------------------


class Granted(JobCall):
    """A grant: ``token`` is the fencing token minted (None if refused)."""

    owner: str
    token: int | None = None


class HandlerStarted(JobEvent):
    """``queue_wait_ms``: from the enqueue to now (None if the job does not say when it was enqueued)."""

    token: int
    attempt: int
    lease: int = 0
    queue_wait_ms: int | None = None


class HandlerEnded(JobEvent):
    """``outcome``: returned, raised or timed_out; ``stale_token``: it raised StaleToken (one of its
    own fenced writes was refused)."""

    token: int
    outcome: str
    duration_ms: float
    error: str = ""
    stale_token: bool = False


class ResultWriting(JobEvent):
    """The local lease check passed; the fenced result write is next."""

    token: int


class TokenCall(CallEnded):
    """A DynamoDB write for one job under its fencing token (``job``, ``token``), with its outcome."""

    job: str
    token: int


class ResultWritten(TokenCall):
    """The result write landed (``outcome`` written or already_written)."""

    result: Any = field(default=None, repr=False)  # the value written (an observer may digest it)


class ResultRefused(TokenCall):
    """The result write was refused: ``current`` is the newer fencing token when rejected."""

    current: int | None = None
    result: Any = field(default=None, repr=False)


class FencedWrite(TokenCall):
    """A handler's ``FencedTable`` write (``kind`` put, update or delete)."""

    table: str
    kind: str
    current: int | None = None


class FencedCall(TokenCall):
    """A handler's HTTP call through ``ctx.http``, carrying its fencing token: ``outcome`` ok (any
    answer but the fence's), rejected (a fence middleware refused the token: ``current`` is the
    newer one), or error (no answer); ``status`` the HTTP status the handler got (0 otherwise)."""

    method: str
    host: str
    status: int = 0
    current: int | None = None


class FailureRecorded(TokenCall):
    """A failure record in the jobs table (``status`` queued, failed, dead or cancelled)."""

    status: str
    current: int | None = None


class GrantReleased(TokenCall):
    """A granted lease given back in the jobs table."""


class LeaseGone(JobEvent):
    """The worker learned that its Redis lease on the job is gone (taken over, lapsed, refused).

    ``again``: the attempt already knew (its ``lease_lost`` was set), so this is the same loss
    said once more; ``token`` is the fencing token if one was granted.
    """

    lease: int
    attempt: int
    why: str
    token: int | None = None
    again: bool = False


class Finished(JobEvent):
    """The worker finished one attempt (glossary: finish) with this verdict.

    ``outcome`` is a ``runtime.outcomes.Outcome`` value: succeeded, retried, failed, dead,
    cancelled, released, lease_lost or unsettled. ``detail``: the write's outcome for a success,
    else why. Not emitted where a re-run ends on a verdict an earlier attempt wrote (the
    stored result or failure stands): that attempt finished nothing new.
    """

    lease: int
    attempt: int
    outcome: str
    token: int | None = None
    detail: str = ""
    retry_after_ms: int | None = None


# -- relay ----------------------------------------------------------------------------------------


class RecordsRead(Event):
    topic: str
    partition: int
    first: int
    last: int
    n: int


class Pushed(CallEnded):
    """Records ``first``..``last`` of one partition pushed into Redis under ``owner``."""

    queue: str
    topic: str
    partition: int
    owner: int
    first: int
    last: int
    pushed: int = 0
    skipped: int = 0
    jobs: tuple[str, ...] = ()
    traced: tuple[tuple[str, str], ...] = ()  # (job, traceparent) of the records that carry one


class ConfigRead(Event):
    """The relay read a queue's depths and config (every ``refresh_s``); ``t0`` when it began."""

    queue: str
    paused: bool
    t0: float


class Committed(Event):
    topic: str
    partition: int
    offset: int  # the next offset to read


class Settled(Event):
    """Redis endings copied into the jobs table: ``n`` settled of a queue."""

    queue: str
    n: int


class QueueRegistered(Event):
    """The relay added ``queue`` to the registry's Redis cache for a minted record (issue 28): new to
    the cache, so perhaps to the durable registry too (a queue from before it, or a cache lost with
    Redis); the composition root writes it through (``sluice.entry.relay``)."""

    queue: str


# -- relay incidents: rare turns of its state, which its metrics and logs observe ----------------


class Incident(Event):
    """A rare event (a few per invocation at most): emitted whether or not anyone listens, and a
    subscriber of incidents alone does not make a bus ``listening`` (no hot path builds more)."""


class RelayStepFailed(Incident):
    """A relay step raised; ``unexpected``: not a SluiceError (the relay restarts its partitions)."""

    error: str
    unexpected: bool = False


class PartitionLost(Incident):
    """The relay stopped pushing ``partition``: a newer owner pushed, or its lease is gone."""

    partition: int
    why: str


class OwnerForged(Incident):
    """A push of ``partition`` into ``queue`` was refused for a newer owner (``owner``, as the
    queue's relayed key names it) while this relay's lease on the partition was still current: no
    relay holds that owner (tokens come from that lease), so its team's Redis user wrote it. The
    queue alone is held, and tried again every ``refresh_s``; ``held`` False once a push into it
    succeeds again."""

    queue: str
    partition: int
    owner: str
    held: bool


class OwnershipJobRemoved(Incident):
    """A job in the ownership queue that no relay enqueued was removed."""

    job: str
    why: str


class QueueHeld(Incident):
    """A queue's push gate turned: ``gate`` dead_cap (at ``depth`` dead jobs), watermark (at
    ``depth`` ready jobs) or budget (at ``depth`` bytes used: its byte budget, or the total over
    every queue); ``held`` True when it closed, False when it opened again."""

    queue: str
    gate: str
    held: bool
    depth: int


class MemoryGuard(Incident):
    """Redis's memory crossed the push guard: ``on`` at ``percent`` of maxmemory, or off again."""

    on: bool
    percent: float


class DispatchLimited(Incident):
    """The dispatch budget granted fewer worker invocations than the queues wanted."""

    wanted: int
    granted: int


class PushFailed(Incident):
    """One partition's push into ``queue`` raised something unexpected; its records stay pending
    and the other partitions flow."""

    partition: int
    queue: str
    error: str


class StatusWriteFailed(Incident):
    """The relay's status writer could not mark ``jobs`` jobs queued (a status update only:
    the grant moves them on regardless)."""

    jobs: int
    error: str


class DispatchFailed(Incident):
    queue: str
    error: str


class DispatchRefused(Incident):
    """A route sends ``queue`` to ``function``, which the team map does not give that queue: the
    relay did not dispatch it (a route written around the registrar, or a map changed since)."""

    queue: str
    function: str
    why: str


class Replayed(Incident):
    """Redis lost data (its epoch changed from ``old_epoch``): ``partition`` is replayed from
    ``start`` (Kafka had committed ``committed``), skipping jobs already final."""

    topic: str
    partition: int
    start: int
    committed: int | None
    old_epoch: str | None
    epoch: str


class Parked(Incident):
    """``n`` held records of ``queue`` were parked from ``partition`` (relay/parking.py): the relay
    may commit past them; they come back in order when the queue can take them."""

    queue: str
    partition: int
    n: int


class Unparked(Incident):
    """``n`` parked records of ``queue`` were read back into ``partition``'s buffer; ``drained``:
    the lane came back short, so the queue's new records go straight to Redis again. ``released``
    counts records deleted by the sweep (their jobs final), ``refused`` those ended past their life."""

    queue: str
    partition: int
    n: int = 0
    drained: bool = False
    released: int = 0
    refused: int = 0


class ParkingFailed(Incident):
    """The parking lot could not be written or read; the records wait in the buffer, tried again."""

    queue: str
    partition: int
    error: str


class CheckpointFailed(Incident):
    """A recovery checkpoint failed; it is only late: the next one is due in ``retry_in_s``."""

    error: str
    retry_in_s: float


class LagMeasured(Incident):
    """Records in Kafka not yet in Redis, the worst owned partition (every ``lag_every_s``)."""

    lag: int


class QueueMeasured(Incident):
    """The relay re-read a queue's stats (every ``refresh_s``, once per queue it visits): its
    ``stats`` as Redis answered (depths, the oldest ready job's age) and ``relayed``, the jobs it
    pushed into the queue since the last measure. Periodic rather than rare, but one small event per
    queue a second: an incident, so per-queue metrics (``queue_metrics``) build no hot-path events."""

    stats: QueueStats
    relayed: int = 0

    @property
    def queue(self) -> str:
        return self.stats.queue


# -- gateway --------------------------------------------------------------------------------------


class KeyedJobsNamed(Event):
    """A keyed enqueue (``gateway.keyed``) is about to append ``jobs``, the ids its Idempotency-Key's
    record names: a first request's (``repeat`` False) or a repeat's, which appends the same ids again.
    Emitted before the append, so an observer knows the ids of a request whose answer never came
    (the chaos workload names them in its history)."""

    queue: str
    jobs: tuple[str, ...]
    repeat: bool


# -- every path -----------------------------------------------------------------------------------


class JobEnded(JobEvent):
    """A job reached a final state (succeeded, failed, dead, cancelled).

    Emitted once per place that decides it: the worker (``source`` worker), the relay
    copying what Redis ended (settle) and a cancel (cancel). ``redrive_gen`` tells
    apart the endings of one job redriven; ``token`` is the fencing token (0 if none).
    """

    state: str
    source: str
    redrive_gen: int = 0
    token: int = 0
    attempts: int = 0
    created_at_ms: int = 0
    ended_at_ms: int = 0


class ChildAbandoned(JobEvent):
    """A child ended ``dead`` because its parent ended (``parent_status``) before the append of its
    Kafka record was confirmed (``streams.countdown.StreamCountdown``): nothing would have run it.
    ``continuation``: the one its ending counts down, if any (docs/flows.md, Failure)."""

    parent: str
    parent_status: str
    continuation: str | None = None


# -- the bus --------------------------------------------------------------------------------------

E = TypeVar("E", bound=Event)
T = TypeVar("T")
Subscriber = Callable[[Any], None]


class EventBus:
    """Synchronous, ordered delivery to subscribers; see the module's docstring for errors."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subs: tuple[tuple[tuple[type[Event], ...], Subscriber], ...] = ()
        self._listening = False
        self._roles: set[str] = set()

    def claim(self, role: str) -> bool:
        """True only the first time ``role`` is claimed on this bus. The composition root's observers
        subscribe once per bus however many entry points build them; kept on the bus itself because a
        set of ``id(bus)`` would skip a new bus that reuses a collected one's address."""
        with self._lock:
            if role in self._roles:
                return False
            self._roles.add(role)
            return True

    def subscribe(self, callback: Callable[[E], None], *types: type[E]) -> Callable[[], None]:
        """Call ``callback`` for each event of ``types`` (all events if none); returns an unsubscribe."""
        entry: tuple[tuple[type[Event], ...], Subscriber] = (tuple(types) or (Event,), callback)
        with self._lock:
            self._set((*self._subs, entry))

        def unsubscribe() -> None:
            with self._lock:
                self._set(tuple(s for s in self._subs if s is not entry))

        return unsubscribe

    def _set(self, subs: tuple[tuple[tuple[type[Event], ...], Subscriber], ...]) -> None:
        self._subs = subs
        self._listening = any(not all(issubclass(t, Incident) for t in types) for types, _ in subs)

    @property
    def listening(self) -> bool:
        """True if anyone listens to more than incidents: a hot path may skip building events
        nobody reads. (Incidents are emitted either way.)"""
        return self._listening

    def emit(self, event: Event) -> None:
        for types, callback in self._subs:
            if isinstance(event, types):
                try:
                    callback(event)
                except Exception:
                    log.exception("event subscriber %r failed on %s", callback, type(event).__name__)


def outcome_of(exc: BaseException) -> str:
    """How an event names a refused call (a history line uses the same word)."""
    if isinstance(exc, StaleToken):
        return "rejected"
    if isinstance(exc, JobCancelled):
        return "cancelled"
    if isinstance(exc, LeaseLost | JobNotFound):
        return "lost"
    return "error"


def error_text(exc: BaseException) -> str:
    return str(exc)[:200]


def timed(bus: EventBus, call: Callable[[], T], kind: type[CallEnded], fields: dict[str, Any], *,
          ok: Callable[[T], str] = lambda _r: "ok", refused: type[CallEnded] | None = None,
          details: Callable[[T], dict[str, Any]] | None = None) -> T:
    """``call()``, then ``kind`` (or ``refused`` if it raised a SluiceError) with its outcome and times.

    ``details`` adds fields taken from a result; ``current`` (the newer fencing token) is filled
    in for a stale token where the event has it.
    """
    if not bus.listening:
        return call()
    t0 = _wall()
    try:
        result = call()
    except SluiceError as exc:
        cls = refused or kind
        extra: dict[str, Any] = {}
        if isinstance(exc, StaleToken) and "current" in cls.__dataclass_fields__:
            extra["current"] = exc.current
        bus.emit(cls(outcome=outcome_of(exc), t0=t0, error=error_text(exc), **fields, **extra))
        raise
    more = details(result) if details is not None else {}
    bus.emit(kind(outcome=ok(result), t0=t0, **fields, **more))
    return result
