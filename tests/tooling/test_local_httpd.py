"""The local stack's one threaded HTTP server (``local/httpd.py``), through the fenced sink."""

from __future__ import annotations

import json
import threading
import time
import urllib.request

from sluice.backends.dynamodb.fenced import IDEMPOTENCY_HEADER, TOKEN_HEADER
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
