"""The console's routes (``Console.handle``, no sockets) and the HTTP server that serves them.

**Who may use it** (issue 27, item 6). Any local process can connect to 127.0.0.1, so being
local proves nothing. ``sluice console`` prints a launch link with a one-time token
(``/login?token=...``); opening it exchanges the token for a session cookie (HttpOnly, so no
script reads it; SameSite=Strict, so no other site's page sends it) and the token is spent.
Every other request, GET included, needs that cookie (401 without it): a process that did not
see the link gets no page, so never the CSRF token the forms carry, and cannot change anything.

Every request that changes something is a POST that must also pass ``Console.refuses``: the
Host is this server's (no DNS rebinding), the browser says it comes from this origin
(``Sec-Fetch-Site`` ``same-origin`` and ``Origin`` equal to ours when sent) and the form carries
the per-process token embedded in our pages. A page on another site can therefore not pause a
queue or purge a dead-letter queue through a browser that has the console open. Redrive, purge
and deleting a schedule also ask for a confirmation (a second POST with ``confirmed=1``).
"""

from __future__ import annotations

import hmac
import re
import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from sluice.core.errors import SluiceError
from sluice.core.models import QueueStats, validate_job_id, validate_queue_name
from sluice.core.schedules import check_name
from sluice_dev.cli.console import pages, render, scenario
from sluice_dev.cli.console import timeline as render_timeline
from sluice_dev.cli.console.backend import Backend, History, Watched
from sluice_dev.local.httpd import QuietHandler

HEADERS = {
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; form-action 'self'",
    "X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store",
    "Referrer-Policy": "same-origin",  # not no-referrer: with it a form POST's Origin is "null", refused
}
STATIC = {"console.js": "text/javascript; charset=utf-8", "console.css": "text/css; charset=utf-8"}
_QUEUE_POST = re.compile(r"^/queues/([^/]+)/(pause|resume|rate|dlq/redrive|dlq/purge)$")
_DLQ = re.compile(r"^/queues/([^/]+)/dlq$")
_SCHEDULE_POST = re.compile(r"^/schedules/([^/]+)/([^/]+)/(pause|resume|delete)$")
MAX_FORM = 16_384
TEXT = "text/plain; charset=utf-8"
COOKIE = "sluice_console"
# No Secure flag: the console is plain http on 127.0.0.1 (browsers treat it as a secure context,
# but a Secure cookie is still refused over http by some). No Max-Age: it ends with the browser.
COOKIE_FLAGS = "HttpOnly; SameSite=Strict; Path=/"
LOG_IN = ("log in first: open the link `sluice console` printed when it started (it works once; "
          "restart the console for a new one)")


