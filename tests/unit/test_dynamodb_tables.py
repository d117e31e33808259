"""``OnTable``: each adapter over one of the stack's DynamoDB tables is built from the Settings field
that names its table, and says which variable to set when none is named (nothing is called)."""

from __future__ import annotations

from typing import Any

import pytest

from sluice.backends.dynamodb.client import OnTable
from sluice.backends.dynamodb.queues import DynamoQueueDirectory
from sluice.backends.dynamodb.routes import DynamoRouteStore
from sluice.backends.dynamodb.schedules import DynamoScheduleStore
from sluice.core.config import Settings
from sluice.core.errors import InvalidInput


@pytest.mark.parametrize(("cls", "field", "message"), [
    (DynamoRouteStore, "routes_table",
     "no routes table: set SLUICE_ROUTES_TABLE (template.yaml's RoutesTable)"),
    (DynamoQueueDirectory, "queues_table",
     "no queues table: set SLUICE_QUEUES_TABLE (template.yaml's QueuesTable)"),
    (DynamoScheduleStore, "schedules_table",
     "no schedules table: set SLUICE_SCHEDULES_TABLE (template.yaml's SchedulesTable)"),
])
def test_built_on_the_table_its_settings_field_names(cls: type[OnTable], field: str, message: str) -> None:
    client: Any = object()  # the container's client, handed in: nothing is built or called
    adapter = cls.from_settings(Settings(**{field: "stack-table"}), client=client)
    assert type(adapter) is cls and (adapter.client, adapter.table_name) == (client, "stack-table")
    with pytest.raises(InvalidInput) as refused:
        cls.from_settings(Settings(**{field: ""}), client=client)
    assert str(refused.value) == message
