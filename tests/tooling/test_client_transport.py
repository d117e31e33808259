"""``PooledTransport`` on a real socket (issue 31, item 2): a kept-alive connection the server closed
while it sat in the pool is replaced before the next request, so even a request the client never
sends twice (no idempotency key) goes through; a refused connection is a ``ConnectionError``."""

from __future__ import annotations

import json
import socket
import time

import pytest

from sluice.client import Client, PooledTransport
from sluice.core.errors import BackendUnavailable
from sluice_dev.local.httpd import QuietHandler, ThreadedServer

VIEW = {"name": "nightly", "expression": "rate(1 day)", "queue": "emails", "payload": 1, "paused": False,
        "created_at_ms": 1, "next_firing_ms": 2}


class ClosesAfterEachAnswer(QuietHandler):
    """Answers as a kept-alive HTTP/1.1 server would (no ``Connection: close``), then closes the
    connection: what a server's idle timeout does to a pooled connection."""

    protocol_version = "HTTP/1.1"
    connections = 0  # one handler per connection

    def setup(self) -> None:
        super().setup()
        ClosesAfterEachAnswer.connections += 1

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.answer(201, json.dumps(VIEW).encode(), [("Content-Type", "application/json")])
        self.close_connection = True


def test_a_pooled_connection_the_server_closed_is_replaced_not_sent_on() -> None:
    ClosesAfterEachAnswer.connections = 0
    with ThreadedServer(ClosesAfterEachAnswer) as server, Client(server.url, sleep=lambda _s: None) as client:
        for _ in range(3):
            # create_schedule is sent once only (keyed=False): a request written into the closed
            # socket would come back as BackendUnavailable.
            assert client.create_schedule("emails", "nightly", "rate(1 day)", 1)["name"] == "nightly"
            time.sleep(0.05)  # the server's FIN reaches the pooled socket
    assert ClosesAfterEachAnswer.connections == 3


def test_a_refused_connection_is_a_connection_error_and_a_keyed_call_gives_up_after_its_attempts() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens here once the probe is closed
    transport = PooledTransport()
    with pytest.raises(ConnectionError):
        transport.send("GET", f"http://127.0.0.1:{port}/v1/jobs/x", {}, None, 2.0)
    sleeps: list[float] = []
    with Client(f"http://127.0.0.1:{port}", max_attempts=3, sleep=sleeps.append) as client, \
            pytest.raises(BackendUnavailable, match="no response after 3 attempts"):
        client.enqueue("emails", 1)
    assert len(sleeps) == 2
