"""moto's SQS clock, made cheap (local stack only).

moto reads the time once per held message on every delivery and every receive (each
message's ``visible``/``delayed`` test, and the queue's approximate counts in
``Queue.attributes``), through ``unix_time``, which builds two datetimes and subtracts
them. With thousands of messages waiting that was 83% of the moto server's samples in a
chaos run's completion phase (py-spy). ``time.time()`` is the same number (seconds since
the epoch, UTC) for a fraction of the cost; a datetime argument is converted as before.

moto also never deletes a message past its queue's ``MessageRetentionPeriod`` (it only stops
delivering it), so a queue nobody reads grows without end and every delivery to it scans
more: ``sluice dev``'s follow queue, unread while nobody runs ``sluice events --follow``.
``install`` makes moto drop them on the next send, as SQS deletes them.
"""

from __future__ import annotations

import time
from typing import Any

_INSTALLED = "_sluice_fast_clock"


def install() -> None:
    """Replaces the clock ``moto.sqs.models`` imported, and makes sends expire old messages
    (idempotent)."""
    import moto.sqs.models as sqs

    _install_clock(sqs)
    _install_expiry(sqs)


def _install_clock(sqs: Any) -> None:
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


def _install_expiry(sqs: Any) -> None:
    add_message = sqs.Queue.add_message
    if getattr(add_message, _INSTALLED, False):
        return

    def add_and_expire(queue: Any, message: Any) -> None:
        add_message(queue, message)
        expire(queue, time.time())

    setattr(add_and_expire, _INSTALLED, True)
    sqs.Queue.add_message = add_and_expire


def expire(queue: Any, now: float) -> int:
    """Deletes the queue's messages older than its retention period; how many. Messages are
    held in the order they were sent, so the common case (the oldest is young) costs one look.
    A message with no send time (never marked sent) is kept."""
    held = queue._messages  # moto keeps them there, in the order sent
    cutoff_ms = (now - float(queue.message_retention_period)) * 1000

    def expired(message: Any) -> bool:
        return message.sent_timestamp is not None and message.sent_timestamp < cutoff_ms

    if not held or not expired(held[0]):
        return 0
    with queue._messages_lock:
        kept: list[Any] = []
        for message in held:
            if expired(message):
                queue.pending_messages.discard(message)
            else:
                kept.append(message)
        dropped = len(held) - len(kept)
        held[:] = kept
    return dropped
