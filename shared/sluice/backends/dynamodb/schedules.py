"""Schedules in AWS (issue 17): DynamoDB items, and one EventBridge Scheduler schedule each.

The table (``SLUICE_SCHEDULES_TABLE``, key ``queue`` + ``name``: a schedule's name is its queue's)
is the source of truth the routes read: ``expression``, ``payload`` (JSON text), ``start_ms``,
``paused``. EventBridge Scheduler fires each schedule at the gateway function with
``{"sluice_schedule": name, "queue": queue, "scheduled_time": "<aws.scheduler.scheduled-time>"}``
(``http.schedule_routes``); the gateway reads the item and enqueues the firing's derived job.
Scheduler is told the same expression in UTC, with no flexible window, so its scheduled times are
the ones ``schedules.next_after`` computes.
"""

from __future__ import annotations

import json
from typing import Any, Final

from botocore.exceptions import ClientError

from sluice.backends.dynamodb.client import OnTable
from sluice.backends.dynamodb.errors import error_code, translate, translated
from sluice.backends.dynamodb.scan import scan_all
from sluice.core.errors import ScheduleExists, ScheduleNotFound, StoreError
from sluice.core.schedules import SCHEDULED_TIME, Schedule, firing_event, scheduler_name, target_retry

_EXISTS: Final = "ConditionalCheckFailedException"
_NAMES: Final = {"#q": "queue", "#n": "name"}
_PRESENT: Final = "attribute_exists(#q) AND attribute_exists(#n)"


def _key(queue: str, name: str) -> dict[str, Any]:
    return {"queue": {"S": queue}, "name": {"S": name}}


def _item(s: Schedule) -> dict[str, Any]:
    return {**_key(s.queue, s.name), "expression": {"S": s.expression},
            "payload": {"S": json.dumps(s.payload, separators=(",", ":"))},
            "start_ms": {"N": str(s.start_ms)}, "paused": {"BOOL": s.paused},
            **({"owner": {"S": s.owner}} if s.owner else {})}


def _schedule(item: dict[str, Any]) -> Schedule:
    try:
        return Schedule(item["name"]["S"], item["expression"]["S"], item["queue"]["S"],
                        json.loads(item["payload"]["S"]), int(item["start_ms"]["N"]),
                        bool(item["paused"]["BOOL"]), item.get("owner", {}).get("S", ""))
    except (KeyError, ValueError) as exc:
        raise StoreError(f"a schedule item is malformed: {exc!r}") from exc


