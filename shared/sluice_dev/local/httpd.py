"""An HTTP server on a daemon thread, for the local stack's fakes of AWS endpoints.

The local gateway (``http/local_server.py``), the Lambda Invoke API (``lambdas.py``) and the
fenced sink (``sink.py``) differ only in their request handler; starting, stopping and the
URL are this one class, and how a handler writes an answer is ``QuietHandler``.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


class QuietHandler(BaseHTTPRequestHandler):
    """A local service's request handler: answers a whole body at once and logs no request line
    (the stack's logs are the functions')."""

    def setup(self) -> None:
        super().setup()
        # An answer is two writes (headers, then body). On a kept-alive connection Nagle's
        # algorithm held the body until the client acknowledged the headers, which its delayed
        # ACK does after 40 ms: every request after a connection's first took 40 ms more
        # (benchmarks/bench_client.py: 22 requests/s on a pooled connection, issue 31).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def answer(self, status: int, raw: bytes, headers: Iterable[tuple[str, str]] = ()) -> None:
        """``status``, ``headers`` in their order, then ``raw`` (none to a HEAD)."""
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(raw)

    def log_message(self, format: str, *args: Any) -> None:
        return None


class ThreadedServer:
    """Serves ``handler`` on ``host:port`` (0: a free port) from a daemon thread once started."""

    # How often the serving loop looks for ``stop``: socketserver's default, 0.5 s, was what each
    # stop waited (half of it on average; a local stack stops four such servers).
    POLL_S = 0.05

    def __init__(self, handler: type[BaseHTTPRequestHandler], host: str = "127.0.0.1", port: int = 0, *,
                 thread_name: str = "sluice-http", url_path: str = "",
                 server_class: type[ThreadingHTTPServer] = ThreadingHTTPServer) -> None:
        self._server = server_class((host, port), handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None
        self._thread_name = thread_name
        self._url_path = url_path

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self._url_path}"

    def start(self) -> Self:
        self._thread = threading.Thread(target=self.serve_forever, name=self._thread_name, daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve on the calling thread until ``stop`` (from another thread)."""
        self._server.serve_forever(self.POLL_S)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
