"""The console's HTML, rendered on the server: pure functions from data to text.

Everything that comes from the API (queue names, job ids, errors, results, payloads, schedule
definitions) is user data, so every value goes through ``esc`` (``html.escape`` with quotes);
nothing is put into a ``<script>``. Forms that change anything carry the per-process CSRF token
(``server.Console``). The page loads one script and one stylesheet from ``/static/`` and the
server's Content-Security-Policy forbids inline scripts, so an escaping bug would still not run.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any
from urllib.parse import quote

from sluice.cli.ops import age  # the CLI tables' age column, same wording
from sluice.models import DeadJob
from sluice.wire import JobView, QueueView

FINAL = frozenset({"succeeded", "failed", "dead", "cancelled"})


def esc(value: object) -> str:
    return escape("" if value is None else str(value), quote=True)


def when(ms: int | None) -> str:
    return "-" if ms is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) + " UTC"


def page(title: str, body: str, *, token: str, where: str) -> str:
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{esc(title)} - sluice console</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="/static/console.css"><script src="/static/console.js" defer></script>
</head><body>
<nav><strong>sluice console</strong> <a href="/">Queues</a> <a href="/jobs">Jobs</a>
<a href="/schedules">Schedules</a> <span class="where">{esc(where)}</span></nav>
<main><h1>{esc(title)}</h1>
{body}
</main></body></html>
"""


def flash(message: str | None) -> str:
    return f'<p class="flash" id="flash">{esc(message)}</p>' if message else ""


def form(action: str, token: str, fields: Mapping[str, object], button: str, *, cls: str = "") -> str:
    hidden = "".join(f'<input type="hidden" name="{esc(k)}" value="{esc(v)}">' for k, v in fields.items())
    return (f'<form method="post" action="{esc(action)}" class="inline {esc(cls)}">'
            f'<input type="hidden" name="csrf" value="{esc(token)}">{hidden}'
            f'<button type="submit">{esc(button)}</button></form>')


def qpath(queue: str, rest: str = "") -> str:
    return f"/queues/{quote(queue, safe='')}{rest}"


def sparkline(values: Sequence[float], width: int = 120, height: int = 24) -> str:
    """An inline SVG polyline of ``values`` (oldest first), scaled to the largest."""
    if len(values) < 2:
        return (f'<svg class="spark" width="{width}" height="{height}" role="img" '
                'aria-label="no data yet"></svg>')
    top = max(values) or 1.0
    step = width / (len(values) - 1)
    points = " ".join(f"{i * step:.1f},{height - 1 - (v / top) * (height - 2):.1f}"
                      for i, v in enumerate(values))
    return (f'<svg class="spark" width="{width}" height="{height}" role="img" '
            f'aria-label="drain rate, max {top:.2f}/s"><polyline fill="none" stroke="currentColor" '
            f'points="{points}"/></svg>')


def queue_row(view: QueueView, drain: float | None, spark: Sequence[float], token: str) -> str:
    q = view.queue
    state = "paused" if view.paused else "running"
    toggle = form(qpath(q, "/resume" if view.paused else "/pause"), token, {},
                  "Resume" if view.paused else "Pause", cls="toggle")
    rate_form = (f'<form method="post" action="{esc(qpath(q, "/rate"))}" class="inline rate">'
                 f'<input type="hidden" name="csrf" value="{esc(token)}">'
                 f'<input name="per_second" size="5" value="{view.rate_per_s:g}" '
                 f'aria-label="rate per second">'
                 f'<input name="burst" size="4" value="{view.burst}" aria-label="burst">'
                 f'<button type="submit">Set rate</button></form>')
    limit = "unlimited" if view.rate_per_s <= 0 else f"{view.rate_per_s:g}/s burst {view.burst}"
    return (f'<tr data-queue="{esc(q)}"><td class="name">{esc(q)}</td>'
            f'<td class="ready">{view.ready}</td><td class="delayed">{view.delayed}</td>'
            f'<td class="leased">{view.leased}</td>'
            f'<td class="dead"><a href="{esc(qpath(q, "/dlq"))}">{view.dead}</a></td>'
            f'<td class="oldest">{age(view.oldest_ready_age_ms)}</td>'
            f'<td class="drain">{"-" if drain is None else f"{drain:.2f}/s"}</td>'
            f'<td>{sparkline(spark)}</td><td class="state {state}">{state}</td>'
            f'<td class="limit">{esc(limit)}</td><td>{toggle} {rate_form}</td></tr>')


QUEUE_HEAD = ("<tr><th>queue</th><th>ready</th><th>delayed</th><th>leased</th><th>dead</th>"
              "<th>oldest ready</th><th>drain</th><th>drain, last polls</th><th>state</th><th>rate limit</th>"
              "<th>controls</th></tr>")


def queues_table(rows: Iterable[str], errors: Mapping[str, str]) -> str:
    body = "".join(rows)
    errs = "".join(f'<li>{esc(q)}: {esc(e)}</li>' for q, e in errors.items())
    if not body and not errs:
        return '<p class="empty">No queues yet: add one below, or enqueue a job.</p>'
    return (f'<table class="queues">{QUEUE_HEAD}{body}</table>'
            + (f'<ul class="errors">{errs}</ul>' if errs else ""))


