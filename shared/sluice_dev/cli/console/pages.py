"""The console's pages of issue 32: a queue's jobs listed and filtered, a flow as a tree, and a
queue's depth over the last hour (items 1, 4 and 5; docs/console.md).

Like the rest of the console, everything comes through the public and operator APIs (``Backend``:
``list_jobs`` is ``GET /v1/admin/queues/{queue}/jobs``, ``status`` is ``GET /v1/jobs/{id}``,
``depth_history`` is ``GET /v1/admin/queues/{queue}/depth``: the relay's samples in Redis),
every value goes through ``render.esc``, and the pages carry no inline script (the refresh is
``static/console.js``'s ``data-refresh``). ``get`` answers this module's paths for
``server.Console``: (status, title, HTML), a bare fragment when the title is None, or None for a
path that is not one of them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import quote, urlencode

from sluice.core.depth import SAMPLE_EVERY_S, DepthHistory, DepthSample
from sluice.core.errors import SluiceError
from sluice.core.listing import (
    DEFAULT_PAGE,
    STATES,
    JobPage,
    check_prefix,
    check_state,
    parse_cursor,
    parse_lot_cursor,
)
from sluice.core.models import QueueStats, validate_job_id, validate_queue_name
from sluice.core.wire import JobView
from sluice_dev.cli.console.render import esc, qpath, when

_JOBS = re.compile(r"^/queues/([^/]+)/jobs$")
_DEPTH = re.compile(r"^/queues/([^/]+)/depth$")
_DEPTH_FRAGMENT = re.compile(r"^/fragment/queues/([^/]+)/depth$")
HOUR_S = 3600.0
FLOW_NODES = 200  # jobs one flow page reads at most (GET /v1/jobs/{id} each)
FLOW_UP = 20  # parents followed up to the root at most
LAYERS = (("ready", "#2a62c9"), ("delayed", "#8e6bbf"), ("leased", "#e0a526"), ("dead", "#b3261e"))
Page = tuple[int, str | None, str]


class Reader(Protocol):
    """What these pages read: ``sluice.Client`` fits it."""

    def status(self, job_id: str) -> JobView: ...
    def list_jobs(self, queue: str, state: str = "ready", *, limit: int = DEFAULT_PAGE,
                  cursor: str | None = None, prefix: str | None = None) -> JobPage: ...
    def queue_row(self, queue: str) -> dict[str, Any]: ...
    def depth_history(self, queue: str) -> DepthHistory: ...


# -- depth over the last hour --------------------------------------------------------------------


def stacked_chart(samples: Sequence[DepthSample], now_s: float, width: int = 640, height: int = 180) -> str:
    """Inline SVG: ready, delayed, leased and dead stacked over the last hour (x: from the hour's
    start, or the first sample if later, to now)."""
    if len(samples) < 2:
        return (f'<svg class="depth" width="{width}" height="{height}" role="img" '
                'aria-label="no samples yet"><text x="8" y="20">no samples yet</text></svg>')
    top = max(max(d.ready + d.delayed + d.leased + d.dead for d in samples), 1)
    # The hour, or the part of it the relay has sampled: the span drawn.
    start = max(now_s - HOUR_S, samples[0].at_ms / 1000)
    span = max(now_s - start, 1.0)

    def x(at_ms: int) -> float:
        return max(0.0, (at_ms / 1000 - start) / span * width)

    def y(v: float) -> float:
        return height - 1 - v / top * (height - 2)

    polys, below = [], [0] * len(samples)
    for name, colour in LAYERS:
        above = [b + getattr(d, name) for b, d in zip(below, samples, strict=True)]
        upper = [f"{x(d.at_ms):.1f},{y(v):.1f}" for d, v in zip(samples, above, strict=True)]
        lower = [f"{x(d.at_ms):.1f},{y(v):.1f}"
                 for d, v in zip(reversed(samples), reversed(below), strict=True)]
        last = getattr(samples[-1], name)
        polys.append(f'<polygon class="layer {name}" fill="{colour}" fill-opacity="0.75" '
                     f'points="{" ".join(upper + lower)}"><title>{name}: {last} at the last sample</title>'
                     '</polygon>')
        below = above
    label = f"ready, delayed, leased and dead jobs stacked over the last hour; most {top}"
    return (f'<svg class="depth" width="{width}" height="{height}" role="img" aria-label="{esc(label)}">'
            f'<title>{esc(label)}</title>{"".join(polys)}'
            f'<text x="2" y="12" class="axis">{top}</text></svg>'
            f'<div class="axis-x"><span>-{_ago(span)}</span><span class="now">now</span></div>')


def _ago(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def _ms(value: int | None) -> str:
    if value is None:
        return "-"
    return f"{value} ms" if value < 10_000 else f"{value / 1000:.1f} s"


def depth_fragment(reader: Reader, queue: str, now_s: float) -> str:
    """The chart and the waits from ``GET /v1/admin/queues/{queue}/depth`` (the relay's samples, the
    same for every console), and the counts now from the queue's row."""
    stats = QueueStats.model_validate(reader.queue_row(queue))
    hour = reader.depth_history(queue)
    legend = "".join(f'<li class="legend-{name}">{name} <strong class="count-{name}">{getattr(stats, name)}'
                     f'</strong></li>' for name, _ in LAYERS)
    last = next((s for s in reversed(hour.samples) if s.started), None)
    recent = ("-", "-") if last is None else (_ms(last.wait_p50_ms), _ms(last.wait_p99_ms))
    return (f'<div class="depth-chart">{stacked_chart(hour.samples, now_s)}</div>'
            f'<ul class="legend">{legend}</ul>'
            f'<table class="waits"><tr><th>enqueue to start</th><th>jobs started</th><th>p50</th><th>p99</th>'
            f'</tr><tr><td>the last hour</td><td id="wait-started">{hour.started}</td>'
            f'<td id="wait-p50">{_ms(hour.wait_p50_ms)}</td>'
            f'<td id="wait-p99">{_ms(hour.wait_p99_ms)}</td></tr>'
            f'<tr><td>the last sample with starts</td><td>{"-" if last is None else last.started}</td>'
            f'<td>{recent[0]}</td><td>{recent[1]}</td></tr>'
            f'<tr><td>oldest ready job, waiting so far</td><td></td><td colspan="2">'
            f'{_ms(stats.oldest_ready_age_ms)}</td></tr></table>')


