"""``sluice.core.lazy.Lazy``: the gateway's explicit build-on-first-use of its Redis queue and store
(issue 16: it replaced ``wiring._Deferred``, a ``__getattr__`` stand-in for the port)."""

from __future__ import annotations

import threading
import time

from sluice.core.lazy import Lazy, resolve


def test_builds_on_the_first_get_only_and_once() -> None:
    builds: list[int] = []

    def build() -> list[int]:
        builds.append(1)
        return builds

    held = Lazy(build)
    assert not held.built and builds == []
    assert held.get() is builds and held.get() is builds
    assert held.built and builds == [1]


def test_threads_asking_at_once_get_one_build() -> None:
    builds: list[object] = []

    def slow() -> object:
        time.sleep(0.05)
        builds.append(object())
        return builds[-1]

    held = Lazy(slow)
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(held.get())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert len(builds) == 1 and got == builds * 8


def test_resolve_takes_an_adapter_as_it_is_and_builds_a_lazy_one() -> None:
    adapter = object()
    assert resolve(adapter) is adapter
    assert resolve(Lazy(lambda: adapter)) is adapter
