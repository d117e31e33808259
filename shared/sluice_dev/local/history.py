"""A JSONL history of what workers did: grants, result writes (accepted or refused), acks.

On the local stack (``sluice dev``, ``sluice demo``, ``sluice chaos``) every worker
process appends one line per event to the file named by ``Settings.history_path``.
The recording is a subscriber of the worker's event bus (``sluice.core.bus``):
``record(bus, path)`` writes a line per port call the worker reports, as the call
returned or raised (each retry too). This is the one recorder: local worker Lambda
containers subscribe it (``sluice_dev.local.container``), and so do the chaos run's
worker processes; the chaos run adds its own ops to the same file
(``sluice_dev.chaos.history``: enqueues, handler invocations, faults, relay pushes).

Each line: ``{"op", "job", "queue", "token", "outcome", "t0", "t1", "pid", ...}``, with
``t0``/``t1`` the wall-clock start and end of the call. Ops:

- ``grant``: a fencing token was minted for an invocation (``token``);
- ``write``: a result write with ``token``; outcome ``written``, ``already_written``,
  ``rejected`` (stale token; ``current`` is the newer one), ``cancelled`` or ``error``;
  ``digest`` identifies the result;
- ``fenced``: a handler's ``FencedTable`` write, same outcomes;
- ``http``: a handler's call through ``ctx.http`` (``method``, ``host``, ``status``): outcome ``ok``
  (any answer but a fence's refusal), ``rejected`` (a service's fence refused the token: ``current``
  is the newer one) or ``error`` (no answer);
- ``failure``: a failure record (``status`` queued|failed|dead|cancelled), same outcomes;
- ``ack`` / ``fail`` / ``release``: the Redis side, outcome ``ok`` (``fail`` also gives
  ``retry``/``dead``), ``lost`` or ``error``; ``lease`` is the Redis lease token;
- ``extend``: only failures are recorded (outcome ``lost``), a heartbeat finding its lease gone;
- ``lease``: a job leased from Redis (``lease`` token, ``attempt``), no outcome;
- ``start``: the handler was called (``token``, ``attempt``; ``t1`` the moment);
- ``push`` (relay): ``push.lua`` moved records ``first``..``last`` of a ``partition`` into a
  ``queue`` under ``owner``, with the ``jobs`` pushed (``outcome`` ok), or failed (``error``).

``analyse`` turns a history into per-job facts and the counts the demo and the
chaos checker report. A write is a *stale write accepted* when it was accepted and
it started after a newer token for the same job had been granted: DynamoDB must
have seen that newer token, so fencing failed.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sluice.core import bus as ev
from sluice.core.errors import SluiceError
from sluice.core.models import dump_json

# The history's clock, bound at import: a chaos run may skew a relay process's wall clock
# (``sluice_dev.chaos.skew`` replaces ``time.time``), and the lines that process writes must stay
# on the machine's. (The recorders below run in worker processes, which are never skewed.)
wall = time.time


def digest(value: Any) -> str:
    try:
        text = dump_json(value)
    except SluiceError:
        text = repr(value)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


class History:
    """Appends JSON lines; one ``write`` per line on an O_APPEND file, so processes can share it."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()
        self.pid = os.getpid()

    def emit(self, op: str, **fields: Any) -> None:
        fields.setdefault("t1", wall())
        line = json.dumps({"op": op, "pid": self.pid, **fields}, separators=(",", ":"), default=str)
        data = (line + "\n").encode("utf-8")
        with self._lock:
            os.write(self._fd, data)

    def close(self) -> None:
        with self._lock:
            os.close(self._fd)


outcome_of = ev.outcome_of  # how a history line names a refused call (shared with sluice_dev.chaos)


def _call(e: ev.CallEnded) -> dict[str, Any]:
    line: dict[str, Any] = {"outcome": e.outcome, "t0": e.t0, "t1": e.at}
    if e.error:
        line["error"] = e.error
    current = getattr(e, "current", None)
    if current is not None:
        line["current"] = current
    return line


def _redis(e: ev.LeaseCall) -> dict[str, Any]:
    return {"job": e.job, "queue": e.queue, "lease": e.lease, **_call(e)}


