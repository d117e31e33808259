"""Schedules declared in code (issue 31, item 5). Pure: no I/O, no clock.

    app.schedule("nightly-report", "cron(0 3 * * ? *)", queue="reports", payload={"kind": "daily"})

A handlers module declares them next to its handlers (``Worker.schedule``); the worker describes them
with its queues (``entry.worker.describe``), and at deploy the team's registrar (or Sluice's registrar,
for its default worker's, owner ``sluice``) registers them: created, updated and removed as the code
changes. A stored schedule carries its ``owner``: the team whose code declared it (``sluice``: the
default worker's), or ``""`` for one created through
the operator API, which a deploy never touches; a declared schedule whose queue and name an
operator's (or another owner's) schedule holds is refused, not taken over.

``digest``: what a registration takes from the code (queues, schemas, schedules), hashed. A deploy
passes it as the custom resource's ``Declarations`` property, so a change to any of them changes
the resource and CloudFormation runs the registration again (``sluice routes digest MODULE``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from pydantic import BaseModel

from sluice.core.errors import InvalidInput, InvalidSchedule, RegistrationRefused
from sluice.core.models import validate_public_queue
from sluice.core.routes import RouteTable, TeamMap, payload_errors
from sluice.core.schedules import Schedule, check_name, parse

MAX_DECLARED: Final = 100  # schedules one handlers module declares
# The owner of Sluice's default worker's routes and declared schedules (template.yaml's registrar):
# a team's are owned by the team.
SLUICE_OWNER: Final = "sluice"
MAX_PAYLOAD_BYTES: Final = 64 * 1024  # one stored item stays far below DynamoDB's 400 KB
# EventBridge Scheduler's names are 1-64 characters; a declared schedule's is ``queue.name`` whole
# (never ``scheduler_name``'s hashed form), so the registrar's grant can name a team's schedules by
# their queues' prefixes (infra/team.yaml).
MAX_SCHEDULER_NAME: Final = 64


def _jsonable(payload: Any, what: str) -> Any:
    if isinstance(payload, BaseModel):
        payload = payload.model_dump(mode="json")
    try:
        text = json.dumps(payload, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidSchedule(f"{what}: the payload is not JSON ({exc})") from None
    if len(text.encode()) > MAX_PAYLOAD_BYTES:
        raise InvalidSchedule(f"{what}: the payload is {len(text.encode())} bytes of JSON; a declared "
                              f"schedule's may be {MAX_PAYLOAD_BYTES}")
    return json.loads(text)


@dataclass(frozen=True)
class Declared:
    """One schedule a handlers module declares: every firing enqueues ``payload`` on ``queue``."""

    name: str
    expression: str
    queue: str
    payload: Any = None

    @classmethod
    def of(cls, name: object, expression: object, queue: object, payload: Any = None) -> Declared:
        """Checked as the operator API checks a new schedule (name, expression, queue), plus a JSON
        payload (a pydantic model is dumped) and a Scheduler name that needs no hashing."""
        check_name(name)
        parse(expression)
        validate_public_queue(queue)
        assert isinstance(name, str) and isinstance(expression, str) and isinstance(queue, str)
        what = f"schedule {queue}/{name}"
        if len(queue) + 1 + len(name) > MAX_SCHEDULER_NAME:
            raise InvalidSchedule(f"{what}: a schedule declared in code needs queue and name of at most "
                                  f"{MAX_SCHEDULER_NAME - 1} characters together; shorten the name")
        return cls(name, expression.strip(), queue, _jsonable(payload, what))

    @property
    def key(self) -> tuple[str, str]:
        return self.queue, self.name

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "expression": self.expression, "queue": self.queue,
                "payload": self.payload}

    def stored(self, owner: str, start_ms: int, paused: bool = False) -> Schedule:
        return Schedule(self.name, self.expression, self.queue, self.payload, start_ms, paused, owner)


def from_answer(items: object) -> list[Declared]:
    """The ``schedules`` of a worker's describe answer, checked again: it is the team's code's."""
    if items is None:
        return []
    if not isinstance(items, list) or len(items) > MAX_DECLARED:
        raise InvalidInput(f"the worker's schedules must be a list of at most {MAX_DECLARED}")
    out = []
    for item in items:
        if not isinstance(item, Mapping) or not {"name", "expression", "queue"} <= item.keys():
            raise InvalidInput("each of the worker's schedules needs name, expression and queue")
        out.append(Declared.of(item["name"], item["expression"], item["queue"], item.get("payload")))
    check_unique(out)
    return out


