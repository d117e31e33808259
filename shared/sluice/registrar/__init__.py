"""A team's registrar (issue 27): the only writer of a team's routes (docs/teams.md)."""