def queues_page(table: str, token: str, message: str | None) -> str:
    watch = (f'<form method="post" action="/watch" class="inline"><input type="hidden" name="csrf" '
             f'value="{esc(token)}"><input name="queue" placeholder="queue name" aria-label="queue name">'
             f'<button type="submit">Watch queue</button></form>')
    return (f'{flash(message)}<div id="queues" data-refresh="/fragment/queues">{table}</div>'
            f'<p class="hint">Refreshes every 2 s. Drain: how fast the backlog (ready + delayed + leased) '
            f'fell between two polls; jobs that arrive meanwhile hide some of it.</p>{watch}')


def _ids(ids: Sequence[str]) -> str:
    if not ids:
        return "-"
    return ", ".join(f'<a href="/jobs?id={esc(quote(i, safe=""))}">{esc(i)}</a>' for i in ids)


def _json(value: Any) -> str:
    return esc(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str))


def job_fragment(view: JobView) -> str:
    progress = "-" if view.progress is None else f"{view.progress * 100:.0f}%"
    if view.progress_detail:
        progress += f" ({esc(view.progress_detail)}, {esc(when(view.progress_at_ms))})"
    rows = [
        ("job id", esc(view.job_id)), ("queue", esc(view.queue)),
        ("state", f'<span class="status {esc(view.status)}" id="job-status">{esc(view.status)}</span>'),
        ("attempts", str(view.attempts)),
        ("fencing token", "not on the API's job view; the jobs table keeps only the latest "
                          "(each grant adds 1), no history of them"),
        ("progress", progress),
        ("created", esc(when(view.created_at_ms))), ("updated", esc(when(view.updated_at_ms))),
        ("finished", esc(when(view.finished_at_ms))),
        ("cancel requested", "yes" if view.cancel_requested else "no"),
        ("last error", f"<pre>{esc(view.last_error)}</pre>" if view.last_error else "-"),
        ("result", f"<pre>{_json(view.result)}</pre>" if view.result is not None
         else esc(view.result_ref) if view.result_ref else "-"),
        ("parent", _ids([view.parent_id] if view.parent_id else [])),
        ("children", _ids(view.children)), ("continuations", _ids(view.continuations)),
        ("continuation", _ids([view.continuation] if view.continuation else [])),
    ]
    if view.waits_for:
        rows.append(("waits for", _ids(view.waits_for) + f" ({view.remaining} not ended)"))
    body = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
    return f'<table class="job" data-final="{"yes" if view.status in FINAL else "no"}">{body}</table>'


def job_page(job_id: str, fragment: str | None, error: str | None) -> str:
    lookup = (f'<form method="get" action="/jobs"><input name="id" size="60" value="{esc(job_id)}" '
              f'aria-label="job id" placeholder="job id"><button type="submit">Look up</button></form>')
    if error:
        return f'{lookup}<p class="error" id="job-error">{esc(error)}</p>'
    if fragment is None:
        return lookup
    src = "/fragment/job?id=" + esc(quote(job_id, safe=""))
    return f'{lookup}<div id="job" data-refresh="{src}" data-until-final="yes">{fragment}</div>'


def dlq_page(queue: str, jobs: Sequence[DeadJob], token: str, message: str | None) -> str:
    rows = "".join(
        f'<tr data-job="{esc(j.job_id)}"><td><a href="/jobs?id={esc(quote(j.job_id, safe=""))}">'
        f'{esc(j.job_id)}</a></td><td>{j.attempts}</td><td><pre>{esc(j.last_error)}</pre></td>'
        f'<td>{esc(when(j.died_at_ms))}</td><td>'
        f'{form(qpath(queue, "/dlq/redrive"), token, {"job_id": j.job_id}, "Redrive", cls="redrive")}'
        f'</td></tr>'
        for j in jobs)
    table = (f'<table class="dlq"><tr><th>job</th><th>attempts</th><th>last error</th><th>died</th><th></th>'
             f'</tr>{rows}</table>' if jobs else '<p class="empty" id="dlq-empty">No dead jobs.</p>')
    actions = "" if not jobs else (form(qpath(queue, "/dlq/redrive"), token, {"all": "1"}, "Redrive all")
                                   + " " + form(qpath(queue, "/dlq/purge"), token, {}, "Purge", cls="danger"))
    return f"{flash(message)}{table}<p>{actions}</p>"


def confirm_page(question: str, action: str, fields: Mapping[str, object], token: str, back: str) -> str:
    return (f'<p class="confirm" id="confirm-question">{esc(question)}</p>'
            f'{form(action, token, {**fields, "confirmed": "1"}, "Yes, do it", cls="confirm")} '
            f'<a href="{esc(back)}" id="confirm-cancel">Cancel</a>')


def schedules_page(schedules: Sequence[Mapping[str, Any]] | None, error: str | None) -> str:
    if error:
        return f'<p class="error">{esc(error)}</p>'
    if schedules is None:
        return ('<p class="empty" id="no-schedules">This gateway serves no schedules (it has no schedules '
                'table). Read-only here; manage them with POST /v1/admin/queues/{queue}/schedules.</p>')
    if not schedules:
        return '<p class="empty">No schedules.</p>'
    rows = "".join(
        f'<tr><td>{esc(s.get("name"))}</td><td><code>{esc(s.get("expression"))}</code></td>'
        f'<td>{esc(s.get("queue"))}</td><td>{"paused" if s.get("paused") else "active"}</td>'
        f'<td>{esc(when(s.get("next_firing_ms")))}</td><td><pre>{_json(s.get("payload"))}</pre></td></tr>'
        for s in schedules)
    return ('<table class="schedules"><tr><th>name</th><th>expression</th><th>queue</th><th>state</th>'
            f'<th>next firing</th><th>payload</th></tr>{rows}</table><p class="hint">Read-only.</p>')
