"""A service running the fence middleware (``sluice_fence``): what the demo's frozen worker calls.

What a service team does with ``sluice_fence``, on the local stack: its WSGI app (here, one that
records each call it is let through) is wrapped in ``FenceWSGI`` with a ``RedisFenceStore`` on the
stack's Redis, namespace ``examples``. A handler's ``ctx.http`` call with a token older than the
newest seen for its job never reaches the app: the middleware answers 409 and the call raises
``StaleToken`` in the handler (the ``ledger`` example's ``notice``).

    POST /service/<anything>  -> 200 {"accepted": true, "job_id", "token", "replay"} | 400 | 409
    GET  /service             -> {"accepted": n, "replayed": n}   (what reached the app)
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterable
from http.server import ThreadingHTTPServer
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from sluice_dev.local.httpd import ThreadedServer
from sluice_fence import ENVIRON_KEY, Admitted, Fence, FenceWSGI, RedisFenceStore

NAMESPACE = "examples"


class _Server(ThreadingHTTPServer, WSGIServer):
    """wsgiref's server, a thread per request."""


class _Handler(WSGIRequestHandler):
    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as httpd.QuietHandler

    def log_message(self, format: str, *args: Any) -> None:
        return None


class FencedService(ThreadedServer):
    """The service on ``host:port`` (0: a free one), fenced in ``redis_url``'s Redis."""

    def __init__(self, redis_url: str, host: str = "127.0.0.1", port: int = 0) -> None:
        from sluice.backends.redis.client import connect

        self._lock = threading.Lock()
        self.counts = {"accepted": 0, "replayed": 0}
        super().__init__(_Handler, host, port, thread_name="sluice-service", url_path="/service",
                         server_class=_Server)
        self.client = connect(redis_url)
        self.fence = Fence(RedisFenceStore(self.client), namespace=NAMESPACE)
        self._server.set_app(FenceWSGI(self.app, self.fence))  # type: ignore[attr-defined]

    def app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path, method = str(environ.get("PATH_INFO", "")), str(environ.get("REQUEST_METHOD"))
        if not path.startswith("/service"):
            return _answer(start_response, "404 Not Found", {"status": 404, "title": "Not Found"})
        if method == "GET":
            with self._lock:
                return _answer(start_response, "200 OK", dict(self.counts))
        admitted: Admitted = environ[ENVIRON_KEY]
        claim = admitted.claim
        with self._lock:
            self.counts["replayed" if admitted.replay else "accepted"] += 1
        return _answer(start_response, "200 OK", {
            "accepted": True, "job_id": claim and claim.job_id, "token": claim and claim.token,
            "replay": admitted.replay})

    def stop(self) -> None:
        super().stop()
        self.client.close()


def _answer(start_response: Callable[..., Any], status: str, body: dict[str, Any]) -> list[bytes]:
    raw = json.dumps(body).encode()
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(raw)))])
    return [raw]
