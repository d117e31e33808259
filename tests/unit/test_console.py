"""``sluice console``: its HTML (everything escaped), its routes, its launch link and session cookie,
and its CSRF refusals, with a fake API."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlencode

import pytest

from sluice.client import Client, HttpResponse
from sluice.core.errors import InvalidInput, NoRoute, NotOperator
from sluice.core.models import DeadJob, QueueStats
from sluice.core.wire import QueueView
from sluice_dev.cli.console import render
from sluice_dev.cli.console.backend import History, Rates, Watched
from sluice_dev.cli.console.server import Console, Response
from sluice_dev.fakes import EVIL, JOB, FakeBackend, job_view, queue_row

PORT = 8470
HOST = {"host": f"127.0.0.1:{PORT}"}
_SESSIONS: dict[int, tuple[Console, dict[str, str]]] = {}


def session(app: Console) -> dict[str, str]:
    """The Cookie header of ``app``'s one session, logging in with its launch link the first time
    (issue 27, item 6: every route needs it)."""
    held = _SESSIONS.get(id(app))
    if held is None or held[0] is not app:
        r = app.handle("GET", f"/login?token={app.launch_token}", HOST)
        assert r.status == 303, r.body
        cookie = r.headers["Set-Cookie"].split(";", 1)[0]
        held = _SESSIONS[id(app)] = (app, {"cookie": cookie})
    return held[1]


def view(queue: str = "emails", **kw: Any) -> QueueView:
    base: dict[str, Any] = dict(queue=queue, ready=3, delayed=1, leased=2, dead=1, oldest_ready_age_ms=1500,
                                paused=False, rate_per_s=0.0, burst=0, max_in_flight=0, high_watermark=0,
                                low_watermark=0)
    return QueueView(**(base | kw))


@pytest.fixture
def app() -> Console:
    return Console(FakeBackend(), "local stack", PORT, Watched({"emails"}))


def get(app: Console, path: str) -> Response:
    return app.handle("GET", path, HOST | session(app))


def post(app: Console, path: str, fields: dict[str, str], *, token: bool = True, **headers: str) -> Response:
    body = urlencode(fields | ({"csrf": app.token} if token else {})).encode()
    same = {"sec-fetch-site": "same-origin", "origin": f"http://127.0.0.1:{PORT}"}
    return app.handle("POST", path, HOST | session(app) | same | headers, body)


def test_every_page_escapes_user_data(app: Console) -> None:
    fake = app.backend
    assert isinstance(fake, FakeBackend)
    app.watched.add("x-evil")
    for path in ("/", f"/jobs?id={JOB}", f"/fragment/job?id={JOB}", "/queues/emails/dlq", "/schedules",
                 "/jobs?id=" + EVIL):
        page = get(app, path).body
        assert "<script>alert" not in page, path
        assert "<script" not in page.replace('<script src="/static/console.js" defer></script>', ""), path
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in get(app, "/queues/emails/dlq").body
    assert "&lt;script&gt;" in get(app, f"/jobs?id={JOB}").body


def test_render_escapes_queue_names_and_attributes() -> None:
    html = render.dlq_page("emails", [DeadJob(job_id='a"b<c', queue="emails", attempts=1, last_error=EVIL,
                                              died_at_ms=0)], "tok", '"><img src=x onerror=alert(1)>')
    assert 'a"b<c' not in html and "<img" not in html and "&quot;&gt;&lt;img" in html
    assert render.esc("<&>\"'") == "&lt;&amp;&gt;&quot;&#x27;"


def test_the_job_page_shows_state_attempts_progress_result_and_family(app: Console) -> None:
    page = get(app, f"/jobs?id={JOB}").body
    for text in ('id="job-status">dead<', "<th>attempts</th><td>3</td>", "40%", "fencing token",
                 f'/jobs?id={JOB}">{JOB}</a>', 'data-final="yes"'):
        assert text in page, text
    missing = get(app, "/jobs?id=01JB0000000000000000000000.emails.zzzzzzzzzz")
    assert missing.status == 404 and "no job" in missing.body


def test_the_queues_page_shows_depths_state_and_a_finished_jobs_sparkline(app: Console) -> None:
    ticks = iter([0.0, 2.0, 4.0])
    app.history = History(clock=lambda: next(ticks))
    fake = app.backend
    assert isinstance(fake, FakeBackend)
    first = get(app, "/").body
    assert '<td class="ready">3</td>' in first and 'class="state running"' in first
    assert "no data yet" in first and "<th>finished</th>" in first and "drain" not in first
    get(app, "/fragment/queues")
    fragment = get(app, "/fragment/queues").body
    assert '<polyline class="finished"' in fragment and '<polyline class="dead"' in fragment
    assert "<html" not in fragment and "jobs finished per second" in fragment
    # each poll 5 more jobs finished (4 succeeded, 1 dead), 2 s apart
    assert '<td class="finished" title="since the counters began: 12 succeeded, 3 failed or dead, ' \
           '0 cancelled">2.50/s</td>' in fragment


def test_history_rates_are_finished_jobs_per_second_between_polls() -> None:
    """Differences of the cumulative counts; a drop (Redis lost them) counts from 0 again."""
    ticks = iter([0.0, 0.5, 2.0, 4.0, 5.0, 6.0])
    h = History(clock=lambda: next(ticks))
    for succeeded, dead in ((10, 0), (11, 0), (16, 1), (22, 1), (3, 1), (3, 1)):
        # the 0.5 s poll is too close to the first: ignored
        h.record(QueueStats.model_validate(queue_row(succeeded=succeeded, dead=dead)))
    assert h.rates("emails") == [Rates(3.5, 0.5), Rates(3.0, 0.0), Rates(4.0, 1.0), Rates(0.0, 0.0)]


def test_without_queue_names_every_listed_queue_shows_and_queue_narrows() -> None:
    fake = FakeBackend()
    every = Console(fake, "x", PORT, Watched(every=True))
    page = get(every, "/").body
    assert 'data-queue="emails"' in page and 'data-queue="reports"' in page
    post(every, "/watch", {"queue": "later"})  # added in the page though not listed yet
    assert 'data-queue="later"' in get(every, "/").body
    narrowed = Console(fake, "x", PORT, Watched({"reports"}))
    page = get(narrowed, "/").body
    assert 'data-queue="reports"' in page and 'data-queue="emails"' not in page

    class Refused(FakeBackend):
        def queue_rows(self) -> list[dict[str, Any]]:
            raise NotOperator("not allowed to list queues")

    page = get(Console(Refused(), "x", PORT, Watched({"emails"}, every=True)), "/").body
    assert "GET /v1/admin/queues" in page and "not allowed to list queues" in page
    assert 'data-queue="emails"' in page  # a named queue still shows


def test_pause_resume_and_rate_call_the_operator_api(app: Console) -> None:
    fake = app.backend
    assert isinstance(fake, FakeBackend)
    r = post(app, "/queues/emails/pause", {})
    assert (r.status, r.headers["Location"]) == (303, "/?msg=emails%20paused")
    assert 'class="state paused"' in get(app, "/").body
    post(app, "/queues/emails/resume", {})
    post(app, "/queues/emails/rate", {"per_second": "2.5", "burst": "5"})
    assert fake.calls == [("pause", "emails"), ("resume", "emails"), ("rate", "emails", 2.5, 5)]
    bad = post(app, "/queues/emails/rate", {"per_second": "fast"})
    assert bad.status == 400 and "per_second must be a number" in bad.body


def test_redrive_and_purge_ask_first_then_act(app: Console) -> None:
    fake = app.backend
    assert isinstance(fake, FakeBackend)
    ask = post(app, "/queues/emails/dlq/purge", {})
    assert ask.status == 200 and "Purge every dead job of emails?" in ask.body and fake.calls == []
    assert 'name="confirmed" value="1"' in ask.body
    done = post(app, "/queues/emails/dlq/purge", {"confirmed": "1"})
    assert done.status == 303 and fake.calls == [("purge", "emails")]
    ask = post(app, "/queues/emails/dlq/redrive", {"job_id": JOB})
    assert f"Redrive dead job {JOB}" in ask.body and len(fake.calls) == 1
    post(app, "/queues/emails/dlq/redrive", {"job_id": JOB, "confirmed": "1"})
    post(app, "/queues/emails/dlq/redrive", {"all": "1", "confirmed": "1"})
    assert fake.calls[1:] == [("redrive", "emails", JOB), ("redrive", "emails", None)]


@pytest.mark.parametrize("headers, token", [
    ({"sec-fetch-site": "cross-site"}, True),
    ({"sec-fetch-site": "same-site"}, True),
    ({"origin": "http://evil.example"}, True),
    ({"origin": "null"}, True),
    ({}, False),
])
def test_cross_origin_posts_are_refused_and_change_nothing(app: Console, headers: dict[str, str],
                                                           token: bool) -> None:
    fake = app.backend
    assert isinstance(fake, FakeBackend)
    for path, fields in (("/queues/emails/dlq/purge", {"confirmed": "1"}), ("/queues/emails/pause", {}),
                         ("/queues/emails/dlq/redrive", {"all": "1", "confirmed": "1"}),
                         ("/watch", {"queue": "x"}), ("/schedules/emails/nightly/pause", {}),
                         ("/schedules/emails/nightly/resume", {}),
                         ("/schedules/emails/nightly/delete", {"confirmed": "1"})):
        r = post(app, path, fields, token=token, **headers)
        assert r.status == 403, (path, r.body)
    wrong = app.handle("POST", "/queues/emails/pause", HOST | session(app), b"csrf=guess")
    assert wrong.status == 403
    assert fake.calls == [] and app.watched.all() == ["emails"]


def test_schedules_pause_resume_and_delete_after_a_confirmation(app: Console) -> None:
    fake = app.backend
    assert isinstance(fake, FakeBackend)
    page = get(app, "/schedules").body
    assert 'data-schedule="emails/nightly"' in page and "<td class=\"state\">active</td>" in page
    assert 'action="/schedules/emails/nightly/pause"' in page and f'value="{app.token}"' in page
    r = post(app, "/schedules/emails/nightly/pause", {})
    back = "/schedules?msg=schedule%20nightly%20of%20emails%20paused"
    assert (r.status, r.headers["Location"]) == (303, back)
    page = get(app, back).body
    assert "<td class=\"state\">paused</td>" in page and 'action="/schedules/emails/nightly/resume"' in page
    assert 'id="flash">schedule nightly of emails paused<' in page
    post(app, "/schedules/emails/nightly/resume", {})
    ask = post(app, "/schedules/emails/nightly/delete", {})
    assert ask.status == 200 and "Delete schedule nightly of emails?" in ask.body
    assert 'name="confirmed" value="1"' in ask.body
    assert 'action="/schedules/emails/nightly/delete"' in ask.body
    assert fake.calls == [("pause_schedule", "emails", "nightly"), ("resume_schedule", "emails", "nightly")]
    done = post(app, "/schedules/emails/nightly/delete", {"confirmed": "1"})
    assert done.status == 303 and fake.calls[-1] == ("delete_schedule", "emails", "nightly")


@pytest.mark.parametrize("path", ["/schedules/emails/bad%20name/pause", "/schedules/Emails/nightly/pause",
                                  "/schedules/emails/nightly/explode",
                                  "/schedules/emails/" + "n" * 65 + "/pause"])
def test_a_bad_schedule_action_is_refused_and_calls_nothing(app: Console, path: str) -> None:
    fake = app.backend
    assert isinstance(fake, FakeBackend)
    assert post(app, path, {"confirmed": "1"}).status in (400, 404)
    assert fake.calls == []


def test_schedule_rows_escape_every_value() -> None:
    html = render.schedules_page([{"name": 'n"><img src=x>', "queue": "<q>", "expression": EVIL,
                                   "payload": {"p": EVIL}, "paused": False}], None, "tok", EVIL)
    assert "<img" not in html and "<script" not in html and "<q>" not in html
    assert "/schedules/%3Cq%3E/n%22%3E%3Cimg%20src%3Dx%3E/pause" in html


def test_a_foreign_host_is_refused_against_dns_rebinding(app: Console) -> None:
    assert app.handle("GET", "/", {"host": f"evil.example:{PORT}"}).status == 421
    assert app.handle("GET", "/", {"host": f"localhost:{PORT}"} | session(app)).status == 200


def test_the_token_is_in_the_page_and_differs_per_process(app: Console) -> None:
    assert f'name="csrf" value="{app.token}"' in get(app, "/").body
    assert Console(FakeBackend(), "x", PORT).token != app.token


def test_no_credential_reaches_the_browser() -> None:
    """The console's Client signs with SigV4 on the server; no page, script or answer carries the keys."""
    from botocore.credentials import Credentials

    secret, key_id, session = "wJalrSECRETKEYmaterial0000", "AKIAFAKEKEYID00000", "FwoGZXIvYXdzSESSIONTOKEN"
    seen: list[dict[str, str]] = []

    class Transport:
        def send(self, method: str, url: str, headers: Any, body: Any, timeout: float) -> HttpResponse:
            seen.append(dict(headers))
            if "/v1/jobs/" in url:
                doc = job_view(status="succeeded", result={"ok": True}).model_dump_json().encode()
            elif url.endswith("/dlq?limit=100"):
                doc = b'{"queue":"emails","jobs":[]}'
            elif url.endswith("/schedules"):
                return HttpResponse(404, {}, b'{"code":"NOT_FOUND","detail":"no route"}')
            elif url.endswith("/v1/admin/queues/emails"):
                doc = json.dumps(queue_row()).encode()
            elif "/v1/admin/" in url:
                doc = b'{"queue":"emails","paused":true}'
            else:
                doc = view().model_dump_json().encode()
            return HttpResponse(200, {}, doc)

    client = Client("https://abc.execute-api.eu-west-1.amazonaws.com/prod", sign_sigv4=True,
                    credentials=Credentials(key_id, secret, session), transport=Transport())
    app = Console(client, client.api_url, PORT, Watched({"emails"}))
    answers = [get(app, p) for p in ("/", "/fragment/queues", f"/jobs?id={JOB}", f"/fragment/job?id={JOB}",
                                     "/queues/emails/dlq", "/schedules", "/static/console.js",
                                     "/static/console.css")]
    answers.append(post(app, "/queues/emails/pause", {}))
    assert all(a.status in (200, 303) for a in answers), [(a.status, a.body[:200]) for a in answers]
    assert any("Authorization" in h and key_id in h["Authorization"] for h in seen)  # it did sign
    for a in answers:
        text = a.body + repr(a.headers)
        for material in (secret, key_id, session, "Signature=", "X-Amz-Security-Token"):
            assert material not in text
    assert "serves no schedules" in get(app, "/schedules").body


