"""A queue's runtime knobs: its push rate, watermarks, in-flight limit, caps and pause.

The knobs live in each queue's config hash in Redis (``engine.set_config``). A running
relay re-reads them every half second and ``rate.lua`` reads the rate on every call,
so a change made here (through the CLI or the operator API, which call these) applies
within about a second on every relay instance, with no redeploy. Pure checks, then one
write through a small port: the gateway's operator API and the relay's operators share them.
"""

from __future__ import annotations

from typing import Any, Protocol

from sluice.core.errors import InvalidInput
from sluice.core.listing import check_sensitive
from sluice.core.models import QueueConfig


class ConfigEngine(Protocol):
    def set_config(self, queue: str, **changes: Any) -> QueueConfig: ...
    def get_config(self, queue: str) -> QueueConfig: ...


def _number(value: object, what: str, *, integer: bool = False, most: int = 10_000_000) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value or value < 0:
        raise InvalidInput(f"{what} must be a number >= 0, got {value!r}")
    if integer and not isinstance(value, int):
        raise InvalidInput(f"{what} must be an integer, got {value!r}")
    if value > most:
        raise InvalidInput(f"{what} is absurdly large: {value!r}")
    return float(value)


def set_rate(engine: ConfigEngine, queue: str, per_second: float, burst: int | None = None) -> QueueConfig:
    """Limit pushing into ``queue`` to ``per_second`` jobs/s (0 = unlimited), ``burst`` at once.

    The burst defaults to one second's worth, so a relay that polls every 200 ms is not
    starved between polls.
    """
    rate = _number(per_second, "rate per second")
    size = int(_number(burst, "burst", integer=True)) if burst is not None else max(1, int(rate))
    return engine.set_config(queue, rate_per_s=rate, burst=size)


def set_watermarks(engine: ConfigEngine, queue: str, high: int, low: int | None = None) -> QueueConfig:
    """Pause pushing while the ready depth is above ``high``; resume below ``low`` (default high/2).

    ``high`` = 0 turns the watermark off.
    """
    hi = int(_number(high, "high watermark", integer=True))
    lo = int(_number(low, "low watermark", integer=True)) if low is not None else hi // 2
    if hi and lo > hi:
        raise InvalidInput(f"the low watermark ({lo}) must not be above the high one ({hi})")
    return engine.set_config(queue, high_watermark=hi, low_watermark=lo)


def set_max_in_flight(engine: ConfigEngine, queue: str, limit: int | None = None,
                      per_group: int | None = None) -> QueueConfig:
    """The most jobs of ``queue`` leased at once (``limit``), and of each of its fair groups
    (``per_group``, issue 28 item 5); 0 = no limit, None leaves that one as it is."""
    changes = {name: int(_number(value, what, integer=True))
               for name, what, value in (("max_in_flight", "max in flight", limit),
                                         ("max_in_flight_per_group", "max in flight per group", per_group))
               if value is not None}
    if not changes:
        raise InvalidInput("give --max-in-flight, --per-group or both")
    return engine.set_config(queue, **changes)


def set_caps(engine: ConfigEngine, queue: str, max_delayed: int | None = None,
             max_dead: int | None = None, max_bytes: int | None = None) -> QueueConfig:
    """The queue's own caps on delayed and dead jobs and its byte budget in Redis (0 = the
    deployment's default; sluice.core.limits)."""
    changes = {name: int(_number(value, name.replace("_", " "), integer=True, most=most))
               for name, value, most in (("max_delayed", max_delayed, 10_000_000),
                                         ("max_dead", max_dead, 10_000_000),
                                         ("max_bytes", max_bytes, 1 << 50))
               if value is not None}
    if not changes:
        raise InvalidInput("give --max-delayed, --max-dead, --max-bytes or some of them")
    return engine.set_config(queue, **changes)


def set_sensitive(engine: ConfigEngine, queue: str, fields: Any) -> QueueConfig:
    """The payload fields the operator's listing shows as ``[redacted]`` for ``queue``, typed or not
    (JSON pointers or top-level names, ``sluice.core.listing.check_sensitive``; [] marks none). It
    replaces the queue's list; a typed queue's schema marks its own besides."""
    return engine.set_config(queue, sensitive=tuple(check_sensitive(fields)))


def pause(engine: ConfigEngine, queue: str) -> QueueConfig:
    """Stop pushing into ``queue``; Kafka holds its backlog. Leasing is not affected."""
    return engine.set_config(queue, paused=True)


def resume(engine: ConfigEngine, queue: str) -> QueueConfig:
    return engine.set_config(queue, paused=False)
