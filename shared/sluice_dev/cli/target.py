"""Which Sluice a CLI command talks to: the local stack, or deployed endpoints.

Resolution, for every command:

- HTTP (enqueue, status, cancel): ``--api-url`` / ``SLUICE_API_URL`` (a deployed API,
  SigV4-signed unless ``SLUICE_API_KEY`` is set), else the local stack's gateway;
- Redis (queues, queue, dlq, top): ``SLUICE_REDIS_URL`` (with the rest of ``SLUICE_*``, e.g.
  ``SLUICE_REDIS_AUTH_SECRET_ARN=sluice/<stack>/redis/operator``: the operator's Redis user,
  docs/security.md "Redis users"), else the local stack's Redis;
- DynamoDB (status without any API): ``SLUICE_JOBS_TABLE`` and the usual AWS settings;
- Kafka (a redrive appends the job's record again): ``SLUICE_KAFKA_BOOTSTRAP``.

The local stack is the one whose ``.sluice/endpoints.json`` sits in the working
directory (``--state-dir`` to look elsewhere).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sluice.core.config import Settings
from sluice.core.errors import SluiceError
from sluice_dev.local.stack import running_stack, settings_from_endpoints

if TYPE_CHECKING:
    from sluice.backends.dynamodb.jobs import DynamoJobStore
    from sluice.backends.dynamodb.queues import DynamoQueueDirectory
    from sluice.backends.dynamodb.routes import DynamoRouteStore, LambdaFunctions
    from sluice.backends.kafka.producer import KafkaJobLog
    from sluice.backends.redis.engine import RedisQueue
    from sluice.client import Client
    from sluice.core.models import JobSpec


def is_local_url(url: str) -> bool:
    """A URL on this machine's loopback: a local server (`sluice dev`), where no signature is checked and
    none is needed; API Gateway is never there (it answers only for its own host name). Signing for one
    needed AWS credentials a laptop may not have: `SLUICE_API_URL=http://127.0.0.1:<port> sluice enqueue`
    failed with "no AWS credentials were found" (session 36's walk)."""
    import ipaddress
    from urllib.parse import urlsplit

    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: 127.example.com is not this machine
        return False


class NoTarget(SluiceError):
    """Nothing to talk to: no local stack runs here and no deployed endpoint is configured."""


@dataclass
class Target:
    state_dir: Path
    api_url: str | None = None
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))

    @cached_property
    def local(self) -> dict[str, Any] | None:
        found = running_stack(self.state_dir)
        return None if found is None or found.get("starting") else found

    def _not_running(self, what: str) -> NoTarget:
        return NoTarget(f"no local stack is running in {self.state_dir.resolve().parent} "
                        f"(start one with `sluice dev`) and {what} is not set")

    @property
    def where(self) -> str:
        """One line saying which deployment the command talks to."""
        if self.api_url or self.env.get("SLUICE_API_URL"):
            return str(self.api_url or self.env["SLUICE_API_URL"])
        return f"local stack ({self.local['gateway_url']})" if self.local else "nothing"

    # -- HTTP --------------------------------------------------------------------------------

    def has_api(self) -> bool:
        return bool(self.api_url or self.env.get("SLUICE_API_URL") or self.local)

    def client(self) -> Client:
        from sluice.client import Client

        url = self.api_url or self.env.get("SLUICE_API_URL")
        if url:
            key = self.env.get("SLUICE_API_KEY")
            return Client(url, api_key=key, sign_sigv4=not key and not is_local_url(url), max_attempts=4)
        if self.local:
            return Client(str(self.local["gateway_url"]), max_attempts=4)
        raise self._not_running("SLUICE_API_URL")

    def operator_api(self) -> Client | None:
        """The operator API (``/v1/admin/...``, SigV4) when pointed at a deployed API without Redis.

        ``SLUICE_API_URL`` (or ``--api-url``) set and ``SLUICE_REDIS_URL`` not: a laptop with AWS
        credentials and no VPC access. ``SLUICE_LOCAL_CALLER`` is sent as ``X-Sluice-Local-Caller``,
        which only the local server honours (docs/api.md, Operator API).
        """
        url = self.api_url or self.env.get("SLUICE_API_URL")
        if not url or self.env.get("SLUICE_REDIS_URL"):
            return None
        return self.operator_client(url)

    def operator_client(self, url: str | None = None, *, max_attempts: int = 4) -> Client:
        """The operator API (``/v1/admin/...``) over HTTP, whatever Redis setting there is: ``url``
        (else ``--api-url`` / ``SLUICE_API_URL``), SigV4-signed, or the local stack's gateway, whose
        operator routes take the caller from ``X-Sluice-Local-Caller``: ``SLUICE_LOCAL_CALLER``,
        else the operator ``sluice dev`` names (``api_server.LOCAL_OPERATOR``). Schedules and the
        console have no other way in."""
        from sluice.client import Client
        from sluice_dev.local.api_server import LOCAL_CALLER_HEADER, LOCAL_OPERATOR

        url = url or self.api_url or self.env.get("SLUICE_API_URL")
        caller = self.env.get("SLUICE_LOCAL_CALLER")
        if url:  # a loopback URL is a local server: unsigned, its caller SLUICE_LOCAL_CALLER's alone
            return Client(url, sign_sigv4=not is_local_url(url), max_attempts=max_attempts,
                          headers={LOCAL_CALLER_HEADER: caller} if caller else None)
        if self.local:
            return Client(str(self.local["gateway_url"]), max_attempts=max_attempts,
                          headers={LOCAL_CALLER_HEADER: caller or LOCAL_OPERATOR})
        raise self._not_running("SLUICE_API_URL")

    # -- Redis and DynamoDB ------------------------------------------------------------------

    def settings(self, *, need: str) -> Settings:
        if self.env.get(need):
            return Settings.from_env()
        if self.local:
            from sluice_dev.local.servers import DUMMY_AWS_ENV

            for key, value in DUMMY_AWS_ENV.items():  # the local moto server and Lambda API take any
                os.environ.setdefault(key, value)
            return settings_from_endpoints(self.local, Settings.from_env())
        raise self._not_running(need)

    def engine(self) -> RedisQueue:
        from sluice.backends.redis.engine import RedisQueue

        return RedisQueue.from_settings(self.settings(need="SLUICE_REDIS_URL"))

    def routes(self) -> DynamoRouteStore | None:
        """The routes table (SLUICE_ROUTES_TABLE, or the local stack's); None if there is none."""
        from sluice.backends.dynamodb.routes import DynamoRouteStore

        s = self.settings(need="SLUICE_ROUTES_TABLE") if self.env.get("SLUICE_ROUTES_TABLE") or self.local \
            else None
        return DynamoRouteStore.from_settings(s) if s is not None and s.routes_table else None

    def queue_directory(self) -> DynamoQueueDirectory | None:
        """The durable registry of queues (SLUICE_QUEUES_TABLE, or the local stack's); None if none."""
        from sluice.backends.dynamodb.queues import DynamoQueueDirectory

        s = self.settings(need="SLUICE_QUEUES_TABLE") if self.env.get("SLUICE_QUEUES_TABLE") or self.local \
            else None
        return DynamoQueueDirectory.from_settings(s) if s is not None and s.queues_table else None

    def functions(self) -> LambdaFunctions:
        from sluice.backends.dynamodb.routes import LambdaFunctions

        return LambdaFunctions.from_settings(self.settings(need="SLUICE_ROUTES_TABLE"))

    def store(self) -> DynamoJobStore:
        from sluice.backends.dynamodb.jobs import DynamoJobStore

        return DynamoJobStore.from_settings(self.settings(need="SLUICE_JOBS_TABLE"))

    def reseal(self) -> Callable[[JobSpec], JobSpec] | None:
        """How a redrive's record is sealed anew (``sluice.gateway.redrive.Reseal``) with the job id
        key of these settings; None without one (the record then goes unsealed, and a relay that
        checks seals refuses it should it replay the log after a Redis loss)."""
        from sluice.core import seal
        from sluice.core.clock import wall_ms
        from sluice.core.errors import ConfigError
        from sluice.entry.root import job_id_key

        try:
            key = job_id_key(self.settings(need="SLUICE_KAFKA_BOOTSTRAP"))
        except ConfigError:
            return None
        return lambda spec: seal.seal_spec(spec.model_copy(update={"enqueued_at_ms": wall_ms()}), key)

    def log(self) -> KafkaJobLog:
        """Kafka, for a redrive's record (``sluice.gateway.redrive``): ``SLUICE_KAFKA_BOOTSTRAP`` and the
        rest of ``SLUICE_KAFKA_*``, else the local stack's broker."""
        from sluice.backends.kafka.producer import KafkaJobLog

        return KafkaJobLog.from_settings(self.settings(need="SLUICE_KAFKA_BOOTSTRAP"))
