"""A TCP proxy that counts connections: what a client opened, seen from outside the client.

``CountingProxy(url)`` listens on a free port of 127.0.0.1 and forwards each connection it accepts
to ``url``'s host and port, byte for byte; ``accepted`` is how many connections reached it and
``open`` how many are still open (a client's ``close()`` must bring it to zero).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Self
from urllib.parse import urlsplit


class CountingProxy:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.path = parts.path
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._lock = threading.Lock()
        self.accepted = 0
        self.open = 0
        self._stopped = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}{self.path}"

    def __enter__(self) -> Self:
        threading.Thread(target=self._accept, name="counting-proxy", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopped = True
        self._listener.close()

    def wait_open(self, count: int, timeout_s: float = 5.0) -> int:
        """``open`` once it is ``count`` (a closed socket reaches the proxy a moment later), or
        whatever it is after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while self.open != count and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.open

    def _accept(self) -> None:
        while not self._stopped:
            try:
                downstream, _ = self._listener.accept()
            except OSError:  # closed by __exit__
                return
            upstream = socket.create_connection(self.upstream)
            with self._lock:
                self.accepted += 1
                self.open += 1
            pumps = [threading.Thread(target=_pump, args=pair, daemon=True)
                     for pair in ((downstream, upstream), (upstream, downstream))]
            for pump in pumps:
                pump.start()
            threading.Thread(target=self._closed_after, args=(pumps, downstream, upstream),
                             daemon=True).start()

    def _closed_after(self, pumps: list[threading.Thread], *sockets: socket.socket) -> None:
        for pump in pumps:
            pump.join()
        for sock in sockets:
            sock.close()
        with self._lock:
            self.open -= 1


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy until ``source`` ends, then end ``sink``'s writing half (the other pump sees it end)."""
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)
