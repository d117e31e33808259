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

from sluice.core.models import DeadJob, QueueStats
from sluice.core.wire import JobView
from sluice_dev.cli.console.backend import Rates
from sluice_dev.cli.ops import age, in_redis, parked  # the CLI tables' columns, same wording

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
<a href="/schedules">Schedules</a> <a href="/scenario">Scenario</a>
<span class="where">{esc(where)}</span></nav>
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


def _points(values: Sequence[float], top: float, width: int, height: int) -> str:
    step = width / (len(values) - 1)
    return " ".join(f"{i * step:.1f},{height - 1 - (v / top) * (height - 2):.1f}"
                    for i, v in enumerate(values))


def sparkline(rates: Sequence[Rates], width: int = 120, height: int = 24) -> str:
    """Inline SVG, oldest first: jobs finished per second in each poll interval (one line) and,
    when any died, the dead ones (a second line, class ``dead``), on one scale."""
    if len(rates) < 2:
        return (f'<svg class="spark" width="{width}" height="{height}" role="img" '
                'aria-label="no data yet"></svg>')
    finished, dead = [r.finished for r in rates], [r.dead for r in rates]
    top = max(finished) or 1.0
    lines = (f'<polyline class="finished" fill="none" stroke="currentColor" '
             f'points="{_points(finished, top, width, height)}"/>')
    if any(dead):
        lines += (f'<polyline class="dead" fill="none" stroke="#c0392b" '
                  f'points="{_points(dead, top, width, height)}"/>')
    label = f"jobs finished per second, last {len(rates)} poll intervals, max {max(finished):.2f}/s"
    return (f'<svg class="spark" width="{width}" height="{height}" role="img" aria-label="{esc(label)}">'
            f'<title>{esc(label)}</title>{lines}</svg>')


def _finished_cell(stats: QueueStats, last: Rates | None) -> str:
    done = stats.finished
    title = (f"since the counters began: {done.succeeded} succeeded, {done.dead} failed or dead, "
             f"{done.cancelled} cancelled")
    shown = "-" if last is None else f"{last.finished:.2f}/s"
    return f'<td class="finished" title="{esc(title)}">{shown}</td>'


def queue_row(stats: QueueStats, rates: Sequence[Rates], token: str) -> str:
    q, cfg = stats.queue, stats.config
    state = "paused" if cfg.paused else "running"
    toggle = form(qpath(q, "/resume" if cfg.paused else "/pause"), token, {},
                  "Resume" if cfg.paused else "Pause", cls="toggle")
    rate_form = (f'<form method="post" action="{esc(qpath(q, "/rate"))}" class="inline rate">'
                 f'<input type="hidden" name="csrf" value="{esc(token)}">'
                 f'<input name="per_second" size="5" value="{cfg.rate_per_s:g}" '
                 f'aria-label="rate per second">'
                 f'<input name="burst" size="4" value="{cfg.burst}" aria-label="burst">'
                 f'<button type="submit">Set rate</button></form>')
    limit = "unlimited" if cfg.rate_per_s <= 0 else f"{cfg.rate_per_s:g}/s burst {cfg.burst}"
    return (f'<tr data-queue="{esc(q)}"><td class="name">{esc(q)}</td>'
            f'<td class="ready">{stats.ready}</td><td class="delayed">{stats.delayed}</td>'
            f'<td class="leased">{stats.leased}</td>'
            f'<td class="dead"><a href="{esc(qpath(q, "/dlq"))}">{stats.dead}</a></td>'
            f'<td class="oldest">{age(stats.oldest_ready_age_ms)}</td>'
            f'<td class="bytes">{esc(in_redis(stats))}</td><td class="parked">{esc(parked(stats))}</td>'
            f'{_finished_cell(stats, rates[-1] if rates else None)}'
            f'<td>{sparkline(rates)}</td><td class="state {state}">{state}</td>'
            f'<td class="limit">{esc(limit)}</td><td>{toggle} {rate_form} '
            f'<a class="jobs-link" href="{esc(qpath(q, "/jobs"))}">jobs</a> '
            f'<a class="depth-link" href="{esc(qpath(q, "/depth"))}">depth</a></td></tr>')


QUEUE_HEAD = ("<tr><th>queue</th><th>ready</th><th>delayed</th><th>leased</th><th>dead</th>"
              "<th>oldest ready</th><th>in redis / budget</th><th>parked</th><th>finished</th>"
              "<th>finished/s, last polls</th><th>state</th>"
              "<th>rate limit</th><th>controls</th></tr>")


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
            f'<p class="hint">Refreshes every 2 s. Finished: jobs that succeeded, failed or died per '
            f'second between two polls (the queue\'s own counts, from the operator API); the red line: '
            f'those that failed or died. Hover the rate for the totals.</p>{watch}')


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
        ("fencing token", "not on the API's job view: each attempt's is on the job's timeline"),
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
    if view.parent_id or view.children or view.continuations or view.continuation:
        rows.append(("flow", f'<a id="flow-link" href="/flows?id={esc(quote(view.job_id, safe=""))}">'
                             "the flow as a tree</a>"))
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
    link = "/jobs/timeline?id=" + esc(quote(job_id, safe=""))
    timeline = f'<p><a id="job-timeline" href="{link}">Timeline of its attempts</a></p>'
    return f'{lookup}{timeline}<div id="job" data-refresh="{src}" data-until-final="yes">{fragment}</div>'


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


def spath(queue: object, name: object, verb: str) -> str:
    return f"/schedules/{quote(str(queue), safe='')}/{quote(str(name), safe='')}/{verb}"


def schedule_row(s: Mapping[str, Any], token: str) -> str:
    queue, name, paused = s.get("queue"), s.get("name"), bool(s.get("paused"))
    toggle = form(spath(queue, name, "resume" if paused else "pause"), token, {},
                  "Resume" if paused else "Pause", cls="toggle")
    delete = form(spath(queue, name, "delete"), token, {}, "Delete", cls="danger delete")
    return (f'<tr data-schedule="{esc(queue)}/{esc(name)}"><td>{esc(name)}</td>'
            f'<td><code>{esc(s.get("expression"))}</code></td><td>{esc(queue)}</td>'
            f'<td class="state">{"paused" if paused else "active"}</td>'
            f'<td>{esc(when(s.get("next_firing_ms")))}</td><td><pre>{_json(s.get("payload"))}</pre></td>'
            f'<td>{toggle} {delete}</td></tr>')


def schedules_page(schedules: Sequence[Mapping[str, Any]] | None, error: str | None, token: str = "",
                   message: str | None = None) -> str:
    if error:
        return f'{flash(message)}<p class="error">{esc(error)}</p>'
    if schedules is None:
        return (f'{flash(message)}<p class="empty" id="no-schedules">This gateway serves no schedules (it '
                'has no schedules table). Create them with POST /v1/admin/queues/{queue}/schedules.</p>')
    if not schedules:
        return f'{flash(message)}<p class="empty">No schedules.</p>'
    rows = "".join(schedule_row(s, token) for s in schedules)
    return (f'{flash(message)}<table class="schedules"><tr><th>name</th><th>expression</th><th>queue</th>'
            f'<th>state</th><th>next firing</th><th>payload</th><th>controls</th></tr>{rows}</table>'
            '<p class="hint">Pause stops the firings until resumed (missed ones are not sent); delete asks '
            'first, and keeps the jobs it enqueued. Create schedules with POST '
            '/v1/admin/queues/{queue}/schedules.</p>')
