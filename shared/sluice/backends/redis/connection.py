"""The one Redis client every facade of the engine shares (``queue``, ``relay_engine``,
``config``, ``admin``), with its scripts, the registry limits and the queues' keys.

Built once per process by ``sluice.entry.root`` (``from_settings``); the facades are views
over it, so a process that needs several roles opens one client.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import redis

from sluice.backends.redis.auth import RotatingToken
from sluice.backends.redis.checks import text
from sluice.backends.redis.client import connect
from sluice.backends.redis.keys import REGISTRY_LOADED_KEY, QueueKeys
from sluice.backends.redis.scripts import REDIS_ERRORS, Scripts, translate
from sluice.core import read_bounds
from sluice.core.config import Settings
from sluice.core.errors import ConfigError, RegistryCold, SluiceError
from sluice.core.limits import Limits
from sluice.core.models import QUEUE_NAME_RE, is_reserved_queue, validate_queue_name

REGISTRY_LOAD_CHUNK = 1000  # names per registry_load.lua call (its bound)


class RedisConnection:
    """One redis client: a single node, or a cluster client whose scripts each touch one
    queue's keys, so one slot (the ``{queue}`` hash tag)."""

    def __init__(self, client: redis.Redis[Any], limits: Limits | None = None) -> None:
        self.client = client
        self.scripts = Scripts(client)
        self.limits = limits or Limits()  # only the registry limits and the allow-list apply here
        self._keys: dict[str, QueueKeys] = {}
        # The durable registry's names (DynamoDB's queues table; ``sluice.entry.root`` sets it), read
        # when the registry's cache is found cold after a Redis loss; None: Redis holds all there is.
        self.registry_source: Callable[[], Iterable[str]] | None = None
        # The deployment keeps a durable registry (SLUICE_QUEUES_TABLE): a process with no source
        # then refuses to mark a lost cache loaded as it stands (a CLI, a harness), rather than
        # let every gateway decide the limit on a partial set.
        self.registry_required = False

    @classmethod
    def from_url(cls, url: str, limits: Limits | None = None, **kwargs: Any) -> RedisConnection:
        """Over one node (``redis://``, ``rediss://``) or a cluster (``redis+cluster://``,
        ``rediss+cluster://``); no automatic retries either way (``sluice.backends.redis.client``)."""
        return cls(connect(url, **kwargs), limits)

    @classmethod
    def from_settings(cls, settings: Settings) -> RedisConnection:
        """Connected as this function's Redis user: ``redis_username`` and ``redis_password`` when
        a password is given (``sluice dev`` gives each function its user so), else from its secret
        (``redis_auth_secret_arn``: ``{"username", "password"}``, or a bare AUTH token), else as the
        default user."""
        conn = cls._connected(settings)
        conn.registry_required = bool(settings.queues_table)
        return conn

    @classmethod
    def _connected(cls, settings: Settings) -> RedisConnection:
        arn = settings.redis_auth_secret_arn
        limits = Limits.from_settings(settings)
        if settings.redis_password is not None:
            return cls.from_url(settings.redis_url, limits, username=settings.redis_username,
                                password=settings.redis_password.get_secret_value())
        if not arn:
            if settings.redis_username:
                raise ConfigError("SLUICE_REDIS_USERNAME needs SLUICE_REDIS_PASSWORD or "
                                  "SLUICE_REDIS_AUTH_SECRET_ARN (the user's secret)")
            return cls.from_url(settings.redis_url, limits)
        # Credentials that can be read again: after a rotation, WRONGPASS re-reads the secret.
        creds = RotatingToken(lambda: redis_credentials(arn, settings))
        return cls.from_url(settings.redis_url, limits, credential_provider=creds,
                            redis_connect_func=creds.on_connect)

    def close(self) -> None:
        self.client.close()

    def keys(self, queue: str) -> QueueKeys:
        """The (cached) keys of ``queue``; raises InvalidQueueName for a bad name."""
        k = self._keys.get(queue) if type(queue) is str else None
        if k is None:
            k = QueueKeys(validate_queue_name(queue))
            self._keys[queue] = k
        return k

    def register(self, queue: str, *, admitted: bool = False) -> bool:
        """Add ``queue`` to the registry's Redis cache (``register.lua``); True if it was new.

        One ``register.lua`` per enqueue or push call, never skipped: the relay's maintenance
        and the safety net drain only registered queues, and Redis can lose the registry (a
        restart without persistence) while this process still believes it registered. A job
        pushed into an unregistered queue would wait in ready with nobody ever sent to lease it
        (found by the chaos suite; docs/break-it.md). The cost is one round trip per batch.

        Raises QueueNotAllowed for a name off the allow-list, or for a new name once
        the registry holds ``limits.max_queues`` public names (relay maintenance walks every
        registered queue). ``admitted``: a record a gateway already accepted (its 202 is
        binding, issue 28): the limit does not apply (the allow-list, a setting, still does). A
        cache Redis lost is loaded again from ``registry_source`` (the durable registry) before a
        limit is checked.
        """
        mode = self._mode(queue, admitted)
        limit = self.limits.registry_limit(queue)
        try:
            return self.scripts.register(queue, limit, mode)
        except RegistryCold:
            self.load_registry()
            return self.scripts.register(queue, limit, mode)

    def register_all(self, queues: set[str], *, admitted: bool = False) -> dict[str, SluiceError]:
        """``register`` for several queues in one round trip; the refused ones, with why."""
        refused: dict[str, SluiceError] = {}
        asked: list[tuple[str, int, str]] = []
        for queue in sorted(queues):
            try:
                asked.append((queue, self.limits.registry_limit(queue), self._mode(queue, admitted)))
            except SluiceError as exc:
                refused[queue] = exc
        replies = self.scripts.register_many(asked)
        cold = [a for a, r in zip(asked, replies, strict=True) if isinstance(r, RegistryCold)]
        if cold:
            self.load_registry()
            warm = [(a, r) for a, r in zip(asked, replies, strict=True) if not isinstance(r, RegistryCold)]
            asked = [a for a, _ in warm] + cold
            replies = [r for _, r in warm] + self.scripts.register_many(cold)
        refused.update((a[0], r) for a, r in zip(asked, replies, strict=True) if isinstance(r, SluiceError))
        return refused

    def _mode(self, queue: str, admitted: bool) -> str:
        if is_reserved_queue(queue):
            return "reserved"
        self.limits.check_name(queue)  # the operator's allow-list: the gateway checked it before its 202 too
        return "admitted" if admitted else "limit"

    def warm_registry(self) -> bool:
        """Load the registry's Redis cache from ``registry_source`` if Redis lost it (its loaded mark
        is gone), before a reader walks it: the relay's maintenance walks only the cache, and on a
        cluster the loss of the registry's shard alone would otherwise leave the queues of the shards
        that kept their data unreaped and unsettled until a record of theirs arrived (issue 29, item
        3). One GET when the cache is warm; without a durable registry there is nothing to load.
        True if it loaded."""
        if self.registry_source is None:
            return False
        try:
            loaded = self.client.get(REGISTRY_LOADED_KEY)
        except REDIS_ERRORS as exc:
            raise translate(exc) from exc
        if loaded is not None:
            return False
        self.load_registry()
        return True

    def load_registry(self) -> int:
        """Load the registry's Redis cache from ``registry_source`` (none: the cache is all there is,
        so it is marked loaded as it stands), ``REGISTRY_LOAD_CHUNK`` names per atomic call, the
        last one marking it loaded: until then every limit check finds it cold and loads too (the
        loads add the same names). How many names were new to the cache."""
        if self.registry_source is None and self.registry_required:
            raise RegistryCold("the registry's Redis cache was lost and this process cannot load it from "
                               "the durable registry (SLUICE_QUEUES_TABLE): a gateway or the relay loads it")
        names = sorted({n for n in (self.registry_source() if self.registry_source else ())
                        if QUEUE_NAME_RE.fullmatch(n) and not is_reserved_queue(n)})
        chunks = [names[i:i + REGISTRY_LOAD_CHUNK] for i in range(0, len(names), REGISTRY_LOAD_CHUNK)] or [[]]
        last = len(chunks) - 1
        return sum(self.scripts.registry_load(chunk, last=i == last) for i, chunk in enumerate(chunks))

    def oldest_with_fields(self, zset: str, prefix: str, limit: int, fields: tuple[str, ...],
                           job_id_of: Callable[[Any], str] | None = None, max_bytes: int | None = None,
                           ) -> list[tuple[str, int, list[Any]]]:
        """(member, score, the member's job-hash fields) for the ``limit`` lowest scores of
        ``zset``: two round trips, a read, so no script. ``max_bytes``: each field is read only
        within that many bytes (None when longer), and each job hash once however many members name
        it (``bounded_fields``)."""
        job_id_of = job_id_of or text
        try:
            entries = self.client.zrange(zset, 0, limit - 1, withscores=True)
            keys = [prefix + job_id_of(member) for member, _ in entries]
            if max_bytes is not None:
                values = self.bounded_fields(keys, fields, max_bytes)
            else:
                pipe = self.client.pipeline(transaction=False)
                for key in keys:
                    pipe.hmget(key, *fields)
                values = pipe.execute()
        except REDIS_ERRORS as exc:
            raise translate(exc) from exc
        return [(text(m), int(score), [None if v is None else text(v) for v in f])
                for (m, score), f in zip(entries, values, strict=True)]

    def bounded_fields(self, keys: list[str], fields: tuple[str, ...], max_bytes: int) -> list[list[Any]]:
        """``fields`` of each hash of ``keys``, a field longer than ``max_bytes`` read as None: the
        keys a team's own Redis user may write (session 36). Its settle set may name one job many
        times (``dead:0:j``, ``dead:1:j`` ...) and that job's err may be 10 MB: read whole, 100 such
        members made one maintenance read 1 GB (684 ms in Redis, 2 GB in the relay). Lengths first
        (HSTRLEN), then the fields within the bound, each distinct hash once: two round trips. A user
        whose access string predates HSTRLEN (NOPERM) reads them whole, as before."""
        distinct = list(dict.fromkeys(keys))
        pipe = self.client.pipeline(transaction=False)
        for key in distinct:
            for field in fields:
                pipe.hstrlen(key, field)  # type: ignore[no-untyped-call]
        try:
            flat = [int(n) for n in pipe.execute()] if distinct else []
            ok = [0 < n <= max_bytes for n in flat]
        except redis.exceptions.NoPermissionError:
            ok = [True] * (len(distinct) * len(fields))  # read whole, as before HSTRLEN
        # One HMGET per hash, of its fields within the bound.
        wanted = [[f for j, f in enumerate(fields) if ok[i * len(fields) + j]] for i in range(len(distinct))]
        pipe = self.client.pipeline(transaction=False)
        for key, names in zip(distinct, wanted, strict=True):
            if names:
                pipe.hmget(key, names)
        replies = iter(pipe.execute() if any(wanted) else [])
        read = {key: dict(zip(names, next(replies), strict=True)) if names else {}
                for key, names in zip(distinct, wanted, strict=True)}
        return [[read[key].get(field) for field in fields] for key in keys]

    def list_tail(self, key: str, count: int, most_bytes: int, what: str) -> list[Any]:
        """The last ``count`` entries of a list a team's own Redis user may write, read only when the
        whole list takes at most ``most_bytes`` of memory (``read_bounds.check_list_size``; MEMORY
        USAGE with every node counted, O(nodes)): two round trips. A user whose access string
        predates ``memory|usage`` (NOPERM) reads it as before."""
        try:
            try:
                used = self.client.memory_usage(key, samples=0)
            except redis.exceptions.NoPermissionError:
                used = None
            read_bounds.check_list_size(what, used, most_bytes)
            return list(self.client.lrange(key, -count, -1))
        except REDIS_ERRORS as exc:
            raise translate(exc) from exc


