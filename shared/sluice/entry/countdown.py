"""Countdown Lambda: the jobs table's stream -> each child's countdown (docs/flows.md, Failure).

The durable path of a continuation's countdown, next to the in-process one of whoever ended the
child: invoked by its own event source mapping (only records whose new image is a final child),
it answers the records whose count or release failed, so Lambda retries from the first of them.
"""

from __future__ import annotations

from typing import Any

from sluice.entry import root as wiring
from sluice.streams.completion.publish import batch_failures


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return batch_failures(wiring.stream_countdown().recount(event.get("Records", [])))
