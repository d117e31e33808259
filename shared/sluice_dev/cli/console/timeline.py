"""A job's timeline drawn (issue 32 items 2 and 3): pure, steps in (``sluice.core.timeline``, as the
operator API returns them), SVG and a table out.

One lane per lease (one worker invocation: its Redis lease token), labelled with the worker its
grant names and its fencing token, and a lane for storage (the jobs table), where each write
lands, accepted or refused by its fence. A lease's bar runs to its last known deadline; where the
next lease began after that deadline and this one never acked, the lease was lost there and the
next one is a takeover. An accepted write whose token is older than one granted before it is the
bug fencing exists to refuse: it is drawn as such. Every value from the API goes through ``esc``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any
from urllib.parse import quote

from sluice.core.timeline import KINDS
from sluice.core.wire import JobView
from sluice_dev.cli.console.render import esc

WIDTH, LEFT, LANE_H, TOP = 960, 170, 46, 26
# The marks the story turns on get a word beside them; every mark has its full text as a tooltip.
LABELS = {"takeover": "takeover", "expired": "lease lost", "write-refused": "refused",
          "stale-accepted": "stale write accepted", "write-accepted": "accepted", "lost": "lost",
          "reaped": "reaped"}
WENT = {"ready": "the job goes back to ready", "dead": "its attempts are used up: the job is dead",
        "cancelled": "a cancel was requested: the job is removed", "gone": "the job was already gone"}


@dataclass
class Mark:
    at_ms: int
    kind: str  # lease, renew, takeover, lost, expired, write-accepted, write-refused, stale-accepted, ...
    text: str


@dataclass
class Lane:
    lease: int | None  # None: the storage lane
    label: str = ""
    start_ms: int | None = None
    until_ms: int | None = None  # the last deadline the lease was given (or its end, if earlier)
    ended_ms: int | None = None  # when it acked or finished (first)
    token: int | None = None
    marks: list[Mark] = field(default_factory=list)


def lanes(steps: Sequence[Mapping[str, Any]]) -> list[Lane]:
    """The lanes of ``steps`` (oldest first), leases in the order they began, storage last."""
    by_lease: dict[int, Lane] = {}
    storage = Lane(None, "storage (jobs table)")
    granted: list[tuple[int, int]] = []  # (when, fencing token) of every grant so far
    for s in sorted(steps, key=lambda s: (_int(s.get("at_ms")), _order(s))):
        at, kind, lease = _int(s.get("at_ms")), str(s.get("kind")), _int(s.get("lease"))
        lane = by_lease.setdefault(lease, Lane(lease))
        if kind == "lease":
            lane.start_ms, lane.until_ms = at, _int(s.get("deadline_ms")) or None
            lane.marks.append(Mark(at, "lease", f"leases (lease {lease}, attempt {s.get('attempt')})"))
        elif kind == "grant":
            lane.token = _int(s.get("token")) or None
            lane.label = f"{s.get('worker') or '?'}"
            granted.append((at, lane.token or 0))
            refused = f" refused: {s.get('outcome')}" if s.get("outcome") else ""
            lane.marks.append(Mark(at, "grant", f"granted fencing token {s.get('token')}{refused}"))
        elif kind == "renew":
            lane.until_ms = _int(s.get("deadline_ms")) or lane.until_ms
            lane.marks.append(Mark(at, "renew", "renews its lease"))
        elif kind == "lost":
            lane.marks.append(Mark(at, "lost", f"learns its lease is gone ({s.get('outcome')})"))
        elif kind == "write":
            _write(lane, storage, at, s, granted)
        elif kind == "ack":
            ok = s.get("outcome") == "ok"
            if ok and lane.ended_ms is None:
                lane.ended_ms = at
            text = "acks: the job leaves the queue" if ok else f"ack refused ({s.get('outcome')})"
            lane.marks.append(Mark(at, "ack" if ok else "ack-refused", text))
        elif kind == "finish":
            lane.ended_ms = at if lane.ended_ms is None else lane.ended_ms
            lane.marks.append(Mark(at, "finish", f"finishes: {s.get('outcome')}"))
        elif kind == "reap":  # the relay, not a worker: on the lane of the lease that lapsed
            went = WENT.get(str(s.get("outcome")), f"the job: {s.get('outcome')}")
            lane.marks.append(Mark(at, "reaped", f"the relay takes back lapsed lease {lease} (attempt "
                                                 f"{s.get('attempt')}): {went}"))
    ordered = sorted(by_lease.values(), key=lambda ln: (ln.start_ms or 0, ln.lease or 0))
    for lane in ordered:
        lane.label = lane.label or "(not granted)"  # a lease lost before its grant: no worker ran the job
    _takeovers([lane for lane in ordered if lane.token])
    return [*ordered, storage]


def _write(lane: Lane, storage: Lane, at: int, s: Mapping[str, Any], granted: list[tuple[int, int]]) -> None:
    token, outcome = _int(s.get("token")), str(s.get("outcome"))
    newest = max((tok for when, tok in granted if when <= at), default=0)
    who = lane.label or f"lease {lane.lease}"
    if outcome in ("written", "already_written"):
        if newest > token:
            text = (f"ACCEPTS {who}'s write with token {token} although token {newest} was granted: "
                    f"the stale write overwrites the newer result (fencing is off)")
            kind = "stale-accepted"
        else:
            text, kind = f"accepts {who}'s write (token {token})", "write-accepted"
    elif outcome == "rejected":
        text = f"refuses {who}'s write: token {token} is stale, the current one is {s.get('current')}"
        kind = "write-refused"
    else:
        text, kind = f"{who}'s write failed ({outcome})", "write-error"
    verdict = {"write-accepted": "accepted", "stale-accepted": "ACCEPTED although stale",
               "write-refused": "refused by the fence"}.get(kind, "failed")
    lane.marks.append(Mark(at, kind, f"writes its result with token {token}: {verdict}"))
    storage.marks.append(Mark(at, kind, text))


def _takeovers(ordered: Sequence[Lane]) -> None:
    """Of the granted leases (``ordered``): one that began after an earlier one's deadline, the
    earlier one not ended: the earlier lease was lost at its deadline, the later one took over."""
    for before, after in pairwise(ordered):
        if before.until_ms is None or after.start_ms is None:
            continue
        if before.ended_ms is not None and before.ended_ms <= after.start_ms:
            continue
        if after.start_ms >= before.until_ms:
            before.marks.append(Mark(before.until_ms, "expired", "its lease expires: no renewal came"))
        after.marks.append(Mark(after.start_ms, "takeover",
                                f"takes over from {before.label or f'lease {before.lease}'}"))


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _order(step: Mapping[str, Any]) -> int:
    return KINDS.index(step["kind"]) if step.get("kind") in KINDS else len(KINDS)


# -- drawing ---------------------------------------------------------------------------------------


def svg(drawn: Sequence[Lane], title: str = "") -> str:
    """The lanes as an inline SVG (no script, no external reference: the console's CSP allows it)."""
    times = [t for ln in drawn for t in (ln.start_ms, ln.until_ms, *(m.at_ms for m in ln.marks)) if t]
    if not times:
        return ('<p class="empty" id="timeline-empty">No timeline recorded for this job (yet, or any '
                'more).</p>')
    t0, t1 = min(times), max(times)
    span = max(t1 - t0, 1)
    scale = (WIDTH - LEFT - 110) / span  # room on the right for the last marks' words

    def x(t: int) -> float:
        return LEFT + (t - t0) * scale

    height = TOP + LANE_H * len(drawn) + 10
    parts = [f'<svg class="timeline" id="timeline" width="{WIDTH}" height="{height}" role="img" '
             f'viewBox="0 0 {WIDTH} {height}" aria-label="{esc(title or "job timeline")}">'
             f'<title>{esc(title or "job timeline")}</title>']
    for sec in range(0, span // 1000 + 1, max(1, span // 1000 // 10 or 1)):
        gx = x(t0 + sec * 1000)
        parts.append(f'<line class="tick" x1="{gx:.1f}" y1="{TOP - 6}" x2="{gx:.1f}" y2="{height - 8}"/>'
                     f'<text class="tick" x="{gx:.1f}" y="{TOP - 10}">{sec} s</text>')
    for i, lane in enumerate(drawn):
        y = TOP + i * LANE_H + LANE_H / 2
        name = "storage" if lane.lease is None else f"{lane.label or '?'}"
        sub = "" if lane.lease is None else f"token {lane.token or '-'}, lease ..{str(lane.lease)[-6:]}"
        lease = "storage" if lane.lease is None else lane.lease
        parts.append(f'<g class="lane" data-lease="{esc(lease)}">'
                     f'<text class="lane-name" x="4" y="{y - 3:.1f}">{esc(name[:24])}</text>'
                     f'<text class="lane-sub" x="4" y="{y + 11:.1f}">{esc(sub)}</text>')
        if lane.start_ms is not None:
            end = lane.until_ms or lane.start_ms
            ends = [m.at_ms for m in lane.marks if m.kind in ("ack", "finish")]
            if ends:
                end = min(end, max(ends)) if lane.until_ms else max(ends)
            parts.append(f'<rect class="lease-bar" x="{x(lane.start_ms):.1f}" y="{y - 7:.1f}" '
                         f'width="{max(x(end) - x(lane.start_ms), 2):.1f}" height="14"/>')
        last = {-9: -1e9, 18: -1e9}  # the x of the last word above the marks and below them
        for m in sorted(lane.marks, key=lambda m: m.at_ms):
            tip = f"{(m.at_ms - t0) / 1000:.2f} s: {m.text}"
            parts.append(f'<circle class="mark {esc(m.kind)}" data-kind="{esc(m.kind)}" '
                         f'cx="{x(m.at_ms):.1f}" cy="{y:.1f}" r="6"><title>{esc(tip)}</title></circle>')
            # a word too close to the lane's previous one goes below the mark, or is left to the tooltip
            dy = next((d for d in (-9, 18) if x(m.at_ms) - last[d] >= 70), None)
            if m.kind in LABELS and dy is not None:
                last[dy] = x(m.at_ms)
                parts.append(f'<text class="mark-label {esc(m.kind)}" x="{x(m.at_ms) + 8:.1f}" '
                             f'y="{y + dy:.1f}">{esc(LABELS[m.kind])}</text>')
        parts.append("</g>")
    parts.append("</svg>")
    return "".join(parts)


def table(drawn: Sequence[Lane]) -> str:
    """Every mark, in time order, as text: what the drawing shows, readable without it."""
    marks = sorted(((m, ln) for ln in drawn for m in ln.marks), key=lambda p: p[0].at_ms)
    if not marks:
        return ""
    t0 = marks[0][0].at_ms
    rows = "".join(
        f'<tr class="{esc(m.kind)}" data-kind="{esc(m.kind)}"><td>{(m.at_ms - t0) / 1000:.2f} s</td>'
        f'<td>{esc("storage" if ln.lease is None else ln.label or f"lease {ln.lease}")}</td>'
        f'<td>{esc(m.text)}</td></tr>' for m, ln in marks)
    head = "<tr><th>when</th><th>who</th><th>what</th></tr>"
    return f'<table class="steps" id="timeline-steps">{head}{rows}</table>'


def drawing(steps: Sequence[Mapping[str, Any]], title: str = "") -> str:
    drawn = lanes(steps)
    return svg(drawn, title) + table(drawn)


def page(view: JobView, steps: Sequence[Mapping[str, Any]]) -> str:
    """The console's timeline page of one job."""
    job = esc(quote(view.job_id, safe=""))
    status = f'<span class="status {esc(view.status)}">{esc(view.status)}</span>'
    return (f'<p><a href="/jobs?id={job}" id="timeline-job">{esc(view.job_id)}</a> of {esc(view.queue)}: '
            f'{status}, {view.attempts} attempts</p>'
            '<p class="hint">One lane per lease (one worker invocation), as its worker recorded it: the '
            'lease and its fencing token, the renewals, a lost lease, a takeover, the write (accepted or '
            'refused by its fence) and the ack; and the relay reaping a lease that lapsed. Kept 10 minutes '
            'after the last step (SLUICE_TIMELINE_TTL_S).</p>'
            + drawing(steps, f"timeline of {view.job_id}"))
