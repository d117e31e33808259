"""A registrar: registers a worker's routes and declared schedules; a team's, only for the queues
the team map gives its team.

Each team has its own registrar function, ``<stack>-registrar-<team>`` (infra/team.yaml, which
the infra team deploys). Its configuration, not the request, holds the team's name and the queue
patterns the team map gives it, and its resource policy admits only the team's deploy roles. So a
``Custom::SluiceRoutes`` request is trusted for nothing but what it asks: the function it routes to
is always ``<stack>-worker-<team>`` and the owner always ``<team>``, whatever the event's
``StackId``, ``ServiceToken``, ``Owner`` or function name claim (one that names another team or
function is refused, so a forged request fails loudly rather than quietly doing something else).

The queues come from the team's worker itself (``WorkerDescriber``: its handlers module's queues
and typed queues' JSON Schemas), the prefixes from the request's ``Patterns``; each route must lie
within the team's patterns (``routes.check_within_map``), and the usual checks follow
(``backends.dynamodb.routes.register``: no other owner's overlapping pattern, valid schemas). Every
check runs before the one conditional transaction that writes: a refusal writes nothing.

Schedules declared in the team's code (``app.schedule``, issue 31) come with the describe answer
and are registered here too (``registrar.schedules``): only on queues within the team's map and
routed by this registration, checked with the routes before anything is written; those the code
no longer declares are deleted, and the stack's Delete removes them all. A request that carries
``Schedules`` in its properties is refused: the code, not the request, declares them. The request's
``Declarations``, when given, must be the digest of what the worker describes (``core.declared``):
it is there so that CloudFormation runs the registration when the code's declarations change, and
a digest of other code means the deploy passed the wrong one.

Sluice's own stack has one more registrar (``Registrar.default``; template.yaml's
``RegistrarFunction``, issue 31), for its default worker: the same requests and checks, owner
``sluice``, the worker its configuration names (``SLUICE_WORKER_FUNCTION_NAME``), and no team map
(the infra team deploys that worker's code): its routes may be any queue no other owner routes, and
its schedules any queue those routes cover. The worker function runs handler code, so it holds no
Scheduler rights; this registrar holds them and asks the worker what it declares.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from sluice.backends.dynamodb.routes import RouteStore, register, unregister
from sluice.core import declared as code
from sluice.core.errors import InvalidInput, RegistrationRefused
from sluice.core.routes import TEAM_RE, RouteTable, check_within_map, function_name, routes_for, team_patterns
from sluice.registrar.schedules import CodeSchedules, plan_declared

FAILED_PREFIX = "sluice-registrar-failed:"  # the physical id of a Create that wrote nothing
_VERSION_RE = re.compile(r"^[0-9]{1,10}$")


class WorkerDescriber(Protocol):
    """The team worker's queues and schemas (``backends.aws.team_map.LambdaWorkerDescriber``)."""

    def describe(self, function: str, qualifier: str | None) -> dict[str, Any]: ...


def worker_function(stack_name: str, team: str) -> str:
    return f"{stack_name}-worker-{team}"


