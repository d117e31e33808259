"""The Redis credentials as a credential that can be read again: rotation without restarts.

A function's credentials are its ElastiCache RBAC user's (``{"username", "password"}`` in its
own secret; docs/security.md, "Redis users"), or a bare AUTH token (a deployment before RBAC).

The rotation gives the user its new password beside the current one (both valid) and drops
the older at the next rotation (infra/secret_rotation/app.py). A connection opened before the
change stays authenticated; a new one that offers a stale password meets WRONGPASS.
``RotatingToken`` then reads the secret again (through ``sluice.backends.aws.secrets``, via the
reader it was given) and offers the new credentials once on the same connection. Retrying is
safe: AUTH runs before any command, so nothing ran. A second refusal propagates (redis'
AuthenticationError, which ``scripts.translate`` turns into BackendUnavailable).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import redis
from redis.credentials import CredentialProvider

log = logging.getLogger(__name__)


Credentials = tuple[str | None, str]  # (username or None for the default user, password)


class RotatingToken(CredentialProvider):
    """The credentials from ``read`` (cached), read again when Redis refuses them. ``read``
    returns a bare token (AUTH <token>) or (username, password) (AUTH <username> <password>)."""

    def __init__(self, read: Callable[[], str | Credentials]) -> None:
        self._read = read
        self._lock = threading.Lock()
        self._creds = self._fetch()

    def _fetch(self) -> Credentials:
        value = self._read()
        return (None, value) if isinstance(value, str) else value

    def get_credentials(self) -> tuple[str] | tuple[str, str]:
        username, password = self._creds
        return (password,) if username is None else (username, password)

    def refresh(self, refused: str | Credentials) -> bool:
        """Read the credentials again if ``refused`` are still the cached ones; True if they changed."""
        refused = (None, refused) if isinstance(refused, str) else refused
        with self._lock:
            if self._creds == refused:
                self._creds = self._fetch()
            return self._creds != refused

    def on_connect(self, connection: Any) -> None:
        """``redis_connect_func``: AUTH as usual; on a refusal, re-read and AUTH once more."""
        offered = self._creds
        try:
            connection.on_connect()
        except redis.exceptions.AuthenticationError:
            if not self.refresh(offered):
                raise
            log.warning("redis refused this function's credentials; read them again from the secret "
                        "and retrying once")
            connection.on_connect()