def test_static_files_and_unknown_paths(app: Console) -> None:
    assert get(app, "/static/console.js").content_type.startswith("text/javascript")
    assert get(app, "/static/../server.py").status == 404
    assert get(app, "/nope").status == 404
    assert app.handle("DELETE", "/", HOST | session(app)).status == 405
    assert re.search(r"data-refresh=\"/fragment/queues\"", get(app, "/").body)


def test_against_a_deployment_the_console_signs_on_its_server(tmp_path: Any) -> None:
    from sluice_dev.cli.console import build
    from sluice_dev.cli.target import Target

    url = "https://abc.execute-api.eu-west-1.amazonaws.com/prod"
    target = Target(state_dir=tmp_path / ".sluice", env={"SLUICE_API_URL": url})
    app = build(target, None, 0, ("emails",))
    assert isinstance(app.backend, Client) and app.backend.sign_sigv4 and app.backend.region == "eu-west-1"
    assert app.where == url
    assert app.watched.all() == ["emails"] and app.watched.every is False  # --queue narrows
    other = build(target, "https://other.example/v1", 0, ())
    assert other.where == "https://other.example/v1"
    assert other.watched.all() == [] and other.watched.every is True  # every queue the API lists
    with pytest.raises(InvalidInput):
        build(target, None, 0, ("Bad Name",))