class DynamoScheduleStore(OnTable):
    """``api_schedules.ScheduleStore`` on a DynamoDB table."""

    setting = "schedules_table"

    def create(self, schedule: Schedule) -> None:
        try:
            self.client.put_item(TableName=self.table_name, Item=_item(schedule),
                                 ConditionExpression="attribute_not_exists(#n)",
                                 ExpressionAttributeNames={"#n": "name"})
        except ClientError as exc:
            if error_code(exc) == _EXISTS:
                raise ScheduleExists(name=schedule.name, queue=schedule.queue) from None
            raise translate(exc, f"put_item {self.table_name}") from exc

    def get(self, queue: str, name: str) -> Schedule:
        with translated(f"get_item {self.table_name}"):
            item = self.client.get_item(TableName=self.table_name, Key=_key(queue, name),
                                        ConsistentRead=True).get("Item")
        if item is None:
            raise ScheduleNotFound(name=name, queue=queue)
        return _schedule(item)

    def all(self, queue: str) -> list[Schedule]:
        """The queue's schedules (one Query of its partition)."""
        items: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {"TableName": self.table_name, "ConsistentRead": True,
                                  "KeyConditionExpression": "#q = :q",
                                  "ExpressionAttributeNames": {"#q": "queue"},
                                  "ExpressionAttributeValues": {":q": {"S": queue}}}
        with translated(f"query {self.table_name}"):
            while True:
                page = self.client.query(**kwargs)
                items += page.get("Items", [])
                if "LastEvaluatedKey" not in page:
                    break
                kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        return [_schedule(item) for item in items]

    def every(self) -> list[Schedule]:
        """Every queue's schedules (the local scheduler's view; a scan)."""
        return [_schedule(item) for item in scan_all(self.client, self.table_name)]

    # -- schedules declared in code (registrar.schedules.DeclaredScheduleStore; issue 31) -----------

    def owned(self, owner: str) -> list[Schedule]:
        """The schedules ``owner``'s code declared: a scan (the table is small, and a team's queues
        may be prefixes, which no key condition can name)."""
        return [s for s in self.every() if s.owner == owner]

    def find(self, queue: str, name: str) -> Schedule | None:
        try:
            return self.get(queue, name)
        except ScheduleNotFound:
            return None

    def replace(self, schedule: Schedule) -> None:
        """Overwrite an item its owner's code declared, only if it is still that owner's."""
        try:
            self.client.put_item(TableName=self.table_name, Item=_item(schedule),
                                 ConditionExpression=f"{_PRESENT} AND #o = :o",
                                 ExpressionAttributeNames={**_NAMES, "#o": "owner"},
                                 ExpressionAttributeValues={":o": {"S": schedule.owner}})
        except ClientError as exc:
            if error_code(exc) == _EXISTS:
                raise ScheduleNotFound(name=schedule.name, queue=schedule.queue) from None
            raise translate(exc, f"put_item {self.table_name}") from exc

    def set_paused(self, queue: str, name: str, paused: bool) -> Schedule:
        try:
            item = self.client.update_item(
                TableName=self.table_name, Key=_key(queue, name), UpdateExpression="SET paused = :p",
                ConditionExpression=_PRESENT, ExpressionAttributeNames=_NAMES,
                ExpressionAttributeValues={":p": {"BOOL": paused}}, ReturnValues="ALL_NEW")["Attributes"]
        except ClientError as exc:
            if error_code(exc) == _EXISTS:
                raise ScheduleNotFound(name=name, queue=queue) from None
            raise translate(exc, f"update_item {self.table_name}") from exc
        return _schedule(item)

    def delete(self, queue: str, name: str) -> None:
        try:
            self.client.delete_item(TableName=self.table_name, Key=_key(queue, name),
                                    ConditionExpression=_PRESENT, ExpressionAttributeNames=_NAMES)
        except ClientError as exc:
            if error_code(exc) == _EXISTS:
                raise ScheduleNotFound(name=name, queue=queue) from None
            raise translate(exc, f"delete_item {self.table_name}") from exc


class SchedulerTrigger:
    """``api_schedules.Trigger`` on EventBridge Scheduler: one schedule per Sluice schedule, in
    ``group``, named ``schedules.scheduler_name(queue, name)``, targeting the firings function
    (``target_arn``) through ``role_arn``, with Scheduler's retry policy and ``dead_letter_arn`` (the
    firings dead-letter queue) for what is still refused after a day (``schedules.target_retry``)."""

    def __init__(self, client: Any, target_arn: str, role_arn: str, group: str = "default",
                 dead_letter_arn: str = "") -> None:
        self.client, self.target_arn, self.role_arn, self.group = client, target_arn, role_arn, group
        self.dead_letter_arn = dead_letter_arn

    def _definition(self, schedule: Schedule) -> dict[str, Any]:
        event = firing_event(schedule.queue, schedule.name, SCHEDULED_TIME)
        return {"Name": scheduler_name(schedule.queue, schedule.name), "GroupName": self.group,
                "ScheduleExpression": schedule.expression,
                "ScheduleExpressionTimezone": "UTC", "FlexibleTimeWindow": {"Mode": "OFF"},
                "State": "DISABLED" if schedule.paused else "ENABLED",
                "Target": {"Arn": self.target_arn, "RoleArn": self.role_arn, "Input": json.dumps(event),
                           **target_retry(self.dead_letter_arn)}}

    def create(self, schedule: Schedule) -> None:
        with translated(f"scheduler create_schedule {schedule.queue}/{schedule.name}"):
            self.client.create_schedule(**self._definition(schedule))

    def set_paused(self, schedule: Schedule) -> None:
        with translated(f"scheduler update_schedule {schedule.queue}/{schedule.name}"):
            self.client.update_schedule(**self._definition(schedule))  # an update restates everything

    def delete(self, queue: str, name: str) -> None:
        try:
            self.client.delete_schedule(Name=scheduler_name(queue, name), GroupName=self.group)
        except ClientError as exc:
            if error_code(exc) != "ResourceNotFoundException":  # gone already: what was asked
                raise translate(exc, f"scheduler delete_schedule {queue}/{name}") from exc
