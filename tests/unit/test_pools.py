"""LazyPool: one item runs inline with no thread; a batch fans out, results in order."""

from __future__ import annotations

import threading

from sluice.core.pools import LazyPool


def test_one_item_runs_inline_and_starts_no_pool() -> None:
    pool = LazyPool(4, "t")
    here = threading.current_thread().name
    assert pool.map(lambda x: (x, threading.current_thread().name), [1]) == [(1, here)]
    assert pool.map(lambda x: x, []) == []
    assert pool._pool is None


def test_a_batch_runs_on_the_pool_in_order_and_close_lets_it_start_again() -> None:
    pool = LazyPool(4, "sluice-test")
    out = pool.map(lambda x: (x * 2, threading.current_thread().name), list(range(20)))
    assert [v for v, _ in out] == [x * 2 for x in range(20)]
    assert all(name.startswith("sluice-test") for _, name in out)
    pool.close()
    assert pool._pool is None
    assert pool.map(lambda x: x + 1, [1, 2]) == [2, 3]
    pool.close()