def test_client_schedules_lists_them_or_says_none_are_served() -> None:
    answers = iter([HttpResponse(200, {}, b'{"schedules":[{"name":"nightly"}]}'),
                    HttpResponse(404, {}, b'{"code":"NOT_FOUND","detail":"no route"}'),
                    HttpResponse(400, {}, b'{"code":"INVALID_INPUT","detail":"bad"}'),
                    HttpResponse(404, {}, b'{"code":"NO_ROUTE","detail":"no worker"}')])

    class Transport:
        def send(self, method: str, url: str, headers: Any, body: Any, timeout: float) -> HttpResponse:
            assert (method, url) == ("GET", "http://gw/v1/admin/queues/emails/schedules")
            return next(answers)

    client = Client("http://gw", transport=Transport(), max_attempts=1)
    assert client.schedules("emails") == [{"name": "nightly"}]
    assert client.schedules("emails") is None
    with pytest.raises(InvalidInput):
        client.schedules("emails")
    with pytest.raises(NoRoute):  # an unrouted queue is an error, not "no schedules"
        client.schedules("emails")


def test_client_pauses_resumes_and_deletes_a_schedule_on_the_operator_routes() -> None:
    sent: list[tuple[str, str]] = []

    class Transport:
        def send(self, method: str, url: str, headers: Any, body: Any, timeout: float) -> HttpResponse:
            sent.append((method, url))
            if method == "DELETE":
                return HttpResponse(204, {}, b"")
            return HttpResponse(200, {}, b'{"name":"nightly","paused":true}')

    client = Client("http://gw", transport=Transport(), max_attempts=1)
    assert client.pause_schedule("emails", "nightly")["paused"] is True
    client.resume_schedule("emails", "nightly")
    assert client.delete_schedule("emails", "nightly") is None
    base = "http://gw/v1/admin/queues/emails/schedules/nightly"
    assert sent == [("POST", base + "/pause"), ("POST", base + "/resume"), ("DELETE", base)]
    for bad in ("../dlq", "a/b", "", "x" * 65):
        with pytest.raises(InvalidInput):
            client.pause_schedule("emails", bad)
    assert len(sent) == 3  # nothing sent for a bad name


