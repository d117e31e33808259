"""A queue's settings in Redis (pause, rate, max in flight, watermarks, caps): the knobs
``sluice.core.knobs`` turns, for the operator's admin calls and the relay's default rate."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from sluice.backends.redis.checks import checked_int, text
from sluice.backends.redis.connection import RedisConnection
from sluice.core.errors import InvalidInput
from sluice.core.listing import check_sensitive
from sluice.core.models import QueueConfig

CONFIG_INTS = ("max_in_flight", "burst", "high_watermark", "low_watermark", "max_delayed", "max_dead",
               "max_in_flight_per_group")
MAX_BYTES = 1 << 50  # a queue's byte budget (config.lua takes up to 2^53 - 1; 1 PiB is plenty)


class RedisQueueConfig:
    """Reads and writes each queue's config hash (``keys.config``), over a shared connection."""

    def __init__(self, conn: RedisConnection) -> None:
        self.conn = conn

    def get_config(self, queue: str) -> QueueConfig:
        """Through stats.lua, which reads a config hash a team stuffed by hand (its Redis user may
        HSET it) only as far as the fields a script writes; an HGETALL here read all of it."""
        return parse_config(self.conn.scripts.stats(self.conn.keys(queue)).config)

    def set_config(self, queue: str, **changes: Any) -> QueueConfig:
        """Change some knobs (max_in_flight, rate_per_s, burst, paused, high/low_watermark)."""
        k = self.conn.keys(queue)
        if not changes:
            raise InvalidInput("set_config needs at least one change")
        fields = {name: config_value(name, value) for name, value in changes.items()}
        self.conn.register(queue)
        self.conn.scripts.config(k, fields)
        return self.get_config(queue)


def config_value(name: str, value: object) -> str:
    """One knob's value as config.lua stores it; InvalidInput for a bad value or an unknown knob."""
    if name in CONFIG_INTS:
        return str(checked_int(value, 0, 1_000_000_000, name))
    if name == "max_bytes":
        return str(checked_int(value, 0, MAX_BYTES, name))
    if name == "rate_per_s":
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1e9:
            raise InvalidInput(f"rate_per_s must be a number in 0..1e9, got {value!r}")
        return repr(float(value))
    if name == "sensitive":
        return json.dumps(check_sensitive(value), ensure_ascii=False, separators=(",", ":"))
    if name == "paused":
        if not isinstance(value, bool):
            raise InvalidInput(f"paused must be a bool, got {value!r}")
        return "1" if value else "0"
    raise InvalidInput(f"unknown queue setting {name!r}")


_COUNT = re.compile(r"0|[1-9][0-9]{0,15}")  # what config.lua writes for a count (at most 2**53 - 1)


def parse_config(raw: dict[Any, Any]) -> QueueConfig:
    """A config hash (from HGETALL, or stats.lua's reply) as a QueueConfig.

    The queue's team may write the hash by hand (its Redis user may HSET every key of its queue): a
    value config.lua would not have written reads as unset, never as an error. Before session 36 a
    3-byte ``max_in_flight`` of ``abc`` (or a ``rate_per_s`` of ``-1``) raised here, in the relay's
    plan of every queue (a failed step, again each step: no queue of that relay was pushed), in every
    gateway's admission of the queue and in the operator's list of all queues. Unset is nothing the
    team could not write itself (HDEL), so it gains nothing by it."""
    fields = {text(key): text(value) for key, value in raw.items()}
    counts = {name: int(fields[name]) for name in (*CONFIG_INTS, "max_bytes")
              if name in fields and _COUNT.fullmatch(fields[name])}
    return QueueConfig(**counts, rate_per_s=_rate(fields.get("rate_per_s")),
                       paused=fields.get("paused") == "1", sensitive=_sensitive(fields.get("sensitive")))


def _rate(stored: str | None) -> float:
    """A stored rate_per_s; one config.lua would not have written (not a number in 0..1e9) is unset."""
    try:
        rate = float(stored) if stored is not None and len(stored) <= 32 else 0.0
    except ValueError:
        return 0.0
    return rate if math.isfinite(rate) and 0 <= rate <= 1e9 else 0.0


def _sensitive(stored: str | None) -> tuple[str, ...]:
    """The stored sensitive fields; a value config.lua would not have written (a hand-made HSET)
    hides the whole payload (``""``) rather than show what it meant to hide."""
    if stored is None:
        return ()
    try:
        return tuple(check_sensitive(json.loads(stored)))
    except (ValueError, InvalidInput):
        return ("",)
