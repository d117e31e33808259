"""``Lazy[T]``: an adapter built on its first use, explicitly (not a stand-in for the adapter).

The gateway's Redis queue and jobs-table store are held this way: importing redis-py costs a
cold start about 100 ms (it loads redis.asyncio too), and building the jobs table's client
another 100-200 ms, and the enqueue path needs neither. The holder is not a port: whoever
holds one calls ``get()``, so its type says the adapter may not exist yet.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Lazy(Generic[T]):
    """``build()`` on the first ``get()``, once (threads may ask at once: the gateway's
    withdrawal pool and a request); every later ``get()`` returns the same object."""

    def __init__(self, build: Callable[[], T]) -> None:
        self._build = build
        self._value: T | None = None
        self._lock = threading.Lock()

    def get(self) -> T:
        value = self._value
        if value is None:
            with self._lock:
                if self._value is None:
                    self._value = self._build()
                value = self._value
        return value

    @property
    def built(self) -> bool:
        return self._value is not None


def resolve(held: T | Lazy[T]) -> T:
    """The adapter itself, built now if it is held lazily."""
    return held.get() if isinstance(held, Lazy) else held
