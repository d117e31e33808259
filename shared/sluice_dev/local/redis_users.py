"""``sluice dev``'s Redis users: the same ACL users as ElastiCache RBAC in AWS (template.yaml).

Each local function that reads Redis connects as its own user (``SLUICE_REDIS_USERNAME`` and
``SLUICE_REDIS_PASSWORD``, where AWS gives it its user's secret), with the rules of its role
(``sluice.backends.redis.acl``); each ``--worker NAME=MODULE`` team gets a user whose keys are
the queues routed to it (its module's handlers). Passwords are new at every start.

One local difference, named in the endpoints (``redis_default_user``) and docs/security.md: the
``default`` user stays on, with no password and every right, for the local tooling (``sluice top``,
the console, the safety net and streams run by ``sluice dev`` itself, the chaos suite), where
ElastiCache's default user is off. Every function's connection AUTHs as its own user.
"""

from __future__ import annotations

import secrets
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from sluice.backends.redis import acl

# The local tooling's: every right (ElastiCache's default user is off).
DEFAULT_USER_LINE = "user default on nopass ~* &* +@all"
DEFAULT_USER_WHY = ("the local tooling's (sluice top, the console, sluice dev's safety net and streams): on, "
                    "no password, every right; in AWS the default user is off and every function AUTHs as "
                    "its own")


@dataclass(frozen=True)
class LocalRedisUser:
    username: str
    password: str
    role: acl.Role
    queues: tuple[str, ...] | None = None  # a team's queues; None: the role's own key scope

    def rules(self) -> list[str]:
        return acl.rules(self.role, self.queues)

    def acl_line(self) -> str:
        return acl.acl_file_line(self.username, self.password, self.role, self.queues)

    def setuser(self) -> list[str]:
        return acl.setuser_args(self.username, self.password, self.role, self.queues)

    def env(self) -> dict[str, str]:
        return {"SLUICE_REDIS_USERNAME": self.username, "SLUICE_REDIS_PASSWORD": self.password}


def plan(functions: Mapping[str, str], teams: Mapping[str, tuple[str, Collection[str]]]
         ) -> dict[str, LocalRedisUser]:
    """The users: per template function (logical id -> local name, e.g. GatewayFunction ->
    sluice-gateway) that reads Redis, keyed by logical id; per team (name -> (its function's
    name, its queues)), keyed ``team:<name>``."""
    out: dict[str, LocalRedisUser] = {}
    for logical_id, name in functions.items():
        role = acl.function_role(logical_id)
        if role is not None:
            out[logical_id] = LocalRedisUser(name, secrets.token_urlsafe(24), role)
    for team, (name, queues) in teams.items():
        out[f"team:{team}"] = LocalRedisUser(name, secrets.token_urlsafe(24), acl.WORKER,
                                             tuple(sorted(queues)))
    return out


def acl_file(path: Path, users: Collection[LocalRedisUser]) -> Path:
    """Write a redis-server ``aclfile`` with the default user and ``users`` (hashed passwords)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join([DEFAULT_USER_LINE, *(u.acl_line() for u in users)]) + "\n")
    path.chmod(0o600)
    return path