def depth_page(queue: str, fragment: str) -> str:
    src = f"/fragment/queues/{quote(queue, safe='')}/depth"
    return (f'<p><a href="{esc(qpath(queue, "/jobs"))}">jobs of {esc(queue)}</a></p>'
            f'<div id="depth" data-refresh="{esc(src)}">{fragment}</div>'
            '<p class="hint">Stacked: ready (bottom), delayed, leased, dead, as the relay sampled them '
            f'(every {SAMPLE_EVERY_S:g} s) over the last hour, kept in Redis (GET /v1/admin/queues/{{queue}}/'
            'depth): every console shows the same hour, against a deployment too. Wait: from a job\'s '
            'enqueue to its first lease, counted by the lease itself (within 9 %; a delayed job\'s '
            'includes its delay; retries are not counted).</p>')


# -- jobs listed and filtered -----------------------------------------------------------------------


def _unread(field: str, unread: list[str]) -> str:
    """A field the operator function left unread (``sluice.core.read_bounds``): said, not shown blank."""
    return "[not read: larger than Sluice writes, or past the page budget]" if field in unread else ""


def _json(value: Any) -> str:
    return esc(json.dumps(value, sort_keys=True, ensure_ascii=False, default=str))


def job_link(job_id: str) -> str:
    return f'<a href="/jobs?id={esc(quote(job_id, safe=""))}">{esc(job_id)}</a>'


def jobs_page(queue: str, state: str, prefix: str | None, page: JobPage) -> str:
    options = "".join(f'<option value="{s}"{" selected" if s == state else ""}>{s}</option>' for s in STATES)
    filters = (f'<form method="get" action="{esc(qpath(queue, "/jobs"))}" id="job-filter">'
               f'<select name="state" aria-label="state">{options}</select> '
               f'<input name="prefix" value="{esc(prefix or "")}" placeholder="id prefix" '
               'aria-label="id prefix">'
               f' <button type="submit">Filter</button></form>')
    rows = "".join(
        f'<tr data-job="{esc(j.job_id)}"><td class="id">{job_link(j.job_id)}</td>'
        f'<td class="status {esc(j.state)}">{esc(j.state)}{esc(f" ({j.parked})" if j.parked else "")}</td>'
        f'<td>{esc(when(j.at_ms if j.at_ms is not None else j.enqueued_at_ms))}</td>'
        f'<td>{esc("-" if j.priority is None else j.priority)}</td>'
        f'<td>{esc("-" if j.attempts is None else j.attempts)}</td><td>{esc(j.group or "-")}</td>'
        f'<td><pre>{_unread("payload", j.unread) or ("-" if j.payload is None else _json(j.payload))}'
        '</pre></td>'
        f'<td><pre>{_unread("last_error", j.unread) or esc(j.last_error or "")}</pre></td></tr>'
        for j in page.jobs)
    head = ("<tr><th>job</th><th>state</th><th>when</th><th>priority</th><th>attempts</th><th>group</th>"
            "<th>payload</th><th>last error</th></tr>")
    table = (f'<table class="jobs" id="jobs">{head}{rows}</table>' if page.jobs
             else f'<p class="empty" id="jobs-empty">No {esc(state)} jobs'
                  f'{" starting " + esc(prefix) if prefix else ""}.</p>')
    more = ""
    if page.next:
        query = urlencode({"state": state, **({"prefix": prefix} if prefix else {}), "cursor": page.next})
        more = f'<p><a id="next-page" href="{esc(qpath(queue, "/jobs") + "?" + query)}">Older &rarr;</a></p>'
    return (f'{filters}<p><a href="{esc(qpath(queue, "/depth"))}">depth over the last hour</a> · '
            f'<a href="{esc(qpath(queue, "/dlq"))}">dead-letter queue</a></p>{table}{more}'
            '<p class="hint">Newest first: delayed by when they run, leased by lease deadline, dead by when '
            'they died, finished (the last 1,000 acked) by when they finished; ready in the reverse of the '
            'order workers take them, a fair group\'s ready jobs among them. Parked: the relay\'s parking '
            'lot (jobs delayed beyond its horizon, and a held queue\'s records), held ones first, by '
            'partition, newest first, then the delayed ones, latest run time first; not in Redis, so '
            'never under delayed. Fields the queue marks sensitive show [redacted].</p>')


