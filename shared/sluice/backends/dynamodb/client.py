"""The store's DynamoDB client: one set of retries, timeouts and connection pool.

The composition root (``sluice.entry.root.dynamodb``) builds one per container with ``CONFIG``
and shares it between the job store, the routes, the schedules and the gateway's idempotency
layer (a botocore client is thread-safe). Each client a container builds costs it about 50 ms;
the process's first, which loads the service model, about 140 ms (the gateway's first enqueue,
when routes are read).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Self

from botocore.config import Config

from sluice.backends.aws.clients import boto_client
from sluice.core.config import Settings
from sluice.core.errors import InvalidInput

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

CONFIG = Config(retries={"mode": "standard", "total_max_attempts": 4}, connect_timeout=3, read_timeout=10,
                max_pool_connections=32)


def dynamodb_client(s: Settings) -> DynamoDBClient:
    """A new client: most callers want the container's one (``sluice.entry.root.dynamodb``)."""
    client: DynamoDBClient = boto_client("dynamodb", s, config=CONFIG)
    return client


class OnTable:
    """An adapter over one of the stack's DynamoDB tables: handed a client and the table's name, or
    built from Settings, whose field ``setting`` names the table (``SLUICE_<SETTING>``, the
    template's resource of that name in title case)."""

    setting: ClassVar[str]

    def __init__(self, client: DynamoDBClient, table_name: str) -> None:
        self.client, self.table_name = client, table_name

    @classmethod
    def from_settings(cls, s: Settings, *, client: DynamoDBClient | None = None) -> Self:
        """``client``: the container's DynamoDB client (``sluice.entry.root.dynamodb``); else a new one."""
        name: str = getattr(s, cls.setting)
        if not name:
            words = cls.setting.split("_")
            raise InvalidInput(f"no {' '.join(words)}: set SLUICE_{cls.setting.upper()} "
                               f"(template.yaml's {''.join(w.title() for w in words)})")
        return cls(client or dynamodb_client(s), name)
