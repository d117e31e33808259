"""The local stack's one threaded HTTP server (``local/httpd.py``), through the fenced sink."""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import pytest

from sluice.backends.dynamodb.fenced import IDEMPOTENCY_HEADER, TOKEN_HEADER
from sluice_dev.local.httpd import QuietHandler, ThreadedServer
from sluice_dev.local.sink import FencedSink


def _post(url: str, key: str, token: int) -> dict[str, object]:
    request = urllib.request.Request(url + "/x", data=b"{}", method="POST",
                                     headers={IDEMPOTENCY_HEADER: key, TOKEN_HEADER: str(token)})
    with urllib.request.urlopen(request, timeout=5) as response:
        return dict(json.loads(response.read()))


def test_the_sink_serves_on_its_own_thread_until_stopped() -> None:
    with FencedSink() as sink:
        assert sink.url == f"http://127.0.0.1:{sink.port}/sink" and sink.port > 0
        assert _post(sink.url, "k", 2)["accepted"] is True
        assert any(t.name == "sluice-sink" and t.daemon for t in threading.enumerate())
        with urllib.request.urlopen(sink.url, timeout=5) as response:
            assert json.loads(response.read())["accepted"] == 1
    assert not any(t.name == "sluice-sink" and t.is_alive() for t in threading.enumerate())


def test_a_stop_is_noticed_within_a_tenth_of_a_second() -> None:
    """The serving loop looked for a stop every 0.5 s: a stop 0.1 s after the start waited 0.4 s."""
    sink = FencedSink().start()
    time.sleep(0.1)
    started = time.monotonic()
    sink.stop()
    assert time.monotonic() - started < 0.2


def test_a_quiet_handler_answers_whole_bodies_none_to_a_head_and_logs_no_request_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    class Hello(QuietHandler):
        def do_GET(self) -> None:
            self.answer(200, b'{"hello":1}', [("Content-Type", "application/json"), ("X-One", "1")])

        do_HEAD = do_GET

    with ThreadedServer(Hello, thread_name="sluice-test-quiet") as server:
        with urllib.request.urlopen(server.url, timeout=5) as response:
            assert (response.read(), response.headers["Content-Length"], response.headers["X-One"]) == \
                (b'{"hello":1}', "11", "1")
        head = urllib.request.Request(server.url, method="HEAD")
        with urllib.request.urlopen(head, timeout=5) as response:
            assert (response.read(), response.headers["Content-Length"]) == (b"", "11")
    assert capsys.readouterr().err == ""


def test_a_kept_alive_connection_gets_each_answer_without_waiting_for_an_ack() -> None:
    """Issue 31: an answer is two writes (headers, body); with Nagle's algorithm on, the body waited
    for the client's delayed ACK of the headers, 40 ms, on every request of a kept-alive connection
    after its first (a pooled client made 22 requests/s). The local services' sockets send at once."""
    import http.client
    import socket

    nodelay: list[int] = []

    class Hello(QuietHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            nodelay.append(self.connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            self.answer(200, b'{"hello": 1}', [("Content-Type", "application/json")])

    with ThreadedServer(Hello) as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        started = time.monotonic()
        for _ in range(25):
            conn.request("GET", "/")
            assert conn.getresponse().read() == b'{"hello": 1}'
        took = time.monotonic() - started
        conn.close()
    assert nodelay == [1] * 25
    assert took < 0.9, f"25 requests on one connection took {took:.2f} s (40 ms each: an ACK awaited)"
