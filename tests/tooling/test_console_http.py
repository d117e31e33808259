"""``sluice console``'s HTTP server on a real socket (a fake API behind it): the security headers
every answer carries, a forged cross-site POST refused before anything is called, and (issue 27,
item 6) a hostile local process, which did not see the launch link, that can neither read a page
nor purge, before or after the owner logged in."""

from __future__ import annotations

import http.client
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


def log_in(console: Console) -> str:
    """What the owner's browser does with the printed link: the Cookie header it then sends."""
    conn = http.client.HTTPConnection("127.0.0.1", console.port, timeout=10)
    try:
        conn.request("GET", console.login_url().removeprefix(f"http://127.0.0.1:{console.port}"))
        r = conn.getresponse()
        r.read()
        assert r.status == 303, r.status
        return r.getheader("Set-Cookie", "").split(";", 1)[0]
    finally:
        conn.close()


def test_every_answer_carries_the_security_headers(console: Console) -> None:
    base = f"http://127.0.0.1:{console.port}"
    cookie = log_in(console)
    for path in ("/", "/static/console.js", "/nope", "/login?token=x"):
        for sent in ({}, {"Cookie": cookie}):
            _, headers, _ = send(base + path, **sent)
            assert headers["Content-Security-Policy"].startswith("default-src 'self'"), path
            assert headers["X-Frame-Options"] == "DENY"
            assert headers["Referrer-Policy"] == "same-origin"  # no-referrer would make our Origin "null"
    status, _, body = send(base + "/", Cookie=cookie)
    assert status == 200 and f'value="{console.token}"' in body


def test_a_forged_cross_site_purge_is_refused(console: Console) -> None:
    fake = console.backend
    assert isinstance(fake, FakeBackend)
    base = f"http://127.0.0.1:{console.port}"
    cookie = log_in(console)
    form = f"confirmed=1&csrf={console.token}".encode()
    status, _, body = send(base + "/queues/emails/dlq/purge", form, Origin="http://evil.example",
                           Cookie=cookie, **{"Sec-Fetch-Site": "cross-site", "Content-Type": FORM})
    assert status == 403 and "cross-site" in body
    status, _, _ = send(base + "/queues/emails/dlq/purge", b"confirmed=1", Cookie=cookie,
                        **{"Content-Type": FORM})
    assert status == 403
    assert fake.calls == []
    status, _, _ = send(base + "/queues/emails/dlq/purge", form, Origin=base, Cookie=cookie,
                        **{"Sec-Fetch-Site": "same-origin", "Content-Type": FORM})
    assert status == 200 and fake.calls == [("purge", "emails")]  # urllib follows the 303 to the DLQ page


def test_a_hostile_local_process_can_neither_read_a_page_nor_purge(console: Console) -> None:
    """It can connect to 127.0.0.1 as any process can, send the right Host, Origin and Sec-Fetch-Site,
    and GET every page: without the cookie, which only the launch link gives, every answer is 401
    and carries no CSRF token, so its purge, with or without a guessed token, is refused too.
    Once the owner has used the link, the link gives it nothing either."""
    fake = console.backend
    assert isinstance(fake, FakeBackend)
    base = f"http://127.0.0.1:{console.port}"
    same = {"Origin": base, "Sec-Fetch-Site": "same-origin", "Content-Type": FORM}

    def attempt() -> None:
        for path in ("/", "/queues/emails/dlq", "/fragment/queues", "/static/console.js", "/schedules"):
            status, headers, body = send(base + path)
            assert status == 401 and console.token not in body and "Set-Cookie" not in headers, path
        for form in (b"confirmed=1", b"confirmed=1&csrf=guess", f"confirmed=1&csrf={'x' * 43}".encode()):
            status, _, body = send(base + "/queues/emails/dlq/purge", form, **same)
            assert status == 401 and console.token not in body
            status, _, _ = send(base + "/queues/emails/dlq/purge", form, Cookie="sluice_console=guess",
                                **same)
            assert status == 401

    attempt()
    cookie = log_in(console)  # the owner
    attempt()
    status, _, _ = send(console.login_url())  # the spent link
    assert status == 403
    assert fake.calls == []
    status, _, body = send(base + "/queues/emails/dlq", Cookie=cookie)
    assert status == 200 and console.token in body  # the owner's browser still works