# -- issue 27, item 6: a launch link for a cookie, the cookie on every request ------------------------

EVERY_ROUTE = [("GET", "/"), ("HEAD", "/"), ("GET", "/fragment/queues"), ("GET", f"/jobs?id={JOB}"),
               ("GET", f"/fragment/job?id={JOB}"), ("GET", "/queues/emails/dlq"), ("GET", "/schedules"),
               ("GET", "/static/console.js"), ("GET", "/static/console.css"), ("GET", "/nope"),
               ("POST", "/queues/emails/pause"), ("POST", "/queues/emails/resume"),
               ("POST", "/queues/emails/rate"), ("POST", "/queues/emails/dlq/purge"),
               ("POST", "/queues/emails/dlq/redrive"), ("POST", "/watch"),
               ("POST", "/schedules/emails/nightly/delete"), ("DELETE", "/")]


@pytest.mark.parametrize("cookie", [None, "sluice_console=guess", "other=1", "sluice_console=",
                                    "sluice_console=a; sluice_console=b"])
def test_without_the_cookie_every_route_is_refused_and_no_page_carries_the_token(
        app: Console, cookie: str | None) -> None:
    fake = app.backend
    assert isinstance(fake, FakeBackend)
    form = urlencode({"csrf": app.token, "confirmed": "1", "all": "1", "queue": "x", "per_second": "1"})
    headers = HOST | {"sec-fetch-site": "same-origin", "origin": f"http://127.0.0.1:{PORT}"}
    for method, path in EVERY_ROUTE:
        r = app.handle(method, path, headers | ({"cookie": cookie} if cookie else {}), form.encode())
        assert r.status == 401, (method, path, r.status)
        assert app.token not in r.body and "csrf" not in r.body and "Set-Cookie" not in r.headers
    assert fake.calls == [] and app.watched.all() == ["emails"]