def push_fields(e: ev.Pushed) -> dict[str, Any]:
    """A relay push's history line (the chaos checker reads these fields too)."""
    common = {"t0": e.t0, "t1": e.at, "partition": e.partition, "owner": e.owner, "outcome": e.outcome,
              "first": e.first, "last": e.last}
    if e.outcome == "ok":
        return {**common, "queue": e.queue, "pushed": e.pushed, "skipped": e.skipped, "jobs": list(e.jobs)}
    return {**common, "error": e.error}


def line_of(e: ev.Event) -> tuple[str, dict[str, Any]] | None:
    """The history line (op and fields) of a worker event, None for events the history skips."""
    if isinstance(e, ev.Leased):
        return "lease", {"job": e.job, "queue": e.queue, "lease": e.lease, "attempt": e.attempt, "t1": e.at}
    if isinstance(e, ev.HandlerStarted):
        return "start", {"job": e.job, "queue": e.queue, "token": e.token, "attempt": e.attempt, "t1": e.at}
    if isinstance(e, ev.Pushed):
        return "push", push_fields(e)
    if isinstance(e, ev.Granted):
        token = {"token": e.token} if e.token is not None else {}
        return "grant", {"job": e.job, "queue": e.queue, "owner": e.owner, **token, **_call(e)}
    if isinstance(e, ev.ResultWritten | ev.ResultRefused):
        return "write", {"job": e.job, "token": e.token, "digest": digest(e.result), **_call(e)}
    if isinstance(e, ev.FencedWrite):
        return "fenced", {"job": e.job, "token": e.token, "table": e.table, "kind": e.kind, **_call(e)}
    if isinstance(e, ev.FencedCall):
        return "http", {"job": e.job, "token": e.token, "method": e.method, "host": e.host,
                        "status": e.status, **_call(e)}
    if isinstance(e, ev.FailureRecorded):
        return "failure", {"job": e.job, "token": e.token, "status": e.status, **_call(e)}
    if isinstance(e, ev.GrantReleased):
        return "store_release", {"job": e.job, "token": e.token, **_call(e)}
    if isinstance(e, ev.Renewed):
        return ("extend", _redis(e)) if e.outcome != "ok" else None  # only a lease found gone
    if isinstance(e, ev.Acked | ev.FailReported | ev.Released):
        op = {ev.Acked: "ack", ev.FailReported: "fail", ev.Released: "release"}[type(e)]
        return op, _redis(e)
    return None


class Recorder:
    """An event-bus subscriber appending one history line per worker event (``line_of``)."""

    def __init__(self, history: History) -> None:
        self.history = history

    def __call__(self, event: ev.Event) -> None:
        line = line_of(event)
        if line is not None:
            self.history.emit(line[0], **line[1])


_open: dict[str, History] = {}
_open_lock = threading.Lock()


def open_history(path: str | os.PathLike[str]) -> History:
    """This process's one ``History`` for ``path``, shared by every recorder and probe in it."""
    key = str(path)
    with _open_lock:
        history = _open.get(key)
        if history is None:
            history = _open[key] = History(key)
    return history



def record(bus: ev.EventBus, path: str | os.PathLike[str]) -> Recorder:
    """Subscribe a recorder of ``path`` (one open file per process and path) to ``bus``."""
    recorder = Recorder(open_history(path))
    bus.subscribe(recorder)
    return recorder


# -- reading and analysis ---------------------------------------------------------------------------


