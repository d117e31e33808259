"""The durable path of a continuation's countdown: the jobs table's stream (docs/flows.md, Failure).

``core.families.Countdown`` counts a child when its ending is emitted in-process (the fast path).
A process that dies between a child's final write and that count loses the fast path, never the
stream's: the countdown function (and ``sluice dev``'s stream poller) hands each batch of stream
records to ``StreamCountdown.recount``, which runs the same count for every record that makes a
child final.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from sluice.backends.dynamodb.codec import item_int, item_str
from sluice.core.errors import SluiceError
from sluice.core.families import Countdown, Slot
from sluice.streams.completion.model import final_image

log = logging.getLogger(__name__)


def ended_child(record: Mapping[str, Any]) -> Slot | None:
    """The continuation and slot of the child a jobs-table stream record makes final, or None
    (not a final transition, or a job with no continuation). Pure: the record's new image names
    both, as the child's item has since the gateway created it."""
    new = final_image(record)
    if new is None:
        return None
    then = item_str(new, "continuation")
    return None if then is None else (then, item_int(new, "family_slot"))


class StreamCountdown:
    """``Countdown.count`` for each stream record that makes a child final."""

    def __init__(self, countdown: Countdown) -> None:
        self.countdown = countdown

    def recount(self, records: Iterable[Mapping[str, Any]]) -> list[str]:
        """The same step as ``Countdown.on_ended``, so a child the fast path counted already costs
        one refused conditional write and one read, and a repeated record counts nothing. Returns
        the sequence numbers to retry (``completion.publish.batch_failures``): a record whose count
        or release failed is delivered again, until the continuation is released.
        """
        failed: list[str] = []
        for record in records:
            found = ended_child(record)
            if found is None:
                continue
            try:
                ok = self.countdown.count(*found)
            except SluiceError as exc:
                log.warning("countdown of %s on %s failed: %s", found[1], found[0], exc)
                ok = False
            if not ok:
                failed.append(str((record.get("dynamodb") or {}).get("SequenceNumber", "")))
        return failed