def test_the_launch_link_works_once_for_an_http_only_same_site_strict_cookie(app: Console) -> None:
    assert app.handle("GET", "/login?token=guess", HOST).status == 403
    assert app.handle("GET", "/login", HOST).status == 403
    first = app.handle("GET", f"/login?token={app.launch_token}", HOST)
    assert (first.status, first.headers["Location"]) == (303, "/")
    cookie = first.headers["Set-Cookie"]
    name, _, rest = cookie.partition("=")
    value, *flags = [part.strip() for part in rest.split(";")]
    assert name == "sluice_console" and len(value) >= 40 and value != app.launch_token
    assert {"HttpOnly", "SameSite=Strict", "Path=/"} <= set(flags)
    assert not any(f.startswith(("Max-Age", "Expires", "Domain")) for f in flags)  # ends with the browser
    again = app.handle("GET", f"/login?token={app.launch_token}", HOST)  # single use
    assert again.status == 403 and "Set-Cookie" not in again.headers
    page = app.handle("GET", "/", HOST | {"cookie": f"theme=dark; sluice_console={value}"})
    assert page.status == 200 and f'name="csrf" value="{app.token}"' in page.body
    foreign = {"host": f"evil.example:{PORT}"}
    assert app.handle("GET", f"/login?token={app.launch_token}", foreign).status == 421
    other = Console(FakeBackend(), "x", PORT)
    assert other.launch_token != app.launch_token
    not_its = HOST | {"cookie": f"sluice_console={value}"}
    assert other.handle("GET", "/", not_its).status == 401  # another console's cookie
