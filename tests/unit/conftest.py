"""Unit tests must not open sockets: anything that tries fails loudly."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest


class _NoSockets(socket.socket):
    def __init__(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError("unit tests may not open sockets; move this test to tests/integration")


@pytest.fixture(autouse=True)
def _no_sockets(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(socket, "socket", _NoSockets)
    monkeypatch.setattr(socket, "create_connection",
                        lambda *a, **k: (_ for _ in ()).throw(RuntimeError("no sockets in unit tests")))
    yield
