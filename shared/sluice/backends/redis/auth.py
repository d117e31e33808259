"""The Redis AUTH token as a credential that can be read again: rotation without restarts.

ElastiCache rotates the token with its ROTATE strategy (old and new both valid) and later
drops the old one (infra/secret_rotation/app.py). A connection opened before the change stays
authenticated; a new one that offers a stale token meets WRONGPASS. ``RotatingToken`` then
reads the secret again (through ``sluice.backends.aws.secrets``, via the reader it was given) and offers
the new token once on the same connection. Retrying is safe: AUTH runs before any command,
so nothing ran. A second refusal propagates (redis' AuthenticationError, which
``scripts.translate`` turns into BackendUnavailable).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import redis
from redis.credentials import CredentialProvider

log = logging.getLogger(__name__)


class RotatingToken(CredentialProvider):
    """The AUTH token from ``read`` (cached), read again when Redis refuses it."""

    def __init__(self, read: Callable[[], str]) -> None:
        self._read = read
        self._lock = threading.Lock()
        self._token = read()

    def get_credentials(self) -> tuple[str]:
        return (self._token,)

    def refresh(self, refused: str) -> bool:
        """Read the token again if ``refused`` is still the cached one; True if it changed."""
        with self._lock:
            if self._token == refused:
                self._token = self._read()
            return self._token != refused

    def on_connect(self, connection: Any) -> None:
        """``redis_connect_func``: AUTH as usual; on a refusal, re-read and AUTH once more."""
        offered = self._token
        try:
            connection.on_connect()
        except redis.exceptions.AuthenticationError:
            if not self.refresh(offered):
                raise
            log.warning("redis refused the AUTH token; read it again from its secret and retrying once")
            connection.on_connect()