def redis_credentials(arn: str, settings: Settings) -> tuple[str | None, str]:
    """(username, password) of this function's Redis user from Secrets Manager: ElastiCache RBAC's
    ``{"username": ..., "password": ...}``; a bare token or ``{"password": ...}`` without a username
    (AUTH <token>) unless ``settings.redis_username`` names one. ConfigError when the secret and
    the settings name different users."""
    import json

    from sluice.backends.aws.secrets import secret_string
    from sluice.core.errors import BackendUnavailable

    secret = secret_string(arn, settings, "Redis user secret")
    username: str | None = None
    if secret.startswith("{"):
        value = json.loads(secret)
        username = value.get("username") or None
        secret = value.get("password") or value.get("token") or value.get("auth_token") or ""
    if not secret:
        raise BackendUnavailable(f"the secret {arn} holds no Redis password")
    if username and settings.redis_username and username != settings.redis_username:
        raise ConfigError(f"the secret {arn} is Redis user {username!r}, but SLUICE_REDIS_USERNAME says "
                          f"{settings.redis_username!r}")
    return (str(username) if username else settings.redis_username), str(secret)


def redis_auth_token(arn: str, settings: Settings) -> str:
    """The password (or bare AUTH token) in the secret ``arn`` (``redis_credentials``)."""
    return redis_credentials(arn, settings)[1]
