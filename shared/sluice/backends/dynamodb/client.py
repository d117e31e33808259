"""The store's DynamoDB client: one set of retries, timeouts and connection pool.

The composition root (``sluice.entry.root.dynamodb``) builds one per container with ``CONFIG``
and shares it between the job store, the routes, the schedules and the gateway's idempotency
layer (a botocore client is thread-safe). Each client a container builds costs it about 50 ms;
the process's first, which loads the service model, about 140 ms (the gateway's first enqueue,
when routes are read).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from botocore.config import Config

from sluice.backends.aws.clients import boto_client
from sluice.core.config import Settings

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

CONFIG = Config(retries={"mode": "standard", "total_max_attempts": 4}, connect_timeout=3, read_timeout=10,
                max_pool_connections=32)


def dynamodb_client(s: Settings) -> DynamoDBClient:
    """A new client: most callers want the container's one (``sluice.entry.root.dynamodb``)."""
    client: DynamoDBClient = boto_client("dynamodb", s, config=CONFIG)
    return client