# -- flows as trees --------------------------------------------------------------------------------


@dataclass
class Flow:
    """The jobs of one flow read so far, by id, within ``FLOW_NODES`` reads."""

    reader: Reader
    views: dict[str, JobView | None] = field(default_factory=dict)

    def view(self, job_id: str) -> JobView | None:
        if job_id not in self.views:
            if len(self.views) >= FLOW_NODES:
                return None
            try:
                self.views[job_id] = self.reader.status(validate_job_id(job_id))
            except SluiceError:
                self.views[job_id] = None
        return self.views[job_id]

    def root(self, job_id: str) -> str:
        current, seen = job_id, {job_id}
        for _ in range(FLOW_UP):
            view = self.view(current)
            parent = None if view is None else view.parent_id
            if parent is None or parent in seen:
                break
            current = parent
            seen.add(current)
        return current

    def node(self, job_id: str, focus: str, drawn: set[str]) -> str:
        if job_id in drawn:  # a loop or a job reached twice: drawn once
            return f'<li class="again">{job_link(job_id)} (above)</li>'
        drawn.add(job_id)
        view = self.view(job_id)
        state = "unknown" if view is None else str(view.status)
        mark = ' class="focus"' if job_id == focus else ""
        label = (f'<a href="/jobs?id={esc(quote(job_id, safe=""))}" class="node status {esc(state)}" '
                 f'data-job="{esc(job_id)}">{esc(job_id)}</a> '
                 f'<span class="state {esc(state)}">{esc(state)}</span>')
        if view is None:
            return f"<li{mark}>{label} (not read)</li>"
        parts = []
        if view.children:
            parts.append('<li class="branch">children<ul>'
                         + "".join(self.node(c, focus, drawn) for c in view.children) + "</ul></li>")
        if view.continuations:
            parts.append('<li class="branch then">then<ul>'
                         + "".join(self.node(c, focus, drawn) for c in view.continuations) + "</ul></li>")
        return f"<li{mark}>{label}" + (f"<ul>{''.join(parts)}</ul>" if parts else "") + "</li>"


def flow_page(reader: Reader, job_id: str) -> str:
    flow = Flow(reader)
    root = flow.root(job_id)
    tree = flow.node(root, job_id, set())
    capped = (f'<p class="hint">Only the first {FLOW_NODES} jobs were read.</p>'
              if len(flow.views) >= FLOW_NODES else "")
    return (f'<ul class="flow" id="flow">{tree}</ul>{capped}'
            '<p class="hint">A parent, its children and its continuation ("then"), coloured by state; '
            'each links to its job page.</p>')


# -- routes ----------------------------------------------------------------------------------------


def get(reader: Reader, path: str, query: Mapping[str, str], now_s: float) -> Page | None:
    """This module's GET routes; None when ``path`` is none of them. SluiceErrors (bad input, the
    API's refusals) go up to ``Console.handle``, which shows them as an error page."""
    if path == "/flows":
        job_id = validate_job_id(query.get("id", "").strip())
        return 200, f"Flow of {job_id}", flow_page(reader, job_id)
    if match := _JOBS.match(path):
        queue = validate_queue_name(match.group(1))
        state = check_state(query.get("state") or "ready")
        prefix = check_prefix(query.get("prefix", "").strip())
        cursor = query.get("cursor") or None
        parse_lot_cursor(cursor) if state == "parked" else parse_cursor(cursor)
        page = reader.list_jobs(queue, state, limit=DEFAULT_PAGE, cursor=cursor, prefix=prefix)
        return 200, f"Jobs of {queue}", jobs_page(queue, state, prefix, page)
    if match := _DEPTH.match(path):
        queue = validate_queue_name(match.group(1))
        return 200, f"Depth of {queue}", depth_page(queue, depth_fragment(reader, queue, now_s))
    if match := _DEPTH_FRAGMENT.match(path):
        queue = validate_queue_name(match.group(1))
        return 200, None, depth_fragment(reader, queue, now_s)
    return None
