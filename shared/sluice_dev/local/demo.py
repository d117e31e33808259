"""``sluice demo``: a private local stack, a mixed workload over HTTP, live progress, a verdict.

1. Start a stack (``local.dev``) under its own state directory, tuned for a short run:
   3 s leases (so the ``slow`` jobs outlive theirs), 4 worker containers of 6 threads,
   a worker safety net every 2 s.
2. Enqueue the plan (``local.workload``) over HTTP while showing live counts: enqueued,
   in Kafka, in Redis, leased, succeeded, retrying, dead.
3. Freeze one worker with SIGSTOP while it holds a ``ledger`` job that works without
   looking at its lease, until another worker has been granted that job and has called
   the ledger's service (``local.service``, a service running the fence middleware), then
   let it run on: its late call to the service (``ctx.http``) must be refused (409), and its
   ``FencedTable`` write too. So a healthy run shows the fencing at work, not only the happy
   path; a run where it does not happen (no takeover, no refused call or write) fails, with
   the reason, like a broken invariant.
4. When every accepted job is final, check the invariants (``local.verify``) against the
   jobs table and the workers' history, print the summary (and ``--json``: one JSON
   line last), and stop everything.

Every number is measured: the gateway's answers, Redis, the jobs table, the history.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import statistics
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from sluice_dev.local import history, verify, workload
from sluice_dev.local.dev import DevOptions, DevStack

DEMO_QUEUES = ("echo", "hash", "ledger", "notify", "flaky", "slow", "fanout", "square", "sum")
# The frozen ledger job works this long before its write: the freeze lands well inside it even
# when the history is read late on a loaded machine. A busy stack may take a while to start it,
# and to take it over (a lapsed lease goes to the front of its band: one lease call suffices).
FREEZE_JOB_SLEEP_S = 3.0
START_WAIT_S = 60.0
TAKEOVER_TRIES = 20
# After the takeover the new holder works FREEZE_JOB_SLEEP_S too before it calls the service: the
# frozen worker is let go only once that call is in (or this long after the takeover), so its own
# call comes late.
NEW_CALL_WAIT_S = FREEZE_JOB_SLEEP_S + 20.0
# The jobs carry their own 3 s lease (workload.DEMO_LEASE_S); the default lease here only sizes
# the workers' time budget. Retries back off from 300 ms so the retried jobs finish in the run.
DEMO_SETTINGS: dict[str, Any] = {"default_lease_seconds": workload.DEMO_LEASE_S, "worker_batch": 30,
                                 "worker_concurrency": 6, "retry_base_ms": 300}


@dataclass
class DemoOptions:
    jobs: int = 2000
    as_json: bool = False
    workers: int = 4
    seed: int = 1
    timeout_s: float = 300.0
    state_dir: Path = Path(".sluice-demo")
    keep: bool = False
    freeze: bool = True


@dataclass
class Board:
    """What the progress display shows, refreshed from Redis and the history."""

    path: str = ""
    analyser: history.Analyser = field(default_factory=history.Analyser)
    offset: int = 0
    ready: int = 0
    delayed: int = 0
    leased: int = 0
    frozen: str = ""
    # fanout parents that succeeded -> (children, continuations), as their items record them
    families: dict[str, tuple[list[str], list[str]]] = field(default_factory=dict)


class Freezer(threading.Thread):
    """SIGSTOPs the worker that holds ``job_id`` until another worker is granted it.

    The job is enqueued alone before the rest, so the frozen worker holds this one lease
    and the story stays the seed's: A stalls, its lease expires, B takes the job with a
    newer token and calls the ledger's service, A wakes up, calls the service and writes, and
    both the service's fence and storage refuse A. Once A's lease has expired, a drain of the
    job's queue is asked for ahead of the queued dispatches, as the scheduled safety net would
    do a little later.
    """

    def __init__(self, job: workload.PlannedJob, state: Board, stop: threading.Event, dev: DevStack) -> None:
        super().__init__(name="sluice-demo-freezer", daemon=True)
        self.job, self.state, self.stop_event, self.dev = job, state, stop, dev
        self.note = "not attempted"
        self.frozen = threading.Event()  # set once the worker is stopped (or the attempt gave up)
        self.pid = 0
        self.took_over = False

    def _grants(self) -> list[tuple[int, float, float]]:
        facts = self.state.analyser.report.jobs.get(self.job.job_id or "")
        return list(facts.grants) if facts else []

    def _wait(self, pred: Any, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self.stop_event.is_set() and time.monotonic() < deadline:
            if pred():
                return True
            time.sleep(0.05)
        return False

    def run(self) -> None:
        try:
            self._freeze()
        finally:
            self.frozen.set()

    def _freeze(self) -> None:
        if not self._wait(lambda: self.job.job_id and self._grants(), START_WAIT_S):
            self.note = "its job never started"
            return
        pid = next(int(e["pid"]) for e in self._events() if e.get("op") == "grant")
        time.sleep(0.3)  # inside the handler's work (FREEZE_JOB_SLEEP_S), before its write
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            self.note = "its worker had already exited"
            return
        self.pid = pid
        self.state.frozen = f"worker {pid} frozen (SIGSTOP)"
        self.frozen.set()
        try:
            if any(e.get("op") in ("write", "fenced") and int(e.get("pid", 0)) == pid
                   for e in self._events()):
                self.note = f"worker {pid} was frozen only after its write: too late to show fencing"
                return
            self._wait(lambda: False, float(workload.DEMO_LEASE_S))
            for _ in range(TAKEOVER_TRIES):
                # Its lease has lapsed: the next lease of the queue reclaims it to the front of its
                # band. Ask for a drain now, ahead of the queued dispatches, as the scheduled
                # safety net would a little later.
                if self.dev.lambdas is not None:
                    self.dev.lambdas.invoke("sluice-worker", {"queues": [self.job.queue], "batch": 1,
                                                              "source": "safety-net"}, first=True)
                if self._wait(lambda: len(self._grants()) > 1, 3):
                    self.took_over = True
                    break
            if self.took_over:  # A's call must come after B's, which B makes after its own work
                self._wait(lambda: any(e.get("op") == "http" and e.get("outcome") == "ok"
                                       and int(e.get("pid", 0)) != pid for e in self._events()),
                           NEW_CALL_WAIT_S)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
            self.state.frozen = ""
        self.note = (f"worker {pid} frozen past its lease; another worker took the job over"
                     if self.took_over else f"worker {pid} frozen, but nobody took the job over in time")

    def failure(self, report: history.HistoryReport) -> str | None:
        """Why this run did not show the fencing story, or None if it did (checked after the run)."""
        if not self.took_over:
            return f"the freeze did not show fencing: {self.note}"
        refused = [e for e in self._events() if e.get("op") in ("write", "fenced")
                   and e.get("outcome") == "rejected" and int(e.get("pid", 0)) == self.pid]
        if not refused:
            return (f"the freeze did not show fencing: worker {self.pid} was taken over, but no write "
                    f"of it was refused (fenced writes rejected {report.fenced_writes_rejected})")
        calls = [e for e in self._events() if e.get("op") == "http" and int(e.get("pid", 0)) == self.pid]
        if not any(e.get("outcome") == "rejected" for e in calls):
            return (f"the freeze did not show fencing for services: worker {self.pid} was taken over, but "
                    f"the service's fence did not refuse its late call ({[e.get('outcome') for e in calls]})")
        return None

    def _events(self) -> list[dict[str, Any]]:
        events, _ = history.read(self.state.path)
        return [e for e in events if e.get("job") == self.job.job_id]


def _progress(plan: workload.Plan, sent: workload.SendReport, st: Board, dev: DevStack,
              started: float) -> Any:
    r = st.analyser.report
    ours = {j.job_id for j in plan.jobs if j.job_id is not None}
    succeeded, dead = len(r.succeeded & ours), len(r.dead & ours)
    retrying = sum(1 for j, f in r.jobs.items() if j in ours and f.retries and not f.succeeded and not f.dead)
    in_kafka = max(0, sent.accepted - st.ready - st.delayed - st.leased - succeeded - dead)
    table = Table(title=f"sluice demo: {len(plan.jobs)} jobs", title_justify="left")
    for col in ("enqueued", "in Kafka", "in Redis", "leased", "succeeded", "retrying", "dead"):
        table.add_column(col, justify="right")
    table.add_row(str(sent.accepted), str(in_kafka), str(st.ready + st.delayed), str(st.leased),
                  f"[green]{succeeded}[/]", f"[yellow]{retrying}[/]", f"[red]{dead}[/]")
    done = succeeded + dead
    width = 40
    filled = int(width * done / max(1, len(plan.jobs)))
    busy = dev.lambdas.busy("sluice-worker") if dev.lambdas else 0
    elapsed = time.monotonic() - started
    lines = [Text(f"[{'#' * filled}{'.' * (width - filled)}] {done}/{len(plan.jobs)} done   "
                  f"{elapsed:5.1f}s   {done / max(elapsed, 0.001):.0f} jobs/s   workers busy: {busy}")]
    if st.frozen:
        lines.append(Text(st.frozen, style="bold magenta"))
    return Group(table, *lines)


@contextlib.contextmanager
def live_board(out: Console, first: Any, interactive: bool) -> Iterator[Live]:
    """The live progress board. Without a terminal rich leaves its last frame without a newline,
    so what is printed next would run on from it: end that line."""
    with Live(first, console=out, refresh_per_second=4, transient=False, auto_refresh=interactive) as live:
        yield live
    if not interactive:
        out.line()


def progress_line(elapsed: float, accepted: int, r: history.HistoryReport, jobs: Sequence[Any]) -> str:
    """The line printed every 5 s without a terminal: the plan's jobs as the table counts them (a
    job has its id once it is sent), and the jobs its fanouts started, never enqueued, apart."""
    ours = {j.job_id for j in jobs if j.job_id is not None}
    line = (f"  {elapsed:5.1f}s  enqueued {accepted}  succeeded {len(r.succeeded & ours)}  "
            f"dead {len(r.dead & ours)}")
    family = len((r.succeeded | r.dead) - ours)
    return line + (f"  family jobs ended {family}" if family else "")


def _poll(st: Board, dev: DevStack, path: str) -> None:
    events, st.offset = history.read(path, st.offset)
    st.analyser.feed(events)
    from sluice.entry import root as wiring

    assert dev.settings is not None
    engine = wiring.queue(dev.settings)
    ready = delayed = leased = 0
    for q in DEMO_QUEUES:
        s = engine.stats(q)
        ready, delayed, leased = ready + s.ready, delayed + s.delayed, leased + s.leased
    st.ready, st.delayed, st.leased = ready, delayed, leased


def _families(plan: workload.Plan, st: Board, dev: DevStack) -> None:
    """Learn the children and continuation of each fanout parent that has succeeded."""
    done = st.analyser.report.succeeded
    todo = [j.job_id for j in plan.jobs if j.queue == "fanout" and j.job_id in done
            and j.job_id not in st.families]
    if todo:
        assert dev.settings is not None
        st.families.update(verify.family_members(dev.settings, todo))


def _family_ids(st: Board) -> list[str]:
    return [j for kids, thens in st.families.values() for j in (*kids, *thens)]


def _finished(plan: workload.Plan, sent: workload.SendReport, st: Board, sender: threading.Thread) -> bool:
    if sender.is_alive():
        return False
    r = st.analyser.report
    final = r.succeeded | r.dead
    parents = [j.job_id for j in plan.jobs if j.queue == "fanout" and j.job_id is not None]
    return all(j.job_id in final for j in plan.jobs if j.job_id is not None) and \
        all(p in st.families for p in parents) and all(j in final for j in _family_ids(st))


def percentile(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(p) - 1]


def summarize(plan: workload.Plan, sent: workload.SendReport, report: history.HistoryReport,
              verdict: verify.Verdict) -> dict[str, Any]:
    latencies, last_final = [], sent.started
    for job in plan.jobs:
        facts = report.jobs.get(job.job_id or "")
        if facts is None:
            continue
        if facts.writes:
            done_at = min(float(w["t1"]) for w in facts.writes)
            if job.delay_s == 0:
                latencies.append((done_at - job.sent_at) * 1000)
            last_final = max(last_final, done_at)
    elapsed = max(0.001, last_final - sent.started)
    return {
        "accepted": sent.accepted,
        "succeeded": verdict.succeeded,
        "dead": verdict.dead,
        "duplicates_suppressed": sent.duplicates_suppressed,
        "retries": report.retries,
        "leases_lost": report.leases_lost,
        "fenced_writes_rejected": report.fenced_writes_rejected,
        "fenced_calls_rejected": report.fenced_calls_rejected,
        "stale_writes_accepted": report.stale_writes_accepted,
        "latency_ms": {p: round(percentile(latencies, q), 1)
                       for p, q in (("p50", 50), ("p95", 95), ("p99", 99))},
        "jobs_per_s": round((verdict.succeeded + verdict.dead) / elapsed, 1),
        "invocations": report.invocations,
        "not_final": len(verdict.not_final),
        "wrong_results": len(verdict.wrong_results),
        "conflicting_results": len(verdict.conflicting_writes),
        "elapsed_s": round(elapsed, 1),
    }


def _summary_table(s: dict[str, Any], ok: bool, notes: list[str]) -> Any:
    t = Table(title="sluice demo: summary", title_justify="left", show_header=False)
    t.add_column("what")
    t.add_column("value", justify="right")
    lat = s["latency_ms"]
    for name, value in (
        ("jobs accepted", s["accepted"]), ("succeeded", s["succeeded"]), ("dead-lettered", s["dead"]),
        ("duplicates suppressed at enqueue", s["duplicates_suppressed"]), ("retries", s["retries"]),
        ("leases lost", s["leases_lost"]), ("fenced writes rejected", s["fenced_writes_rejected"]),
        ("calls refused by a service's fence", s["fenced_calls_rejected"]),
        ("stale writes accepted", s["stale_writes_accepted"]),
        ("families: parents / children / continuations / sums right",
         " / ".join(str(s.get("families", {}).get(k, 0)) for k in ("parents", "children", "continuations",
                                                                   "sums_ok"))),
        ("end-to-end latency p50 / p95 / p99", f"{lat['p50']:.0f} / {lat['p95']:.0f} / {lat['p99']:.0f} ms"),
        ("throughput", f"{s['jobs_per_s']} jobs/s over {s['elapsed_s']} s"),
    ):
        t.add_row(name, str(value))
    verdict = Text("invariants hold: every accepted job ended succeeded or dead, each with exactly one "
                   "result, and no stale write was accepted", style="bold green") if ok else \
        Text("INVARIANTS VIOLATED", style="bold red")
    return Group(t, *[Text(n, style="dim") for n in notes], verdict)


def run_demo(o: DemoOptions) -> bool:
    console = Console()
    interactive = console.is_terminal
    out = Console(stderr=True) if o.as_json and not interactive else console
    dev = DevStack(DevOptions(state_dir=o.state_dir, workers=o.workers, warm_workers=o.workers,
                              relay_every_s=300, relay_timeout_s=600, safety_net_every_s=2,
                              log_level="WARNING", settings=dict(DEMO_SETTINGS),
                              team_workers=(workload.TEAM_WORKER,), team_containers=1))
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        return _run(o, dev, out, interactive)
    finally:
        dev.stop()
        signal.signal(signal.SIGTERM, previous)
        if not o.keep:
            shutil.rmtree(o.state_dir, ignore_errors=True)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _run(o: DemoOptions, dev: DevStack, out: Console, interactive: bool) -> bool:
    out.print(f"[bold]sluice demo[/]: starting a private stack in {o.state_dir}/ ...")
    endpoints = dev.start()
    out.print(f"gateway {endpoints['gateway_url']}, Redis {endpoints['redis_url']}, "
              f"Kafka {endpoints['kafka_bootstrap']}, DynamoDB {endpoints['dynamodb_endpoint']}")
    plan = workload.plan(o.jobs, o.seed, str(endpoints["sink_url"]))
    freeze_job = next((j for j in plan.jobs if j.queue == "ledger" and not j.duplicate), None)
    if o.freeze and freeze_job is not None:
        freeze_job.payload = {**freeze_job.payload, "sleep": FREEZE_JOB_SLEEP_S, "notice": True}
    sent = workload.SendReport()
    path = str(endpoints["history_path"])
    st = Board(path=path)
    stop = threading.Event()
    started = time.monotonic()
    gateway = str(endpoints["gateway_url"])
    sender = threading.Thread(target=workload.send, args=(plan, gateway, sent), name="sluice-demo-send",
                              daemon=True)
    freezer = Freezer(freeze_job, st, stop, dev) if o.freeze and freeze_job is not None else None
    if freezer is not None and freeze_job is not None:
        # Alone and first, so the frozen worker holds this lease only: see docs in Freezer.
        workload.send_one(freeze_job, gateway, sent)
        freezer.start()
        while not freezer.frozen.wait(0.1):
            _poll(st, dev, path)
    sender.start()
    deadline = started + o.timeout_s
    last_line = 0.0
    try:
        with live_board(out, _progress(plan, sent, st, dev, started), interactive) as live:
            while time.monotonic() < deadline:
                _poll(st, dev, path)
                _families(plan, st, dev)
                live.update(_progress(plan, sent, st, dev, started))
                if not interactive and time.monotonic() - last_line > 5:
                    last_line = time.monotonic()
                    r = st.analyser.report
                    out.print(progress_line(last_line - started, sent.accepted, r, plan.jobs))
                if _finished(plan, sent, st, sender):
                    break
                time.sleep(0.25)
    finally:
        stop.set()
    if freezer is not None:
        freezer.join(5)
    _settle(st, dev, path)
    report = st.analyser.finish()
    assert dev.settings is not None
    ids = [j.job_id for j in plan.jobs if j.job_id is not None]
    verdict = verify.check(plan.jobs, verify.fetch(dev.settings, ids), report)
    _families(plan, st, dev)
    family_items = verify.fetch(dev.settings, _family_ids(st), verify.FAMILY_FIELDS)
    families = verify.check_families(plan.jobs, st.families, family_items, report)
    summary = summarize(plan, sent, report, verdict)
    summary["families"] = {"parents": families.parents, "children": families.children,
                           "continuations": families.continuations, "sums_ok": families.sums_ok}
    failures = _failures(verdict, sent, freezer, report) + [f"family: {p}" for p in families.problems[:5]]
    if time.monotonic() >= deadline:
        failures.append(f"timed out after {o.timeout_s:.0f}s")
    ok = not failures
    notes = _notes(plan, sent, verdict, freezer, report, st.families)
    out.print(_summary_table(summary, ok, notes))
    for f in failures:
        out.print(f"[red]violation:[/] {f}")
    if o.as_json:
        sys.stdout.flush()
        print(json.dumps({**summary, "ok": ok}), flush=True)
    return ok


def _failures(verdict: verify.Verdict, sent: workload.SendReport, freezer: Freezer | None,
              report: history.HistoryReport) -> list[str]:
    failures = verdict.failures() + [e for e in sent.errors if "second job" in e]
    if freezer is not None:  # the run exists to show this: a run that did not is a failed run
        missed = freezer.failure(report)
        if missed is not None:
            failures.append(missed)
    return failures


def _settle(st: Board, dev: DevStack, path: str, timeout: float = 5.0) -> None:
    """Give the last acks a moment, so the summary is not cut in the middle of settling."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _poll(st, dev, path)
        if st.leased == 0:
            return
        time.sleep(0.1)


