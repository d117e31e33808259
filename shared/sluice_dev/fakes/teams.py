"""In-memory fakes of the teams' ports (issue 27): the team map (``routes.TeamMapSource``), the
routes table (``backends.dynamodb.routes.RouteStore``) and a team worker describing its handlers
(``registrar.register.WorkerDescriber``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sluice.core.errors import BackendUnavailable, RouteConflict
from sluice.core.routes import Route, team_patterns


class FakeTeamMap:
    """The SSM parameters under ``/sluice/<stack>/teams/``: team -> "a,b,thumbs-*"."""

    def __init__(self, teams: Mapping[str, str] | None = None) -> None:
        self.teams = dict(teams or {})
        self.reads = 0
        self.broken = False

    def read_teams(self) -> dict[str, tuple[str, ...]]:
        self.reads += 1
        if self.broken:
            raise BackendUnavailable("the team map cannot be read (FakeTeamMap.broken)")
        return {team: team_patterns(value) for team, value in self.teams.items()}


class FakeRouteStore:
    """The routes table; ``put_routes`` honours the table's condition (nobody else owns the key)."""

    def __init__(self, routes: Sequence[Route] = ()) -> None:
        self.routes = {r.pattern: r for r in routes}
        self.writes = 0

    def list_routes(self) -> list[Route]:
        return list(self.routes.values())

    def put_routes(self, owner: str, routes: Sequence[Route], stale: Sequence[Route]) -> None:
        for r in [*routes, *stale]:
            held = self.routes.get(r.pattern)
            if held is not None and held.owner != owner:
                raise RouteConflict(f"queue pattern {r.pattern!r} is routed by another owner",
                                    pattern=r.pattern)
        self.writes += 1
        for r in stale:
            self.routes.pop(r.pattern, None)
        self.routes.update({r.pattern: r for r in routes})

    def delete_route(self, pattern: str, owner: str | None) -> Route:
        return self.routes.pop(pattern)


class FakeDescriber:
    """A team worker's answer to ``{"sluice": "describe"}``: function -> its queues and schemas."""

    def __init__(self, answers: Mapping[str, Mapping[str, Any]]) -> None:
        self.answers = dict(answers)
        self.calls: list[tuple[str, str | None]] = []

    def describe(self, function: str, qualifier: str | None) -> dict[str, Any]:
        self.calls.append((function, qualifier))
        if function not in self.answers:
            raise BackendUnavailable(f"no function {function}")
        return dict(self.answers[function])


if TYPE_CHECKING:  # each fake is its port's: mypy --strict checks these, nothing runs them
    from sluice.backends.dynamodb.routes import RouteStore
    from sluice.core.routes import TeamMapSource
    from sluice.registrar.register import WorkerDescriber

    _MAP: TeamMapSource = FakeTeamMap()
    _ROUTES: RouteStore = FakeRouteStore()
    _DESCRIBER: WorkerDescriber = FakeDescriber({})
