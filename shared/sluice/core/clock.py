"""The wall clock in integer milliseconds since the epoch, the unit Python, Lua and DynamoDB share.

Every default clock reads this one function; tests pass their own callable instead.
"""

from __future__ import annotations

import time


def wall_ms() -> int:
    return time.time_ns() // 1_000_000
