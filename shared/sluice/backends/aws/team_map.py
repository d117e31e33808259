"""The team map in SSM Parameter Store, and a team's worker describing its handlers (issue 27).

``SsmTeamMap`` (``routes.TeamMapSource``): the StringList parameters under
``/sluice/<stack>/teams/``, one per team, each the queue names and prefixes (``thumbs-*``) the
infra team gave it. Only infra/team.yaml writes them (the infra team deploys that stack); the
relay reads them (``ssm:GetParametersByPath`` on that path) and the registrars get their own
team's copy in their configuration.

``LambdaTeamMap`` (``routes.TeamMapSource`` too): the same map asked of the team map function
(template.yaml ``TeamMapFunction``, ``sluice.entry.teams``), which runs outside the VPC and reads SSM
on its public endpoint, so the relay needs no SSM endpoint in its VPC (issue 33). The relay checks
every entry of the answer as it checks SSM's.

``LambdaWorkerDescriber``: the registrar asks the team's worker function which queues its
handlers module handles and the typed queues' JSON Schemas (a synchronous invoke with
``{"sluice": "describe"}``; ``sluice.entry.worker``). The answer is the team's own code's, so
the registrar trusts none of it: every queue is checked against the team map.
"""

from __future__ import annotations

import logging
from typing import Any

from sluice.backends.aws.clients import OnLambda
from sluice.backends.aws.invoke import invoke_json
from sluice.core.config import Settings
from sluice.core.errors import InvalidInput, SluiceError, StoreError
from sluice.core.routes import TEAM_RE, team_patterns

log = logging.getLogger(__name__)

DESCRIBE_EVENT = {"sluice": "describe"}
TEAMS_EVENT = {"sluice": "teams"}  # the team map function's one event (sluice.entry.teams)


def teams_path(stack_name: str) -> str:
    """The team map's parameter path, ``/sluice/<stack>/teams/`` (template.yaml, infra/team.yaml)."""
    if not stack_name:
        raise InvalidInput("no stack name: set SLUICE_STACK_NAME to read the team map")
    return f"/sluice/{stack_name}/teams/"


class SsmTeamMap:
    """``read_teams``: team -> its queue patterns, from the parameters under ``path``."""

    def __init__(self, client: Any, path: str) -> None:
        self.client, self.path = client, path if path.endswith("/") else path + "/"

    @classmethod
    def from_settings(cls, s: Settings, client: Any = None) -> SsmTeamMap:
        from sluice.backends.aws.clients import boto_client

        return cls(client or boto_client("ssm", s), teams_path(s.stack_name))

    def read_teams(self) -> dict[str, tuple[str, ...]]:
        import botocore.exceptions

        teams: dict[str, tuple[str, ...]] = {}
        try:
            pages = self.client.get_paginator("get_parameters_by_path").paginate(
                Path=self.path, Recursive=False)
            for page in pages:
                for p in page.get("Parameters", []):
                    team = str(p["Name"])[len(self.path):]
                    if not TEAM_RE.fullmatch(team):  # not a team.yaml parameter: ignored, said
                        log.warning("team map: parameter %s does not name a team; ignored", p["Name"])
                        continue
                    try:
                        teams[team] = team_patterns(str(p.get("Value") or ""))
                    except SluiceError as exc:  # one bad entry must not unmap every team
                        log.error("team map: %s is not a list of queue patterns (%s); team %s gets no "
                                  "queue", p["Name"], exc, team)
                        teams[team] = ()
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
            raise StoreError(f"cannot read the team map under {self.path}: {exc}") from exc
        return teams


def checked_teams(entries: object, where: str) -> dict[str, tuple[str, ...]]:
    """``entries`` (team -> its queue patterns, as JSON) checked as ``SsmTeamMap`` checks each
    parameter: a name that is not a team is dropped, a team whose patterns are not valid gets none.
    InvalidInput when ``entries`` is not an object."""
    if not isinstance(entries, dict):
        raise InvalidInput(f"{where} answered no team map: {entries!r:.200}")
    teams: dict[str, tuple[str, ...]] = {}
    for team, patterns in entries.items():
        if not isinstance(team, str) or not TEAM_RE.fullmatch(team):
            log.warning("team map: %s names %r, not a team; ignored", where, team)
            continue
        try:
            if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
                raise InvalidInput(f"{patterns!r:.100} is not a list of names")
            teams[team] = team_patterns(patterns)
        except SluiceError as exc:  # one bad entry must not unmap every team
            log.error("team map: %s gives team %s no list of queue patterns (%s); it gets no queue",
                      where, team, exc)
            teams[team] = ()
    return teams


class LambdaTeamMap(OnLambda):
    """``read_teams`` over a synchronous invoke of the team map function (``sluice.entry.teams``)."""

    def __init__(self, client: Any, function: str) -> None:
        super().__init__(client)
        self.function = function

    @classmethod
    def of(cls, s: Settings, client: Any = None) -> LambdaTeamMap:
        from sluice.backends.aws.clients import lambda_client

        return cls(client or lambda_client(s, read_timeout=10), s.team_map_function_name)

    def read_teams(self) -> dict[str, tuple[str, ...]]:
        what = f"{self.function} (asked for the team map)"
        try:
            answer = invoke_json(self.client, self.function, TEAMS_EVENT, what=what)
        except InvalidInput as exc:  # a reply that is not an object: the last map is kept, said
            raise StoreError(str(exc)) from exc
        if "error" in answer:
            raise StoreError(f"{what} failed: {str(answer['error'])[:300]}")
        try:
            return checked_teams(answer.get("teams"), what)
        except InvalidInput as exc:
            raise StoreError(str(exc)) from exc


class LambdaWorkerDescriber(OnLambda):
    """``registrar.WorkerDescriber`` over a synchronous Lambda invoke of the team's worker."""

    def describe(self, function: str, qualifier: str | None) -> dict[str, Any]:
        return invoke_json(self.client, function, DESCRIBE_EVENT, qualifier=qualifier,
                           what=f"{function} (asked for its handlers)")
