"""The team map function (template.yaml ``TeamMapFunction``, ``functions/teams/app.py``; issue 33).

It answers the relay's ``{"sluice": "teams"}`` with the team map, read from SSM
(``/sluice/<stack>/teams/``, ``backends.aws.team_map.SsmTeamMap``), as
``{"teams": {team: [pattern, ...]}}``. It runs outside the VPC, so it reaches SSM's public endpoint
and the VPC needs no SSM endpoint; the relay asks it over the Lambda endpoint it has anyway
(``backends.aws.team_map.LambdaTeamMap``). Its role may read that path alone, and its resource policy
admits the relay's role alone (docs/security.md, One function per caller). Every other event is
refused before anything is read; a failed read raises, so the relay keeps the map it has.
"""

from __future__ import annotations

import logging
from typing import Any

from sluice.backends.aws.team_map import TEAMS_EVENT

log = logging.getLogger(__name__)


def handler(event: Any, context: Any) -> dict[str, Any]:
    if event != TEAMS_EVENT:
        log.error("team map function: refused an event that is not the relay's %s", TEAMS_EVENT)
        return {"error": {"code": "WRONG_FUNCTION", "message": "the team map function answers "
                                                              f"{TEAMS_EVENT} only; nothing was read"}}
    from sluice.backends.aws.team_map import SsmTeamMap
    from sluice.entry import root as wiring

    teams = SsmTeamMap.from_settings(wiring.settings()).read_teams()
    return {"teams": {team: list(patterns) for team, patterns in sorted(teams.items())}}
