"""A tiny HTTP service that honours fencing tokens: what the ``notify`` example calls.

It shows what a downstream service does with the headers from
``store.fenced.fencing_headers``: per ``Idempotency-Key`` it remembers the highest
``Sluice-Fencing-Token`` it has seen. A call with a lower token comes from a worker
that lost its lease, and is refused with 409; the same token again is a retry of a
call already made, and is answered as before without doing the work twice.

    POST /sink/<anything>   -> 200 {"accepted": true, ...} | 200 {"replayed": true} | 409
    GET  /sink              -> {"accepted": n, "replayed": n, "rejected": n, "keys": n}
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any

from sluice.backends.dynamodb.fenced import IDEMPOTENCY_HEADER, TOKEN_HEADER
from sluice_dev.local.httpd import QuietHandler, ThreadedServer


class FencedSink(ThreadedServer):
    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._lock = threading.Lock()
        self.tokens: dict[str, int] = {}
        self.counts = {"accepted": 0, "replayed": 0, "rejected": 0}
        super().__init__(self._handler(), host, port, thread_name="sluice-sink", url_path="/sink")

    def call(self, key: str, token: int) -> tuple[int, dict[str, Any]]:
        """The decision for one call: (HTTP status, body)."""
        with self._lock:
            seen = self.tokens.get(key, 0)
            if token < seen:
                self.counts["rejected"] += 1
                return 409, {"type": "urn:sluice:problem:stale-token", "title": "Stale fencing token",
                             "status": 409, "detail": f"token {token} < {seen} already seen for {key}"}
            if token == seen:
                self.counts["replayed"] += 1
                return 200, {"replayed": True, "key": key, "token": token}
            self.tokens[key] = token
            self.counts["accepted"] += 1
            return 200, {"accepted": True, "key": key, "token": token}

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {**self.counts, "keys": len(self.tokens)}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        sink = self

        class _Handler(QuietHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(min(length, 1 << 20))
                key = self.headers.get(IDEMPOTENCY_HEADER) or ""
                raw = self.headers.get(TOKEN_HEADER) or ""
                if not self.path.startswith("/sink") or not key or not raw.isdigit() or int(raw) <= 0:
                    self._send(400, {"status": 400, "title": "Bad Request",
                                     "detail": f"POST /sink/... with {TOKEN_HEADER} and "
                                               f"{IDEMPOTENCY_HEADER}"})
                    return
                self._send(*sink.call(key, int(raw)))

            def do_GET(self) -> None:
                if self.path.rstrip("/") != "/sink":
                    self._send(404, {"status": 404, "title": "Not Found"})
                    return
                self._send(200, sink.stats())

            def _send(self, status: int, body: dict[str, Any]) -> None:
                ctype = "application/problem+json" if status >= 400 else "application/json"
                self.answer(status, json.dumps(body).encode(), [("Content-Type", ctype)])

        return _Handler