def _notes(plan: workload.Plan, sent: workload.SendReport, verdict: verify.Verdict,
           freezer: Freezer | None, report: history.HistoryReport,
           families: dict[str, tuple[list[str], list[str]]]) -> list[str]:
    notes = [f"plan: {plan.count(lambda j: j.delay_s > 0)} delayed, "
             f"{plan.count(lambda j: j.duplicate)} sent twice with one idempotency key, "
             f"{plan.count(lambda j: j.expect_dead)} destined to fail, "
             f"{plan.count(lambda j: j.queue == 'slow')} longer than their lease, "
             f"{plan.count(lambda j: j.queue == 'fanout')} fanning out to {workload.FANOUT_CHILDREN} "
             "children and a continuation each"]
    team = plan.count(lambda j: j.queue == "word-count")
    notes.append(f"two worker functions: {team} word-count jobs routed to sluice-worker-words "
                 "(each result names the function that ran it), the rest to sluice-worker")
    if verdict.unexpected_dead or verdict.unexpected_success:
        notes.append(f"outcomes off the handlers' prediction: {verdict.unexpected_dead} died unexpectedly, "
                     f"{verdict.unexpected_success} succeeded unexpectedly")
    if freezer is not None:
        notes.append(f"freeze: {freezer.note}")
    notes += [f"enqueue error: {e}" for e in sent.errors[:3]]
    ours = {j.job_id for j in plan.jobs} | {j for kids, thens in families.values() for j in (*kids, *thens)}
    strangers = [j for j in report.jobs if j not in ours]
    if strangers:  # not an invariant of this run: someone else may have used the gateway's port
        notes.append(f"{len(strangers)} jobs ran that this demo did not enqueue (e.g. {strangers[0]})")
    return notes
