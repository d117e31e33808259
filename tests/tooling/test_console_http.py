"""``sluice console``'s HTTP server on a real socket (a fake API behind it): the security headers
every answer carries, and a forged cross-site POST refused before anything is called."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from sluice_dev.cli.console.backend import Watched
from sluice_dev.cli.console.server import Console, serve
from sluice_dev.fakes import FakeBackend

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]
FORM = "application/x-www-form-urlencoded"


@pytest.fixture
def console() -> Iterator[Console]:
    app = Console(FakeBackend(), "fake", 0, Watched({"emails"}))
    server = serve(app)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield app
    finally:
        server.shutdown()
        server.server_close()


def send(url: str, data: bytes | None = None, **headers: str) -> tuple[int, dict[str, str], str]:
    method = "GET" if data is None else "POST"
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, dict(exc.headers), exc.read().decode()


def test_every_answer_carries_the_security_headers(console: Console) -> None:
    base = f"http://127.0.0.1:{console.port}"
    for path in ("/", "/static/console.js", "/nope"):
        _, headers, _ = send(base + path)
        assert headers["Content-Security-Policy"].startswith("default-src 'self'"), path
        assert headers["X-Frame-Options"] == "DENY"
        assert headers["Referrer-Policy"] == "same-origin"  # no-referrer would make our Origin "null"
    status, _, body = send(base + "/")
    assert status == 200 and f'value="{console.token}"' in body


def test_a_forged_cross_site_purge_is_refused(console: Console) -> None:
    fake = console.backend
    assert isinstance(fake, FakeBackend)
    base = f"http://127.0.0.1:{console.port}"
    form = f"confirmed=1&csrf={console.token}".encode()
    status, _, body = send(base + "/queues/emails/dlq/purge", form, Origin="http://evil.example",
                           **{"Sec-Fetch-Site": "cross-site", "Content-Type": FORM})
    assert status == 403 and "cross-site" in body
    status, _, _ = send(base + "/queues/emails/dlq/purge", b"confirmed=1", **{"Content-Type": FORM})
    assert status == 403
    assert fake.calls == []
    status, _, _ = send(base + "/queues/emails/dlq/purge", form, Origin=base,
                        **{"Sec-Fetch-Site": "same-origin", "Content-Type": FORM})
    assert status == 200 and fake.calls == [("purge", "emails")]  # urllib follows the 303 to the DLQ page