@dataclass
class Response:
    status: int
    body: str = ""
    content_type: str = "text/html; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Console:
    backend: Backend
    where: str
    port: int
    watched: Watched = field(default_factory=Watched)
    history: History = field(default_factory=History)
    token: str = field(default_factory=lambda: secrets.token_urlsafe(32))  # the forms' CSRF token
    launch_token: str = field(default_factory=lambda: secrets.token_urlsafe(32))  # printed, used once
    sessions: set[str] = field(default_factory=set)  # the cookies handed out (one: the link works once)
    launched: bool = False
    scenarios: scenario.Runs | None = None  # the scenario page's runs; None: not the local stack (issue 32)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def origins(self) -> set[str]:
        return {f"http://127.0.0.1:{self.port}", f"http://localhost:{self.port}"}

    def login_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/login?token={self.launch_token}"

    # -- the launch link and the session cookie ----------------------------------------------

    def log_in(self, query: Mapping[str, str]) -> Response:
        """``/login?token=``: the launch token, once, for a session cookie; 403 for any other try."""
        given = query.get("token", "").encode()
        with self._lock:
            if self.launched or not hmac.compare_digest(given, self.launch_token.encode()):
                return Response(403, "this launch link is wrong or was used already: restart sluice console "
                                     "for a new one", TEXT)
            self.launched = True
            session = secrets.token_urlsafe(32)
            self.sessions.add(session)
        return Response(303, "", TEXT, {"Location": "/", "Set-Cookie": f"{COOKIE}={session}; {COOKIE_FLAGS}"})

    def has_session(self, headers: Mapping[str, str]) -> bool:
        """The request carries a cookie this console handed out (compared in constant time)."""
        given = _cookie(headers.get("cookie", ""), COOKIE)
        if given is None:
            return False
        with self._lock:
            sessions = list(self.sessions)
        found = False
        for session in sessions:  # every one compared: the time says nothing about which matched
            found |= hmac.compare_digest(given.encode(), session.encode())
        return found

    # -- entry -------------------------------------------------------------------------------

    def handle(self, method: str, target: str, headers: Mapping[str, str], body: bytes = b"") -> Response:
        """One request; ``headers`` with lower-case names."""
        url = urlsplit(target)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        host = headers.get("host", "")
        if f"http://{host}" not in self.origins():
            return Response(421, "unknown Host", "text/plain; charset=utf-8")
        if url.path == "/login" and method in ("GET", "HEAD"):
            return self.log_in(query)
        if not self.has_session(headers):  # every route, GET included: no page without the cookie
            return Response(401, LOG_IN, TEXT)
        try:
            if url.path in scenario.PATHS:
                return self.scenario(method, url.path, query, body, headers)
            if method in ("GET", "HEAD"):
                return self.get(url.path, query)
            if method != "POST":
                return Response(405, "method not allowed", TEXT, {"Allow": "GET, POST"})
            fields = {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}
            refusal = self.refuses(headers, fields)
            if refusal:
                return Response(403, refusal, "text/plain; charset=utf-8")
            return self.post(url.path, fields)
        except SluiceError as exc:
            return self.html(400 if _status(exc) < 500 else 502, "Error",
                             f'<p class="error">{render.esc(exc)}</p>')

    def refuses(self, headers: Mapping[str, str], fields: Mapping[str, str]) -> str | None:
        site = headers.get("sec-fetch-site")
        if site is not None and site != "same-origin":
            return f"cross-site request refused (Sec-Fetch-Site: {site})"
        origin = headers.get("origin")
        if origin is not None and origin not in self.origins():
            return "cross-origin request refused (Origin)"
        if not hmac.compare_digest(fields.get("csrf", "").encode(), self.token.encode()):
            return "missing or wrong console token: reload the page"
        return None

    def html(self, status: int, title: str, body: str) -> Response:
        return Response(status, render.page(title, body, token=self.token, where=self.where))

    # -- GET ---------------------------------------------------------------------------------

    def queues(self) -> tuple[list[QueueStats], dict[str, str]]:
        """The shown queues' stats, by name, and what failed: with no ``--queue``, every queue
        ``GET /v1/admin/queues`` lists (one call), and each queue added in the page that it
        does not list (``GET /v1/admin/queues/{queue}``)."""
        found: dict[str, QueueStats] = {}
        errors: dict[str, str] = {}
        if self.watched.every:
            try:
                for row in self.backend.queue_rows():
                    stats = QueueStats.model_validate(row)
                    found[stats.queue] = stats
            except (SluiceError, ValueError) as exc:  # ValueError: an answer that is not a queue row
                errors["every queue (GET /v1/admin/queues)"] = str(exc)
        for name in self.watched.all():
            if name in found:
                continue
            try:
                found[name] = QueueStats.model_validate(self.backend.queue_row(name))
            except (SluiceError, ValueError) as exc:
                errors[name] = str(exc)
        return [found[name] for name in sorted(found)], errors

    def all_schedules(self) -> list[dict[str, Any]] | None:
        """The shown queues' schedules (names are per queue); None if the gateway serves none."""
        shown, _ = self.queues()
        found = [self.backend.schedules(stats.queue) for stats in shown]
        if found and all(f is None for f in found):
            return None
        return [s for f in found for s in f or []]

    def get(self, path: str, query: Mapping[str, str]) -> Response:
        if path == "/":
            return self.html(200, "Queues", render.queues_page(self.queues_fragment(), self.token,
                                                                query.get("msg")))
        if path == "/fragment/queues":
            return Response(200, self.queues_fragment())
        if path == "/jobs":
            return self.job(query.get("id", "").strip())
        if path == "/jobs/timeline":
            return self.timeline(validate_job_id(query.get("id", "").strip()))
        if path == "/fragment/job":
            view = self.backend.status(validate_job_id(query.get("id", "")))
            return Response(200, render.job_fragment(view))
        if path == "/schedules":
            return self.html(200, "Schedules", render.schedules_page(self.all_schedules(), None, self.token,
                                                                     query.get("msg")))
        if path.startswith("/static/") and path[8:] in STATIC:
            text = resources.files("sluice_dev.cli.console").joinpath("static", path[8:]).read_text("utf-8")
            return Response(200, text, STATIC[path[8:]])
        found = pages.get(self.backend, path, query, time.time())  # jobs list, flow tree, depth (issue 32)
        if found is not None:
            status, title, body = found
            return Response(status, body) if title is None else self.html(status, title, body)
        match = _DLQ.match(path)
        if match:
            queue = validate_queue_name(match.group(1))
            return self.html(200, f"Dead jobs of {queue}",
                             render.dlq_page(queue, self.backend.dead_letters(queue), self.token,
                                             query.get("msg")))
        return Response(404, "not found", "text/plain; charset=utf-8")

    def queues_fragment(self) -> str:
        shown, errors = self.queues()
        rows = []
        for stats in shown:
            self.history.record(stats)
            rows.append(render.queue_row(stats, self.history.rates(stats.queue), self.token))
        return render.queues_table(rows, errors)

    def job(self, job_id: str) -> Response:
        if not job_id:
            return self.html(200, "Jobs", render.job_page("", None, None))
        try:
            fragment = render.job_fragment(self.backend.status(validate_job_id(job_id)))
        except SluiceError as exc:
            return self.html(404 if _status(exc) == 404 else 400, "Jobs",
                             render.job_page(job_id, None, str(exc)))
        return self.html(200, f"Job {job_id}", render.job_page(job_id, fragment, None))

    def timeline(self, job_id: str) -> Response:
        """The job's attempts as lanes (issue 32 item 2): its queue from the job's view, its steps from
        the operator route ``GET /v1/admin/queues/{queue}/jobs/{job_id}/timeline``."""
        view = self.backend.status(job_id)
        steps = self.backend.timeline(view.queue, job_id)
        return self.html(200, f"Timeline of {job_id}", render_timeline.page(view, steps))

    def scenario(self, method: str, path: str, query: Mapping[str, str], body: bytes,
                 headers: Mapping[str, str]) -> Response:
        """The scenario page (issue 32 item 3, ``scenario``): its runs are the session's own."""
        session, runs = _cookie(headers.get("cookie", ""), COOKIE) or "", self.scenarios
        if path == "/fragment/scenario" and method in ("GET", "HEAD"):
            return Response(200, scenario.fragment(None if runs is None else runs.of(session)))
        if path == "/scenario" and method in ("GET", "HEAD"):
            body_html = scenario.page(runs, self.token, session, query.get("msg"))
            return self.html(200, "Scenario: gc-pause", body_html)
        if path != "/scenario/gc-pause" or method != "POST":
            return Response(404, "not found", TEXT)
        fields = {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}
        refusal = self.refuses(headers, fields)
        if refusal:
            return Response(403, refusal, TEXT)
        if runs is None:
            return self.html(400, "Scenario", f'<p class="error">{render.esc(scenario.LOCAL_ONLY)}</p>')
        freeze = scenario.freeze_of(fields.get("freeze_for", ""))
        if not runs.start(session, freeze, fields.get("fencing") == "on"):
            return see_other("/scenario?msg=" + quote("a run is going: one at a time"))
        return see_other("/scenario?msg=started")

    # -- POST --------------------------------------------------------------------------------

    def post(self, path: str, fields: Mapping[str, str]) -> Response:
        if path == "/watch":
            queue = validate_queue_name(fields.get("queue", "").strip())
            self.watched.add(queue)
            return see_other(f"/?msg={quote(f'watching {queue}')}")
        scheduled = _SCHEDULE_POST.match(path)
        if scheduled:
            queue, name = validate_queue_name(scheduled.group(1)), check_name(scheduled.group(2))
            return self.schedule_action(queue, name, scheduled.group(3), fields)
        match = _QUEUE_POST.match(path)
        if not match:
            return Response(404, "not found", "text/plain; charset=utf-8")
        queue, verb = validate_queue_name(match.group(1)), match.group(2)
        if verb == "pause":
            self.backend.pause(queue)
            return see_other(f"/?msg={quote(f'{queue} paused')}")
        if verb == "resume":
            self.backend.resume(queue)
            return see_other(f"/?msg={quote(f'{queue} resumed')}")
        if verb == "rate":
            per_second, burst = _number(fields, "per_second", float), _number(fields, "burst", int)
            self.backend.set_rate(queue, per_second or 0.0, None if burst is None else int(burst))
            return see_other(f"/?msg={quote(f'{queue} rate set')}")
        return self.dlq_action(queue, verb, fields)

    def dlq_action(self, queue: str, verb: str, fields: Mapping[str, str]) -> Response:
        back = render.qpath(queue, "/dlq")
        job_id = fields.get("job_id") or None
        if verb == "dlq/purge":
            question, kept = f"Purge every dead job of {queue}? They cannot be redriven afterwards.", {}
        elif job_id is not None:
            question, kept = f"Redrive dead job {job_id} of {queue}?", {"job_id": validate_job_id(job_id)}
        elif fields.get("all"):
            question, kept = f"Redrive every dead job of {queue}?", {"all": "1"}
        else:
            return self.html(400, "Error", '<p class="error">say which job to redrive, or all</p>')
        if fields.get("confirmed") != "1":
            body = render.confirm_page(question, render.qpath(queue, "/" + verb), kept, self.token, back)
            return self.html(200, "Confirm", body)
        if verb == "dlq/purge":
            message = f"purged {self.backend.purge_dead(queue)} dead jobs"
        else:
            done = self.backend.redrive(queue, job_id)
            refused = "; ".join(f"{k}: {v}" for k, v in (done.get("refused") or {}).items())
            message = f"redrove {done.get('moved', 0)}" + (f"; refused {refused}" if refused else "")
        return see_other(f"{back}?msg={quote(message)}")


    def schedule_action(self, queue: str, name: str, verb: str, fields: Mapping[str, str]) -> Response:
        if verb == "pause":
            self.backend.pause_schedule(queue, name)
            message = f"schedule {name} of {queue} paused"
        elif verb == "resume":
            self.backend.resume_schedule(queue, name)
            message = f"schedule {name} of {queue} resumed"
        elif fields.get("confirmed") != "1":
            question = f"Delete schedule {name} of {queue}? It fires no more; the jobs it enqueued stay."
            return self.html(200, "Confirm", render.confirm_page(
                question, render.spath(queue, name, "delete"), {}, self.token, "/schedules"))
        else:
            self.backend.delete_schedule(queue, name)
            message = f"schedule {name} of {queue} deleted"
        return see_other(f"/schedules?msg={quote(message)}")


