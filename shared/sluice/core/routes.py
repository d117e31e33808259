"""Routes: which worker function drains which queue (pure: no I/O).

A **route** maps a queue name (``thumbnails``) or a queue prefix (``thumbs-*``) to one worker
function, owned by one team, with the JSON Schema of each typed queue it serves
(``schemas``: queue -> schema, from the handlers' pydantic models). A queue resolves to the
route with its exact name, else to the longest prefix that matches it; a queue with no route
goes to the default worker (``None`` here).

The registry lives in the routes table (``sluice.backends.dynamodb.routes``); the relay and the gateway
read it through ``RouteCache``, at most once per ``ttl_s`` (30 s), so a new route is used
within a minute without a redeploy.

Validation (``check_new``), all before any write:

- a pattern is a queue name, or a queue-name prefix followed by ``*``; no reserved names;
- two owners may not claim one queue: a route is refused if another owner's route has the same
  pattern, or one of the two patterns covers the other (``thumbs-*`` and ``thumbs-big``);
- each schema must be a valid JSON Schema (draft 2020-12, the dialect pydantic emits): checked
  with ``jsonschema``'s meta-schema check (``Draft202012Validator.check_schema``), which the
  gateway also uses to validate payloads, so the layer carries ``jsonschema``;
- a schema's queue must be one the route covers.

Whether the function exists is checked by the registration (``store.routes.register``), where
a Lambda API is at hand.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Generic, Protocol, TypeVar

from sluice.core.errors import (
    BackendUnavailable,
    ConfigError,
    InvalidInput,
    InvalidSchema,
    NoRoute,
    PayloadInvalid,
    RegistrationRefused,
    RouteConflict,
    RouteRefused,
    SluiceError,
    UnknownFunction,
)

__all__ = ["InvalidSchema", "NoRoute", "PayloadInvalid", "Route", "RouteCache", "RouteConflict", "RouteTable",
           "UnknownFunction", "check_new", "check_schema", "covers", "payload_errors", "routes_for"]
from sluice.core.lazy import Lazy, resolve
from sluice.core.models import QUEUE_NAME_RE, is_reserved_queue

PREFIX_RE: Final = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}\*")
MAX_ROUTES_PER_REGISTRATION: Final = 100  # one DynamoDB transaction
MAX_SCHEMA_BYTES: Final = 64 * 1024  # one route item stays far below DynamoDB's 400 KB
T = TypeVar("T")

EMPTY_TTL_S: Final = 5.0  # how long a cache keeps an empty table, or waits after a failed read
FUNCTION_RE: Final = re.compile(r"^(arn:[a-z-]+:lambda:[a-z0-9-]+:\d{12}:function:)?[A-Za-z0-9_-]{1,64}$")
OWNER_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def validate_pattern(pattern: object) -> str:
    if not isinstance(pattern, str) or not (QUEUE_NAME_RE.fullmatch(pattern) or PREFIX_RE.fullmatch(pattern)):
        raise InvalidInput(f"invalid route pattern {pattern!r}: a queue name, or a queue-name prefix "
                           "followed by * (e.g. thumbs-*)")
    if is_reserved_queue(pattern):
        raise InvalidInput(f"route pattern {pattern!r} names Sluice's reserved queues (sluice-...)")
    return pattern


def covers(pattern: str, queue: str) -> bool:
    """Whether ``pattern`` routes ``queue``."""
    return queue.startswith(pattern[:-1]) if pattern.endswith("*") else queue == pattern


def overlap(a: str, b: str) -> bool:
    """Whether some queue name matches both patterns."""
    if a.endswith("*") and b.endswith("*"):
        return a[:-1].startswith(b[:-1]) or b[:-1].startswith(a[:-1])
    if a.endswith("*"):
        return covers(a, b)
    if b.endswith("*"):
        return covers(b, a)
    return a == b


def check_schema(queue: str, schema: object) -> dict[str, Any]:
    """The schema, if it is a valid JSON Schema (draft 2020-12); InvalidSchema otherwise."""
    if not isinstance(schema, dict):
        raise InvalidSchema(f"the schema of queue {queue!r} is not a JSON object")
    try:
        size = len(json.dumps(schema, separators=(",", ":"), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise InvalidSchema(f"the schema of queue {queue!r} is not JSON: {exc}") from exc
    if size > MAX_SCHEMA_BYTES:
        raise InvalidSchema(f"the schema of queue {queue!r} is {size} bytes as JSON; the limit is "
                            f"{MAX_SCHEMA_BYTES}")
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = "/" + "/".join(str(p) for p in exc.absolute_path) if exc.absolute_path else "the root"
        raise InvalidSchema(f"the schema of queue {queue!r} is not a valid JSON Schema: at {where}: "
                            f"{exc.message}") from None
    return schema


_VALIDATORS: dict[str, Any] = {}  # schema JSON -> compiled validator, per container


def payload_errors(schema: Mapping[str, Any], payload: Any, pointer: str = "/payload",
                   limit: int = 20) -> list[tuple[str, str]]:
    """(JSON pointer, message) for each way ``payload`` breaks ``schema``, first ``limit`` of them.

    The schema passed ``check_schema`` at registration; validators are compiled once per schema.
    """
    key = json.dumps(schema, sort_keys=True, separators=(",", ":"))
    validator = _VALIDATORS.get(key)
    if validator is None:
        from jsonschema import Draft202012Validator

        if len(_VALIDATORS) > 1000:  # schemas come from the routes table: bounded, but be safe
            _VALIDATORS.clear()
        validator = _VALIDATORS[key] = Draft202012Validator(dict(schema))
    out = []
    for err in sorted(validator.iter_errors(payload), key=lambda e: list(map(str, e.absolute_path))):
        path = "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in err.absolute_path)
        out.append((pointer + path, _short_message(err.message)))
        if len(out) >= limit:
            break
    return out


# A quoted value of more than 48 characters inside a validator's message (jsonschema puts the
# offending value, or an unexpected key, in it with repr()).
_LONG_QUOTED = re.compile(r"""(['"])([^'"]{40})[^'"]{8,}\1""")


def _short_message(message: str, limit: int = 300) -> str:
    """The message with each long quoted value cut to its first 40 characters. The reason comes
    after the value ("'aaa...' is too long"), so cutting the message's tail would lose it."""
    short = _LONG_QUOTED.sub(lambda m: f"{m[1]}{m[2]}...{m[1]}", message)
    return short if len(short) <= limit else f"{short[:limit // 2 - 3]} ... {short[-(limit // 2 - 3):]}"


@dataclass(frozen=True)
class Route:
    pattern: str
    function: str  # the worker function's name (or ARN)
    owner: str
    schemas: Mapping[str, dict[str, Any]] = field(default_factory=dict)  # typed queue -> JSON Schema
    updated_at_ms: int = 0

    def __post_init__(self) -> None:
        validate_pattern(self.pattern)
        if not isinstance(self.function, str) or not FUNCTION_RE.fullmatch(self.function):
            raise InvalidInput(f"invalid worker function name {self.function!r}")
        if not isinstance(self.owner, str) or not OWNER_RE.fullmatch(self.owner):
            raise InvalidInput(f"invalid route owner {self.owner!r}: 1..64 of [A-Za-z0-9_.-]")
        for queue, schema in self.schemas.items():
            if not isinstance(queue, str) or not QUEUE_NAME_RE.fullmatch(queue) \
                    or not covers(self.pattern, queue):
                raise InvalidInput(f"route {self.pattern!r} has a schema for {queue!r}, which it does not "
                                   "route")
            check_schema(queue, schema)

    def as_dict(self) -> dict[str, Any]:
        return {"pattern": self.pattern, "function": self.function, "owner": self.owner,
                "schemas": dict(self.schemas), "updated_at_ms": self.updated_at_ms}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Route:
        return cls(pattern=d["pattern"], function=d["function"], owner=d["owner"],
                   schemas=dict(d.get("schemas") or {}), updated_at_ms=int(d.get("updated_at_ms") or 0))


class RouteTable:
    """An immutable set of routes, resolved by exact name then longest prefix."""

    def __init__(self, routes: Iterable[Route] = ()) -> None:
        self.routes = sorted(routes, key=lambda r: r.pattern)
        self._exact = {r.pattern: r for r in self.routes if not r.pattern.endswith("*")}
        self._prefixes = sorted((r for r in self.routes if r.pattern.endswith("*")),
                                key=lambda r: len(r.pattern), reverse=True)

    def __len__(self) -> int:
        return len(self.routes)

    def resolve(self, queue: str) -> Route | None:
        if is_reserved_queue(queue):  # Sluice's own queues never go to a worker (thumbs-* can't cover
            return None               # them, but s* could)
        exact = self._exact.get(queue)
        if exact is not None:
            return exact
        return next((r for r in self._prefixes if covers(r.pattern, queue)), None)

    def schema(self, queue: str) -> dict[str, Any] | None:
        route = self.resolve(queue)
        return None if route is None else route.schemas.get(queue)

    def functions(self) -> set[str]:
        return {r.function for r in self.routes}


def unrouted_refused(table: RouteTable | None, route: Route | None, refuse_unrouted: bool) -> bool:
    """Whether a queue that resolved to ``route`` goes nowhere: routes are known (``table`` holds
    some), none covers the queue, and unrouted queues are refused (404 NO_ROUTE). Otherwise a None
    route means the default worker takes the queue."""
    return route is None and refuse_unrouted and table is not None and len(table) > 0


def check_new(existing: Iterable[Route], new: Sequence[Route], *, owner: str,
              replaces_function: str | None = None) -> list[Route]:
    """Refuse ``new`` (RouteConflict) where another owner routes one of its queues.

    Returns the existing routes of ``owner`` for ``replaces_function`` that ``new`` no longer
    names: a registration replaces what the function registered before.
    """
    if len(new) > MAX_ROUTES_PER_REGISTRATION:
        raise InvalidInput(f"{len(new)} routes in one registration; the limit is "
                           f"{MAX_ROUTES_PER_REGISTRATION}")
    patterns = [r.pattern for r in new]
    dupes = sorted({p for p in patterns if patterns.count(p) > 1})
    if dupes:
        raise InvalidInput(f"route patterns named twice: {', '.join(dupes)}")
    mine = [r for r in new if r.owner != owner]
    if mine:
        raise InvalidInput(f"a registration by {owner!r} cannot write routes owned by {mine[0].owner!r}")
    current = list(existing)
    for r in new:
        for other in current:
            if other.owner != owner and overlap(r.pattern, other.pattern):
                raise RouteConflict(f"queue pattern {r.pattern!r} is already routed by {other.owner!r} "
                                    f"({other.pattern!r} -> {other.function}); two teams cannot claim one "
                                    "queue", pattern=r.pattern, owner=other.owner)
    return [r for r in current if r.owner == owner and r.function == replaces_function
            and r.pattern not in set(patterns)]


def routes_for(function: str, owner: str, queues: Iterable[str], schemas: Mapping[str, dict[str, Any]],
               patterns: Iterable[str] = (), now_ms: int = 0) -> list[Route]:
    """The routes a worker function registers: one per handled queue (with its schema), and one
    per extra prefix pattern (with the schemas of the handled queues it covers)."""
    extra = [validate_pattern(p) for p in patterns]
    queues = sorted(set(queues))
    for q in queues:
        if not QUEUE_NAME_RE.fullmatch(q) or is_reserved_queue(q):
            raise InvalidInput(f"a worker cannot be routed the queue {q!r}")
    unknown = sorted(set(schemas) - set(queues))
    if unknown:
        raise InvalidInput(f"schemas for queues the handlers module does not handle: {', '.join(unknown)}")
    covered = {q for q in queues if any(covers(p, q) for p in extra)}
    out = [Route(q, function, owner, {q: schemas[q]} if q in schemas else {}, now_ms)
           for q in queues if q not in covered]
    out += [Route(p, function, owner, {q: schemas[q] for q in queues if covers(p, q) and q in schemas},
                  now_ms) for p in extra]
    return out


def app_schemas(app: object) -> dict[str, dict[str, Any]]:
    """The typed queues' JSON Schemas of a worker app: ``app.schemas()`` where it has one (typed
    handlers, ``@app.handler(q, model=M)``), else none."""
    schemas = getattr(app, "schemas", None)
    if not callable(schemas):
        return {}
    found = schemas()
    if not isinstance(found, Mapping):
        raise ConfigError(f"{type(app).__name__}.schemas() did not return a mapping of queue -> schema")
    return {str(q): dict(s) for q, s in found.items()}


class RouteSource(Protocol):
    """Where the routes are (``store.routes.DynamoRouteStore``)."""

    def list_routes(self) -> list[Route]: ...


class TtlRead(Generic[T]):
    """A value read at most once per ``ttl_s``, under a lock (one read at a time). A failed read
    (SluiceError) keeps the last value, raises, and is tried again within ``EMPTY_TTL_S``; so is a
    value ``soon`` calls provisional (an empty route table, so a first registration counts fast)."""

    def __init__(self, read: Callable[[], T], blank: T, *, ttl_s: float, clock: Callable[[], float],
                 soon: Callable[[T], bool] = lambda _value: False) -> None:
        self.read, self.ttl_s, self.clock, self.soon = read, ttl_s, clock, soon
        self.value = blank
        self._read_at = float("-inf")
        self._lock = threading.Lock()
        self.errors = 0
        self.has_read = False  # a read has succeeded: ``value`` is a real one, not the blank

    def get(self) -> T:
        now = self.clock()
        if now - self._read_at < self.ttl_s:
            return self.value
        with self._lock:
            if now - self._read_at >= self.ttl_s:
                retry_soon = now - self.ttl_s + min(EMPTY_TTL_S, self.ttl_s)
                try:
                    self.value = self.read()
                except SluiceError:  # a backend error or a bad item: keep the last value
                    self.errors += 1
                    self._read_at = retry_soon
                    raise
                self.has_read = True
                self._read_at = retry_soon if self.soon(self.value) else now
        return self.value

    def reset(self) -> None:
        self._read_at = float("-inf")


class RouteCache(TtlRead[RouteTable]):
    """The routes, read at most once per ``ttl_s``; a failed read keeps the last table.

    ``known`` is False until a read found at least one route: before that, the gateway
    refuses no queue for want of a route (a deployment that registers none works as before).
    """

    def __init__(self, source: RouteSource | Lazy[RouteSource], *, ttl_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.source = source
        # No route yet: read again sooner, so the first registration counts within seconds.
        super().__init__(lambda: RouteTable(resolve(self.source).list_routes()), RouteTable(),
                         ttl_s=ttl_s, clock=clock, soon=lambda table: not table.routes)

    def table(self) -> RouteTable:
        return self.get()

    def resolve(self, queue: str) -> Route | None:
        return self.table().resolve(queue)

    def known(self) -> bool:
        return len(self.table()) > 0

    def last(self) -> RouteTable:
        """The table of the last successful read (empty before one), without reading."""
        return self.value

    def forget(self) -> None:
        self.reset()


# -- the team map (issue 27): which queues the infra team gave each team --------------------------

TEAM_RE: Final = re.compile(r"^[a-z0-9][a-z0-9-]{0,20}$")  # infra/team.yaml's TeamName


def team_patterns(text: str | Iterable[str]) -> tuple[str, ...]:
    """A team's queue patterns (a StringList parameter's value, or a list), each a queue name or a
    prefix ``thumbs-*``; no Sluice queue. InvalidInput for anything else."""
    items = text.split(",") if isinstance(text, str) else list(text)
    found = tuple(sorted({validate_pattern(str(p).strip()) for p in items if str(p).strip()}))
    for p in found:
        if p.endswith("*") and "sluice-".startswith(p[:-1]):  # s*, sl*, ... cover sluice-...
            raise InvalidInput(f"queue pattern {p!r} covers Sluice's reserved queues (sluice-...)")
    return found


def pattern_within(pattern: str, allowed: str) -> bool:
    """Whether every queue ``pattern`` routes is one ``allowed`` covers (``thumbs-big-*`` is within
    ``thumbs-*``; ``thumbs-*`` is not within ``thumbs-big``)."""
    if allowed.endswith("*"):
        return pattern[:-1 if pattern.endswith("*") else None].startswith(allowed[:-1])
    return pattern == allowed


@dataclass(frozen=True)
class TeamMap:
    """team -> the queue patterns the infra team gave it (the SSM parameters
    ``/sluice/<stack>/teams/<team>``, written only by infra/team.yaml)."""

    teams: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def allows(self, team: str, queue: str) -> bool:
        return any(covers(p, queue) for p in self.teams.get(team, ()))

    def within(self, team: str, pattern: str) -> bool:
        return any(pattern_within(pattern, p) for p in self.teams.get(team, ()))


def check_within_map(routes: Iterable[Route], team: str, allowed: Sequence[str]) -> None:
    """RegistrationRefused, naming the first, unless every route is ``team``'s and within ``allowed``."""
    for r in routes:
        if r.owner != team:
            raise RegistrationRefused(f"route {r.pattern!r} is owned by {r.owner!r}; this registrar "
                                      f"registers team {team!r}'s routes only")
        if not TeamMap({team: tuple(allowed)}).within(team, r.pattern):
            raise RegistrationRefused(
                f"queue pattern {r.pattern!r} is not given to team {team!r} by the team map, which gives "
                f"it {', '.join(allowed) or 'no queue'} (the infra team changes that: infra/team.yaml, "
                "Queues); nothing was written", pattern=r.pattern, team=team)


def function_name(function: str) -> str:
    """A Lambda function's name, from its name or ARN (a qualifier dropped)."""
    if function.startswith("arn:"):
        parts = function.split(":")
        return parts[6] if len(parts) > 6 else function
    return function.split(":")[0]


def team_of_function(function: str, stack_name: str) -> str | None:
    """The team whose worker ``function`` is (``<stack>-worker-<team>``, infra/team.yaml's naming),
    or None."""
    prefix = f"{stack_name}-worker-"
    name = function_name(function)
    if not stack_name or not name.startswith(prefix):
        return None
    team = name[len(prefix):]
    return team if TEAM_RE.fullmatch(team) else None


class TeamMapSource(Protocol):
    """Where the team map is (``sluice.backends.aws.team_map.SsmTeamMap``; ``sluice_dev.fakes``)."""

    def read_teams(self) -> dict[str, tuple[str, ...]]: ...


class TeamMapCache(TtlRead[TeamMap]):
    """The team map, read at most once per ``ttl_s``; a failed read keeps the last map (and raises)."""

    def __init__(self, source: TeamMapSource | Lazy[TeamMapSource], *, ttl_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.source = source
        super().__init__(lambda: TeamMap(dict(resolve(self.source).read_teams())), TeamMap(),
                         ttl_s=ttl_s, clock=clock)

    def map(self) -> TeamMap:
        return self.get()

    def last(self) -> TeamMap:
        return self.value

    def forget(self) -> None:
        """Read again on the next use."""
        self.reset()


class CachedRouteLookup:
    """``function_for(queue)``: the routed function, else ``default``.

    For the relay's dispatch. If the routes cannot be read, the last table read is used. Before
    any read succeeded it raises BackendUnavailable instead of guessing: the default worker has
    no handler for a team's queue and would dead-letter its jobs. The relay counts a failed
    dispatch and goes on; each function's safety net still drains its queues.

    A route to any function but ``default`` is followed only when it names a team's worker
    (``<stack_name>-worker-<team>``), its owner is that team, and ``teams`` (the team map) gives
    the queue to that team; otherwise ``RouteRefused``: the relay does not dispatch the queue and
    emits ``DispatchRefused``. The routes table is not trusted alone (issue 27).
    """

    def __init__(self, cache: RouteCache, default: str, *, teams: TeamMapCache | None = None,
                 stack_name: str = "") -> None:
        self.cache, self.default = cache, default
        self.teams, self.stack_name = teams, stack_name

    def __call__(self, queue: str) -> str:
        try:
            route = self.cache.resolve(queue)
        except SluiceError as exc:
            route, why = self.cache.last().resolve(queue), str(exc)
        else:
            why = "the last read failed"
        if not self.cache.has_read:  # also in the pause after a failed read: the table is blank
            raise BackendUnavailable(f"the routes cannot be read yet, so the worker function of {queue} "
                                     f"is unknown ({why})")
        if route is None or function_name(route.function) == function_name(self.default):
            return self.default
        self.check_team(queue, route)
        return route.function

    def check_team(self, queue: str, route: Route) -> None:
        team = team_of_function(route.function, self.stack_name)
        why = ""
        if team is None:
            why = (f"it names {route.function}, which is neither the default worker nor a team's "
                   f"{self.stack_name or '<stack>'}-worker-<team>")
        elif route.owner != team:
            why = f"its owner {route.owner!r} is not the function's team {team!r}"
        elif self.teams is None:
            why = "this relay has no team map (SLUICE_STACK_NAME unset)"
        else:
            try:
                teams = self.teams.map()
            except SluiceError as exc:
                if not self.teams.has_read:
                    raise BackendUnavailable(f"the team map cannot be read yet, so the route of {queue} "
                                             f"cannot be checked ({exc})") from exc
                teams = self.teams.last()
            if not teams.allows(team, queue):
                why = f"the team map does not give queue {queue!r} to team {team!r}"
        if why:
            raise RouteRefused(f"the route of queue {queue!r} ({route.pattern!r} -> {route.function}) is not "
                               f"followed: {why}", queue=queue, function=route.function)
