"""Events Lambda: the jobs table's stream -> one EventBridge event per final state (docs/events.md).

Invoked by the stream's event source mapping (ReportBatchItemFailures): returns the records
to retry, so Lambda retries from the first of them and no ended job loses its event.
"""

from __future__ import annotations

from typing import Any

from sluice.entry import root as wiring
from sluice.streams.completion.publish import batch_failures


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return batch_failures(wiring.completion_publisher().publish(event.get("Records", [])))
