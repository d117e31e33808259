"""The durable registry of queues (issue 28, item 2): one item per queue a gateway reserved.

Layout: partition key ``queue``; ``created_at_ms`` (when it was first recorded) and ``state``, a
map kept for what the queue carries beyond Redis (its byte budget, its parking state: added by
their owners with ``SET #s.<field> = ...``, so a record written here never overwrites them).
Its own table, not the routes table: the routes are scanned whole by every gateway and relay
container every 30 s and scoped per team by ``dynamodb:LeadingKeys`` on their patterns; the
registry holds up to ``SLUICE_MAX_QUEUES`` items that only a Redis loss (the cache's reload) and
the operator's listing read whole.

Redis holds the registry's cache (``sluice:queues``), which decides the limit atomically; a
gateway writes through here before its 202 (``sluice.gateway.registry``), and the cache is
loaded from here after a Redis loss (``RedisConnection.load_registry``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.backends.dynamodb.client import dynamodb_client
from sluice.backends.dynamodb.errors import translated
from sluice.backends.dynamodb.scan import scan_all
from sluice.core.clock import wall_ms
from sluice.core.config import Settings
from sluice.core.errors import InvalidInput
from sluice.core.models import QUEUE_NAME_RE, validate_public_queue

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


class DynamoQueueDirectory:
    """``sluice.core.ports.QueueDirectory`` over the queues table."""

    def __init__(self, client: DynamoDBClient, table_name: str) -> None:
        self.client, self.table_name = client, table_name

    @classmethod
    def from_settings(cls, s: Settings, *, client: DynamoDBClient | None = None) -> DynamoQueueDirectory:
        if not s.queues_table:
            raise InvalidInput("no queues table: set SLUICE_QUEUES_TABLE (template.yaml's QueuesTable)")
        return cls(client or dynamodb_client(s), s.queues_table)

    def put(self, queue: str) -> None:
        """Record ``queue``; an existing item keeps its ``created_at_ms`` and ``state``."""
        queue = validate_public_queue(queue)
        with translated(f"update_item {self.table_name}"):
            self.client.update_item(
                TableName=self.table_name, Key={"queue": {"S": queue}},
                UpdateExpression="SET #c = if_not_exists(#c, :now), #s = if_not_exists(#s, :empty)",
                ExpressionAttributeNames={"#c": "created_at_ms", "#s": "state"},
                ExpressionAttributeValues={":now": {"N": str(wall_ms())}, ":empty": {"M": {}}})

    def names(self) -> list[str]:
        """Every recorded queue (an item whose key is not a queue name is skipped: nobody wrote it)."""
        items = scan_all(self.client, self.table_name)
        return sorted(n for n in (item.get("queue", {}).get("S", "") for item in items)
                      if QUEUE_NAME_RE.fullmatch(n))
