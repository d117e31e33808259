"""A thread pool made on first use, for adapters that sometimes fan out blocking calls.

The store (``mark_queued`` of a relay batch) and the gateway (withdrawing an unacknowledged
batch) each issue one DynamoDB call per job. Most calls carry one job, and a Lambda
container should not start threads it never uses, so one item runs inline and the pool
exists only once a batch has needed it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


class LazyPool:
    def __init__(self, workers: int, name: str) -> None:
        self._workers = workers
        self._name = name
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """``fn`` over ``items``, concurrently when there is more than one; results in order."""
        if len(items) <= 1:
            return [fn(item) for item in items]
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix=self._name)
            pool = self._pool
        return list(pool.map(fn, items))

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False)
                self._pool = None
