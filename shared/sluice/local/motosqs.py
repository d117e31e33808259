"""moto's SQS clock, made cheap (local stack only).

moto reads the time once per held message on every delivery and every receive (each
message's ``visible``/``delayed`` test, and the queue's approximate counts in
``Queue.attributes``), through ``unix_time``, which builds two datetimes and subtracts
them. With thousands of messages waiting that was 83% of the moto server's samples in a
chaos run's completion phase (py-spy). ``time.time()`` is the same number (seconds since
the epoch, UTC) for a fraction of the cost; a datetime argument is converted as before.
"""

from __future__ import annotations

import time
from typing import Any

_INSTALLED = "_sluice_fast_clock"


def install() -> None:
    """Replaces the clock ``moto.sqs.models`` imported (idempotent)."""
    import moto.sqs.models as sqs

    original = getattr(sqs, "unix_time")  # noqa: B009 (moto re-exports it untyped)
    if getattr(original, _INSTALLED, False):
        return

    def unix_time(dt: Any = None) -> float:
        return time.time() if dt is None else float(original(dt))

    def unix_time_millis(dt: Any = None) -> float:
        return unix_time(dt) * 1000.0

    for fn in (unix_time, unix_time_millis):
        setattr(fn, _INSTALLED, True)
    setattr(sqs, "unix_time", unix_time)  # noqa: B010
    setattr(sqs, "unix_time_millis", unix_time_millis)  # noqa: B010