def _cookie(header: str, name: str) -> str | None:
    """The value of cookie ``name`` in a Cookie header; None if it is absent (or there twice)."""
    values = [value for key, _, value in (part.strip().partition("=") for part in header.split(";"))
              if key == name]
    return values[0] if len(values) == 1 else None


def _status(exc: SluiceError) -> int:
    """The HTTP status the API answered with, else the error's kind (bad input 400, unknown 404,
    anything else, e.g. an unreachable API, 503)."""
    status = exc.details.get("status") or getattr(exc, "status", None)
    if isinstance(status, int):
        return status
    return 404 if isinstance(exc, LookupError) else 400 if isinstance(exc, ValueError) else 503


def see_other(location: str) -> Response:
    return Response(303, "", "text/plain; charset=utf-8", {"Location": location})


def _number(fields: Mapping[str, str], name: str, kind: type[Any]) -> Any:
    raw = fields.get(name, "").strip()
    if not raw:
        return None
    try:
        value = kind(raw)
    except ValueError as exc:
        from sluice.core.errors import InvalidInput

        raise InvalidInput(f"{name} must be a number, not {raw!r}") from exc
    return value


def serve(console: Console, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """Bind (port 0 picks a free one; ``console.port`` is then set) and return the server, not yet serving."""

    class Handler(QuietHandler):
        server_version = "sluice-console"

        def _run(self, method: str) -> None:
            length = min(int(self.headers.get("Content-Length") or 0), MAX_FORM)
            body = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            response = console.handle(method, self.path, headers, body)
            self.answer(response.status, response.body.encode("utf-8"),
                        [*{**HEADERS, **response.headers}.items(), ("Content-Type", response.content_type)])

        def do_GET(self) -> None:
            self._run("GET")

        def do_HEAD(self) -> None:
            self._run("HEAD")

        def do_POST(self) -> None:
            self._run("POST")

    server = ThreadingHTTPServer((host, console.port), Handler)
    console.port = server.server_address[1]
    return server