@dataclass
class Registrar:
    team: str  # the owner of what it registers: a team, or code.SLUICE_OWNER (``default``)
    allowed: tuple[str, ...] | None  # the team map's patterns for ``team``; None: no map (``default``)
    function: str  # <stack>-worker-<team>, or Sluice's default worker
    store: RouteStore
    describer: WorkerDescriber
    schedules: CodeSchedules | None = None  # None: no schedules table, so no schedule may be declared

    @classmethod
    def of(cls, stack_name: str, team: str, queues: str | Sequence[str], store: RouteStore,
           describer: WorkerDescriber, schedules: CodeSchedules | None = None) -> Registrar:
        if not stack_name or not TEAM_RE.fullmatch(team or ""):
            raise InvalidInput(f"a registrar needs its stack and team (SLUICE_STACK_NAME, "
                               f"SLUICE_REGISTRAR_TEAM); got {stack_name!r}, {team!r}")
        return cls(team, team_patterns(queues), worker_function(stack_name, team), store, describer,
                   schedules)

    @classmethod
    def default(cls, function: str, store: RouteStore, describer: WorkerDescriber,
                schedules: CodeSchedules | None = None) -> Registrar:
        """Sluice's default worker's registrar (template.yaml's ``RegistrarFunction``): owner
        ``sluice``, ``function`` from its configuration, no team map."""
        if not function or ":" in function:
            raise InvalidInput(f"the default worker's registrar needs the worker's function name "
                               f"(SLUICE_WORKER_FUNCTION_NAME); got {function!r}")
        return cls(code.SLUICE_OWNER, None, function, store, describer, schedules)

    @property
    def whose(self) -> str:
        if self.allowed is None:
            return f"Sluice's default worker (owner {self.team!r})"
        return f"team {self.team!r}"

    @property
    def physical_id(self) -> str:
        return f"sluice-registrar:{self.team}:{self.function}"

    def apply(self, event: Mapping[str, Any]) -> tuple[str, dict[str, str]]:
        """The routes change one request asks for; (physical id, data). Raises on refusal."""
        kind = event.get("RequestType")
        if kind == "Delete":
            known = str(event.get("PhysicalResourceId") or "")
            if known.startswith(FAILED_PREFIX):  # its Create was refused: it wrote nothing
                return known, {"Removed": ""}
            gone = unregister(self.store, owner=self.team, function=self.function)
            dropped = code.SchedulePlan() if self.schedules is None else self.schedules.remove_all(self.team)
            return self.physical_id, {"Removed": ",".join(r.pattern for r in gone), **dropped.data(())}
        if kind not in ("Create", "Update"):
            raise InvalidInput(f"unknown RequestType {kind!r}")
        props = event.get("ResourceProperties") or {}
        if not isinstance(props, Mapping):
            raise InvalidInput("ResourceProperties must be an object")
        self.refuse_claims(props)
        described = self.describer.describe(self.function, qualifier(props.get("Version")))
        queues, schemas = described.get("queues"), described.get("schemas") or {}
        if not isinstance(queues, list) or not isinstance(schemas, dict):
            raise InvalidInput(f"{self.function} did not describe its handlers (queues, schemas)")
        declared = code.from_answer(described.get("schedules"))
        check_digest(props, code.digest([str(q) for q in queues], schemas, declared))
        wanted = routes_for(self.function, self.team, [str(q) for q in queues], schemas, patterns(props))
        if self.allowed is not None:
            check_within_map(wanted, self.team, self.allowed)
        changes = plan_declared(self.schedules, self.team, self.allowed, declared, RouteTable(wanted))
        stale = register(self.store, None, wanted, owner=self.team, function=self.function)
        if self.schedules is not None:
            self.schedules.apply(changes)
        return self.physical_id, {"Routes": ",".join(r.pattern for r in wanted),
                                  "Typed": ",".join(sorted(q for r in wanted for q in r.schemas)),
                                  "Removed": ",".join(r.pattern for r in stale), **changes.data(declared)}


    def refuse_claims(self, props: Mapping[str, Any]) -> None:
        owner = props.get("Owner")
        if owner not in (None, "", self.team):
            raise RegistrationRefused(f"this registrar registers {self.whose}'s routes; the request "
                                      f"names owner {owner!r}. Nothing was written")
        for key in ("Function", "FunctionName"):
            named = props.get(key)
            if named not in (None, "") and function_name(str(named)) != self.function:
                raise RegistrationRefused(f"this registrar routes queues to {self.function} only; the "
                                          f"request names {named!r}. Nothing was written")
        if props.get("Schedules"):
            raise RegistrationRefused("schedules are not taken from the request: declare them in the "
                                      "handlers' code (app.schedule, docs/worker.md) or create them through "
                                      "the operator API (docs/api.md, Schedules). Nothing was written")


def check_digest(props: Mapping[str, Any], found: str) -> None:
    """The request's ``Declarations``, if any, must be the digest of what the worker describes."""
    given = str(props.get("Declarations") or "")
    if given and given != found:
        raise RegistrationRefused(
            f"Declarations is {given[:80]!r}, but the worker's code declares {found!r}: pass the digest "
            "of the code you deploy (sluice routes digest <handlers module>); nothing was written")


def qualifier(version: object) -> str | None:
    """The worker's published version the request names (so each deploy describes its own code)."""
    text = str(version) if version is not None else ""
    return text if _VERSION_RE.fullmatch(text) else None


def patterns(props: Mapping[str, Any]) -> list[str]:
    found = props.get("Patterns") or []
    if isinstance(found, str):
        found = [p.strip() for p in found.split(",") if p.strip()]
    if not isinstance(found, list):
        raise InvalidInput("Patterns must be a list of queue prefixes like thumbs-*")
    return [str(p) for p in found]


def response_url_ok(url: str, local_endpoint: str | None) -> bool:
    """Whether the registrar may PUT its answer to ``url``: CloudFormation's pre-signed S3 URL
    (https, an amazonaws.com host), or the local stack's S3 (``sluice dev``). Anything else is
    refused, so an invoker cannot make the registrar send requests where it likes."""
    parts = urlsplit(url)
    if parts.scheme == "https" and (parts.hostname or "").endswith(".amazonaws.com"):
        return True
    if local_endpoint:
        local = urlsplit(local_endpoint)
        return (parts.scheme, parts.netloc) == (local.scheme, local.netloc)
    return False
