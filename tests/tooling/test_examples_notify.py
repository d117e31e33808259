"""The notify example against a real HTTP server: redirects are never followed (issue 19, item 4)."""

from __future__ import annotations

import threading
import urllib.error
from typing import Any

import pytest

from sluice_dev import examples as ex

pytestmark = pytest.mark.integration


@pytest.fixture
def sink_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ex.NOTIFY_HOSTS_ENV, "127.0.0.1:9")


def test_notify_follows_no_redirect(sink_host: None) -> None:
    """A real server on an allowed host answers 302 to the metadata service: not followed."""
    import http.server

    hits: list[str] = []

    class Redirect(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            hits.append(self.path)
            self.send_response(302)
            self.send_header("Location", "http://169.254.169.254/latest/meta-data/")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            return None

    server = http.server.HTTPServer(("127.0.0.1", 0), Redirect)
    thread = threading.Thread(target=server.handle_request, daemon=True)
    thread.start()
    try:
        request = ex.urllib.request.Request(f"http://127.0.0.1:{server.server_port}/x", data=b"{}",
                                            method="POST")
        with pytest.raises(urllib.error.HTTPError) as raised:
            ex._open(request, timeout=5)
        assert raised.value.code == 302 and hits == ["/x"]
    finally:
        thread.join(5)
        server.server_close()
