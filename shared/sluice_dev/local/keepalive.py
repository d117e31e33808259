"""Keep-alive for werkzeug's development server, which the local moto servers run on.

werkzeug's ``run_wsgi`` answers every request with ``Connection: close``: its ``http.server`` base
cannot tell where a request's body ends, so it drains the socket for 10 ms after each answer and
closes it. Every AWS call of the local stack (boto3 in each Lambda container, the relay, the CLI;
Tansu's S3 reads and writes) then paid a new connection: a connect and a close on both sides, and
a new server thread each. ``KeepAlive.run_wsgi`` reads each request's body whole first (by its
``Content-Length``, or to its last chunk), so the next request starts where this one ends, and
answers with a ``Content-Length``: a connection serves request after request on its one thread,
as a real endpoint's does. A client's ``Connection: close`` (or HTTP/1.0) still closes it.
"""

from __future__ import annotations

import io
import traceback
from collections.abc import Iterable
from typing import Any

__all__ = ["KeepAlive", "answer_bytes"]

# What a hop's framing says, which this server decides for itself: never passed from the app.
HOP_HEADERS = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length"})


def answer_bytes(status: str, headers: Iterable[tuple[str, str]], body: bytes, *, head: bool,
                 close: bool) -> bytes:
    """One HTTP/1.1 answer, framed by its ``Content-Length``. A HEAD answer keeps the length the
    app gave (the object's, with no body sent); 1xx, 204 and 304 carry no body and no length."""
    code = int(status.split(" ", 1)[0])
    lines = [f"HTTP/1.1 {status}"]
    given = None
    for name, value in headers:
        low = name.lower()
        if low == "content-length":
            given = value
        if low not in HOP_HEADERS:
            lines.append(f"{name}: {value}")
    bodiless = code < 200 or code in (204, 304)
    if head:
        if given is not None:
            lines.append(f"Content-Length: {given}")
    elif not bodiless:
        lines.append(f"Content-Length: {len(body)}")
    if close:
        lines.append("Connection: close")
    block = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return block if head or bodiless else block + body


class KeepAlive:
    """A mixin for a werkzeug ``WSGIRequestHandler`` subclass (``class H(KeepAlive, Handler)``):
    HTTP/1.1 connections kept open between requests. ``http.server``'s ``parse_request`` already
    answers ``Expect: 100-continue`` and decides ``close_connection`` from the request."""

    protocol_version = "HTTP/1.1"

    # what the werkzeug handler provides
    headers: Any
    command: str
    rfile: Any
    wfile: Any
    server: Any
    close_connection: bool

    def run_wsgi(self) -> None:
        environ: dict[str, Any] = self.make_environ()  # type: ignore[attr-defined]  # werkzeug's
        if environ.get("wsgi.input_terminated"):  # a chunked body: werkzeug's DechunkedInput
            body = environ["wsgi.input"].read()
        else:
            length = _length(environ.get("CONTENT_LENGTH"))
            if length is None:  # where this body ends, and the next request starts, is unknown
                self._answer("400 Bad Request", [], b"Bad Content-Length", close=True)
                return
            body = self.rfile.read(length) if length else b""
            if len(body) < length:  # the client went away mid-body
                self.close_connection = True
                return
        environ.pop("wsgi.input_terminated", None)
        environ["wsgi.input"] = io.BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))
        got: list[Any] = []
        written: list[bytes] = []  # what an app hands the legacy write() comes first

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            got[:] = [status, headers]
            return written.append

        try:
            result = self.server.app(environ, start_response)
            try:
                out = b"".join([*written, *result])
            finally:
                close = getattr(result, "close", None)
                if callable(close):
                    close()
        except Exception:  # the app failed: a 500, and this connection goes
            traceback.print_exc()
            got[:] = ["500 Internal Server Error", [("Content-Type", "text/plain")]]
            out = b"Internal Server Error"
            self.close_connection = True
        if not got:
            got[:] = ["500 Internal Server Error", []]
            self.close_connection = True
        self._answer(got[0], got[1], out, close=self.close_connection)

    def _answer(self, status: str, headers: list[tuple[str, str]], body: bytes, *, close: bool) -> None:
        self.close_connection = close
        self.wfile.write(answer_bytes(status, headers, body, head=self.command == "HEAD", close=close))


def _length(raw: Any) -> int | None:
    """A request's ``Content-Length`` (absent: 0), or None when it is not a count of bytes."""
    if raw in (None, ""):
        return 0
    text = str(raw).strip()
    return int(text) if text.isdigit() else None