def read(path: str | os.PathLike[str], offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """Complete lines from ``offset`` on, and the offset after the last complete line."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n") + 1
    events = []
    for raw in data[:end].splitlines():
        try:
            event = json.loads(raw)
        except ValueError:
            continue  # a line torn by a SIGKILL mid-write
        if isinstance(event, dict):
            events.append(event)
    return events, offset + end


@dataclass
class JobFacts:
    grants: list[tuple[int, float, float]] = field(default_factory=list)  # (token, t0, t1)
    writes: list[dict[str, Any]] = field(default_factory=list)  # accepted result writes
    rejected_writes: int = 0
    retries: int = 0
    dead: bool = False
    acked: bool = False
    lost: set[tuple[int, int]] = field(default_factory=set)  # (pid, fencing token) attempts lost

    @property
    def succeeded(self) -> bool:
        return bool(self.writes)


@dataclass
class HistoryReport:
    jobs: dict[str, JobFacts] = field(default_factory=dict)
    invocations: int = 0
    fenced_writes_rejected: int = 0  # result writes and FencedTable writes refused for a stale token
    fenced_calls_rejected: int = 0  # ctx.http calls a service's fence refused for a stale token
    stale_writes_accepted: int = 0
    leases_lost: int = 0
    retries: int = 0

    @property
    def succeeded(self) -> set[str]:
        return {j for j, f in self.jobs.items() if f.succeeded}

    @property
    def dead(self) -> set[str]:
        return {j for j, f in self.jobs.items() if f.dead and not f.succeeded}

    def first_success_at(self, job_id: str) -> float | None:
        facts = self.jobs.get(job_id)
        return min(w["t1"] for w in facts.writes) if facts and facts.writes else None


class Analyser:
    """Incremental: ``feed`` new lines as they arrive, read ``report`` at any time.

    A lost lease is counted once per attempt, an attempt being (worker process, job,
    fencing token): its heartbeat, ack or fail finding the Redis lease gone and its
    result write being refused are one loss, not three.
    """

    def __init__(self) -> None:
        self.report = HistoryReport()
        self._accepted_fenced: list[dict[str, Any]] = []
        self._current: dict[tuple[int, str], int] = {}  # (pid, job) -> token of its latest grant

    def facts(self, job_id: str) -> JobFacts:
        f = self.report.jobs.get(job_id)
        if f is None:
            f = self.report.jobs[job_id] = JobFacts()
        return f

    def feed(self, events: Iterable[dict[str, Any]]) -> None:  # noqa: C901 - one branch per op
        r = self.report
        for e in events:
            op, job, outcome = e.get("op"), str(e.get("job", "")), e.get("outcome")
            if not job:
                continue
            f = self.facts(job)
            pid = int(e.get("pid", 0))
            if op == "grant" and outcome == "ok":
                r.invocations += 1
                f.grants.append((int(e["token"]), float(e["t0"]), float(e["t1"])))
                self._current[(pid, job)] = int(e["token"])
            elif op == "write":
                if outcome in ("written", "already_written"):
                    f.writes.append(e)
                elif outcome == "rejected":
                    f.rejected_writes += 1
                    r.fenced_writes_rejected += 1
                    self._lose(f, pid, int(e.get("token", 0)))
            elif op == "fenced":
                if outcome == "written":
                    self._accepted_fenced.append(e)
                elif outcome == "rejected":
                    r.fenced_writes_rejected += 1
                    self._lose(f, pid, int(e.get("token", 0)))
            elif op == "http" and outcome == "rejected":
                r.fenced_calls_rejected += 1
                self._lose(f, pid, int(e.get("token", 0)))
            elif op == "failure" and outcome == "ok" and e.get("status") == "queued":
                f.retries += 1
                r.retries += 1
            elif (op == "fail" and outcome == "dead") or (op == "failure" and outcome == "ok"
                                                          and e.get("status") == "dead"):
                f.dead = True
            elif op == "ack" and outcome == "ok":
                f.acked = True
            if outcome in ("lost", "rejected") and op in ("extend", "ack", "fail", "release"):
                self._lose(f, pid, self._current.get((pid, job), -int(e.get("lease", 0))))

    def _lose(self, f: JobFacts, pid: int, token: int) -> None:
        key = (pid, token)
        if key not in f.lost:
            f.lost.add(key)
            self.report.leases_lost += 1

    def finish(self) -> HistoryReport:
        """Count stale writes accepted (needs every grant, so call it once the history is complete)."""
        r = self.report
        stale = 0
        for f in r.jobs.values():
            for w in f.writes:
                if _granted_newer_before(f.grants, int(w["token"]), float(w["t0"])):
                    stale += 1
        for e in self._accepted_fenced:
            facts = r.jobs.get(str(e["job"]))
            if facts and _granted_newer_before(facts.grants, int(e["token"]), float(e["t0"])):
                stale += 1
        r.stale_writes_accepted = stale
        return r


def _granted_newer_before(grants: Sequence[tuple[int, float, float]], token: int, started: float) -> bool:
    return any(g_token > token and g_t1 < started for g_token, _t0, g_t1 in grants)


def analyse(path: str | os.PathLike[str]) -> HistoryReport:
    events, _ = read(path)
    a = Analyser()
    a.feed(events)
    return a.finish()


def follow(path: str | os.PathLike[str]) -> Iterator[list[dict[str, Any]]]:
    """Yields the lines appended since the last ``next`` (empty when nothing new)."""
    offset = 0
    while True:
        events, offset = read(path, offset)
        yield events
