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

from collections.abc import Mapping, Sequence

from botocore.exceptions import BotoCoreError, ClientError

from sluice.backends.dynamodb.client import OnTable
from sluice.backends.dynamodb.errors import error_code, translate, translated
from sluice.backends.dynamodb.scan import scan_all
from sluice.core.clock import wall_ms
from sluice.core.errors import InvalidInput
from sluice.core.listing import check_sensitive
from sluice.core.models import QUEUE_NAME_RE, validate_public_queue
from sluice.core.ports import ParkedState

__all__ = ["DynamoQueueDirectory", "ParkedState", "parked_state"]


def parked_state(item: Mapping[str, object]) -> ParkedState:
    """The relay's fields of an item's ``state`` map (``add_parked``); a count below 0 (a record
    parked twice, released once more) is shown as 0."""
    state = item.get("state")
    fields = state.get("M", {}) if isinstance(state, dict) else {}

    def num(name: str) -> int:
        v = fields.get(name, {})
        try:
            return int(v.get("N", 0)) if isinstance(v, dict) else 0
        except ValueError:
            return 0

    return ParkedState(max(0, num("parked")), num("parked_at_ms"))


class DynamoQueueDirectory(OnTable):
    """``sluice.core.ports.QueueDirectory`` over the queues table."""

    setting = "queues_table"

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

    def add_parked(self, counts: Mapping[str, int], at_ms: Mapping[str, int]) -> dict[str, int]:
        """Add each queue's change to its parked counter (``relay.ports.ParkedCounter``), one
        UpdateItem a queue, and set when it last parked (``at_ms``, for the queues that parked);
        returns each written counter's new value. A queue with no item (never reserved by a
        gateway: an internal queue) keeps no counter."""
        now: dict[str, int] = {}
        for queue, n in counts.items():
            names = {"#s": "state", "#p": "parked"}
            values: dict[str, dict[str, str]] = {":n": {"N": str(n)}, ":zero": {"N": "0"}}
            update = "SET #s.#p = if_not_exists(#s.#p, :zero) + :n"
            if queue in at_ms:
                names["#t"], values[":t"] = "parked_at_ms", {"N": str(at_ms[queue])}
                update += ", #s.#t = :t"
            try:
                out = self.client.update_item(
                    TableName=self.table_name, Key={"queue": {"S": queue}}, UpdateExpression=update,
                    ConditionExpression="attribute_exists(#s)", ExpressionAttributeNames=names,
                    ExpressionAttributeValues=values, ReturnValues="UPDATED_NEW")
            except ClientError as exc:
                if error_code(exc) != "ConditionalCheckFailedException":
                    raise translate(exc, f"update_item {self.table_name}") from exc
                continue
            except BotoCoreError as exc:
                raise translate(exc, f"update_item {self.table_name}") from exc
            now[queue] = parked_state(out.get("Attributes", {})).parked
        return now

    def parked(self) -> dict[str, ParkedState]:
        """Every recorded queue's parking state (one scan, as ``names``)."""
        items = scan_all(self.client, self.table_name)
        return {n: parked_state(item) for item in items
                if QUEUE_NAME_RE.fullmatch(n := item.get("queue", {}).get("S", ""))}

    def sensitive_of(self, queue: str) -> tuple[str, ...]:
        """The payload fields the operator marked sensitive for ``queue`` (``state.sensitive``: the
        durable copy of its config's, which a Redis loss leaves here); one GetItem. A value no
        ``set_sensitive`` wrote hides the whole payload (``""``) rather than show it."""
        with translated(f"get_item {self.table_name}"):
            item = self.client.get_item(TableName=self.table_name, Key={"queue": {"S": queue}},
                                        ProjectionExpression="#s.#k",
                                        ExpressionAttributeNames={"#s": "state", "#k": "sensitive"})
        stored = item.get("Item", {}).get("state", {}).get("M", {}).get("sensitive")
        if stored is None:
            return ()
        try:
            return tuple(check_sensitive([v["S"] for v in stored["L"]]))
        except (KeyError, TypeError, InvalidInput):
            return ("",)

    def set_sensitive(self, queue: str, fields: Sequence[str]) -> None:
        """Keep ``fields`` (checked pointers) as ``state.sensitive``, the item recorded first if it is
        not (two UpdateItems: a nested path needs its map to exist)."""
        self.put(queue)
        with translated(f"update_item {self.table_name}"):
            self.client.update_item(
                TableName=self.table_name, Key={"queue": {"S": queue}}, UpdateExpression="SET #s.#k = :v",
                ExpressionAttributeNames={"#s": "state", "#k": "sensitive"},
                ExpressionAttributeValues={":v": {"L": [{"S": f} for f in check_sensitive(list(fields))]}})

    def parked_of(self, queue: str) -> ParkedState:
        """One queue's parking state (one GetItem)."""
        with translated(f"get_item {self.table_name}"):
            item = self.client.get_item(TableName=self.table_name, Key={"queue": {"S": queue}},
                                        ProjectionExpression="#s", ExpressionAttributeNames={"#s": "state"})
        return parked_state(item.get("Item", {}))
