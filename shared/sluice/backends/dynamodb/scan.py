"""Read a small table whole: a paginated, consistent ``Scan``, botocore errors translated.

For the tables read whole by design (routes, schedules: one item per route or schedule).
The jobs table is never scanned by production code.
"""

from __future__ import annotations

from typing import Any

from sluice.backends.dynamodb.errors import translated


def scan_all(client: Any, table: str) -> list[dict[str, Any]]:
    """Every item of ``table``, following ``LastEvaluatedKey`` until the last page."""
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
    with translated(f"scan {table}"):
        while True:
            page = client.scan(**kwargs)
            items += page.get("Items", [])
            if "LastEvaluatedKey" not in page:
                return items
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