def check_unique(declared: Iterable[Declared]) -> None:
    seen: set[tuple[str, str]] = set()
    for d in declared:
        if d.key in seen:
            raise InvalidSchedule(f"schedule {d.queue}/{d.name} is declared twice")
        seen.add(d.key)


def digest(queues: Iterable[str], schemas: Mapping[str, Any], declared: Iterable[Declared]) -> str:
    """What a registration takes from the code, hashed: equal inputs give equal digests."""
    body = {"queues": sorted(set(queues)), "schemas": dict(schemas),
            "schedules": sorted((d.as_dict() for d in declared), key=lambda d: (d["queue"], d["name"]))}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return "sha256-" + hashlib.sha256(text.encode()).hexdigest()[:32]


def check_targets(declared: Sequence[Declared], team: str, allowed: Sequence[str] | None,
                  routes: RouteTable) -> None:
    """RegistrationRefused, naming the first, unless every declared schedule's queue is within the
    team's map (``allowed``; None: no map, Sluice's own worker) and routed by this registration's
    ``routes``, and its payload fits the queue's schema. Runs before any write."""
    for d in declared:
        where = f"schedule {d.queue}/{d.name}"
        if allowed is not None and not TeamMap({team: tuple(allowed)}).allows(team, d.queue):
            raise RegistrationRefused(
                f"{where} targets queue {d.queue!r}, which the team map does not give team {team!r} "
                f"(it gives {', '.join(allowed) or 'no queue'}): a team's code may schedule jobs on its "
                "own queues only; nothing was written", pattern=d.queue, team=team)
        if routes.resolve(d.queue) is None:
            raise RegistrationRefused(f"{where}: no handler of this worker, and no pattern, routes queue "
                                      f"{d.queue!r}; nothing was written", pattern=d.queue, team=team)
        schema = routes.schema(d.queue)
        errors = payload_errors(schema, d.payload) if schema is not None else []
        if errors:
            shown = "; ".join(f"{p}: {m}" for p, m in errors[:3])
            raise RegistrationRefused(f"{where}: the payload does not match queue {d.queue!r}'s schema "
                                      f"({shown}); nothing was written", pattern=d.queue, team=team)


@dataclass(frozen=True)
class SchedulePlan:
    """What a registration changes in the schedules table to match the code."""

    create: tuple[Schedule, ...] = ()
    update: tuple[Schedule, ...] = ()
    delete: tuple[Schedule, ...] = ()

    def data(self, declared: Iterable[Declared]) -> dict[str, str]:
        """The custom resource's answer (``Fn::GetAtt``-able): what is declared, what was removed."""
        return {"Schedules": ",".join(sorted(f"{d.queue}/{d.name}" for d in declared)),
                "SchedulesRemoved": ",".join(sorted(f"{s.queue}/{s.name}" for s in self.delete))}


def plan(declared: Sequence[Declared], stored: Iterable[Schedule], owner: str, now_ms: int) -> SchedulePlan:
    """The changes that make ``owner``'s stored schedules the declared ones.

    ``stored``: the owner's schedules and any other at a declared queue and name. A declared one
    that exists is updated when its expression or payload changed (a new expression starts its rate
    phase now; a pause an operator set stays); one that does not is created; one of the owner's
    that the code no longer declares is deleted. A declared queue and name that an operator's
    schedule (owner ``""``) or another owner's holds is refused: a deploy never takes one over."""
    check_unique(declared)
    found = {(s.queue, s.name): s for s in stored}
    create, update = [], []
    for d in declared:
        have = found.get(d.key)
        if have is None:
            create.append(d.stored(owner, now_ms))
        elif have.owner != owner:
            by = f"team {have.owner!r}'s code" if have.owner else "the operator API"
            raise RegistrationRefused(
                f"schedule {d.queue}/{d.name} exists, created by {by}, and a deploy does not take it "
                f"over: delete it (sluice schedules delete {d.queue} {d.name}) or declare another name; "
                "nothing was written", pattern=d.queue, team=owner)
        elif (have.expression, have.payload) != (d.expression, d.payload):
            start = have.start_ms if have.expression == d.expression else now_ms
            update.append(d.stored(owner, start, have.paused))
    names = {d.key for d in declared}
    delete = [s for s in found.values() if s.owner == owner and (s.queue, s.name) not in names]
    return SchedulePlan(tuple(create), tuple(update), tuple(sorted(delete, key=lambda s: (s.queue, s.name))))
