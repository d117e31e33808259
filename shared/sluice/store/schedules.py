"""Schedules in AWS (issue 17): DynamoDB items, and one EventBridge Scheduler schedule each.

The table (``SLUICE_SCHEDULES_TABLE``, key ``name``) is the source of truth the routes read:
``expression``, ``queue``, ``payload`` (JSON text), ``start_ms``, ``paused``. EventBridge Scheduler
fires each schedule at the gateway function with ``{"sluice_schedule": name, "scheduled_time":
"<aws.scheduler.scheduled-time>"}`` (``http.schedule_routes``); the gateway reads the item and
enqueues the firing's derived job. Scheduler is told the same expression in UTC, with no
flexible window, so its scheduled times are the ones ``schedules.next_after`` computes.
"""

from __future__ import annotations

import json
from typing import Any, Final

from botocore.exceptions import ClientError

from sluice.errors import ScheduleExists, ScheduleNotFound, StoreError
from sluice.schedules import FIRE_KEY, SCHEDULED_TIME, Schedule
from sluice.store.errors import error_code, translate, translated
from sluice.store.scan import scan_all

_EXISTS: Final = "ConditionalCheckFailedException"


def _item(s: Schedule) -> dict[str, Any]:
    return {"name": {"S": s.name}, "expression": {"S": s.expression}, "queue": {"S": s.queue},
            "payload": {"S": json.dumps(s.payload, separators=(",", ":"))},
            "start_ms": {"N": str(s.start_ms)}, "paused": {"BOOL": s.paused}}


def _schedule(item: dict[str, Any]) -> Schedule:
    try:
        return Schedule(item["name"]["S"], item["expression"]["S"], item["queue"]["S"],
                        json.loads(item["payload"]["S"]), int(item["start_ms"]["N"]),
                        bool(item["paused"]["BOOL"]))
    except (KeyError, ValueError) as exc:
        raise StoreError(f"a schedule item is malformed: {exc!r}") from exc


class DynamoScheduleStore:
    """``api_schedules.ScheduleStore`` on a DynamoDB table."""

    def __init__(self, client: Any, table_name: str) -> None:
        self.client, self.table_name = client, table_name

    def create(self, schedule: Schedule) -> None:
        try:
            self.client.put_item(TableName=self.table_name, Item=_item(schedule),
                                 ConditionExpression="attribute_not_exists(#n)",
                                 ExpressionAttributeNames={"#n": "name"})
        except ClientError as exc:
            if error_code(exc) == _EXISTS:
                raise ScheduleExists(name=schedule.name) from None
            raise translate(exc, f"put_item {self.table_name}") from exc

    def get(self, name: str) -> Schedule:
        with translated(f"get_item {self.table_name}"):
            item = self.client.get_item(TableName=self.table_name, Key={"name": {"S": name}},
                                        ConsistentRead=True).get("Item")
        if item is None:
            raise ScheduleNotFound(name=name)
        return _schedule(item)

    def all(self) -> list[Schedule]:
        return [_schedule(item) for item in scan_all(self.client, self.table_name)]

    def set_paused(self, name: str, paused: bool) -> Schedule:
        try:
            item = self.client.update_item(
                TableName=self.table_name, Key={"name": {"S": name}}, UpdateExpression="SET paused = :p",
                ConditionExpression="attribute_exists(#n)", ExpressionAttributeNames={"#n": "name"},
                ExpressionAttributeValues={":p": {"BOOL": paused}}, ReturnValues="ALL_NEW")["Attributes"]
        except ClientError as exc:
            if error_code(exc) == _EXISTS:
                raise ScheduleNotFound(name=name) from None
            raise translate(exc, f"update_item {self.table_name}") from exc
        return _schedule(item)

    def delete(self, name: str) -> None:
        try:
            self.client.delete_item(TableName=self.table_name, Key={"name": {"S": name}},
                                    ConditionExpression="attribute_exists(#n)",
                                    ExpressionAttributeNames={"#n": "name"})
        except ClientError as exc:
            if error_code(exc) == _EXISTS:
                raise ScheduleNotFound(name=name) from None
            raise translate(exc, f"delete_item {self.table_name}") from exc


class SchedulerTrigger:
    """``api_schedules.Trigger`` on EventBridge Scheduler: one schedule per Sluice schedule, in
    ``group``, targeting the gateway function (``target_arn``) through ``role_arn``."""

    def __init__(self, client: Any, target_arn: str, role_arn: str, group: str = "default") -> None:
        self.client, self.target_arn, self.role_arn, self.group = client, target_arn, role_arn, group

    def _definition(self, schedule: Schedule) -> dict[str, Any]:
        return {"Name": schedule.name, "GroupName": self.group, "ScheduleExpression": schedule.expression,
                "ScheduleExpressionTimezone": "UTC", "FlexibleTimeWindow": {"Mode": "OFF"},
                "State": "DISABLED" if schedule.paused else "ENABLED",
                "Target": {"Arn": self.target_arn, "RoleArn": self.role_arn,
                           "Input": json.dumps({FIRE_KEY: schedule.name, "scheduled_time": SCHEDULED_TIME})}}

    def create(self, schedule: Schedule) -> None:
        with translated(f"scheduler create_schedule {schedule.name}"):
            self.client.create_schedule(**self._definition(schedule))

    def set_paused(self, schedule: Schedule) -> None:
        with translated(f"scheduler update_schedule {schedule.name}"):  # an update restates everything
            self.client.update_schedule(**self._definition(schedule))

    def delete(self, name: str) -> None:
        try:
            self.client.delete_schedule(Name=name, GroupName=self.group)
        except ClientError as exc:
            if error_code(exc) != "ResourceNotFoundException":  # gone already: what was asked
                raise translate(exc, f"scheduler delete_schedule {name}") from exc
