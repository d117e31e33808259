"""The operator in the chaos run: cancels, redrives, purges, pauses and resumes while the nemesis faults.

``plan(seed, ...)`` is pure, like the nemesis's: the same seed gives the same actions at
the same times (a random stream of its own, so turning the operator on or off leaves
the fault plan of a seed as it was). ``Operator`` carries the actions out through the
paths a real operator uses, and records each one in the history as one ``operator``
line (``kind``, ``outcome``, ``t0``/``t1``, and what it touched), which the checker
reads to know what each action allows (``chaos.checker``):

- ``cancel``: ``Api.cancel`` (the gateway's ``DELETE /v1/jobs/{id}``) on one of the
  latest accepted jobs (``target`` ``recent``), or on one a worker was granted and has not
  finished (``running``: what a user reporting a job "stuck running" would name; workers
  the nemesis killed leave such jobs behind); ``outcome`` is the API's answer: ``cancelled``,
  ``cancel_requested`` (the job was leased), ``finished`` (409), ``not_found`` (404:
  the relay has not recorded it yet) or ``error`` (503: the outcome is unknown);
- ``redrive``: ``sluice dlq list`` then ``sluice dlq redrive QUEUE JOB`` on one listed dead
  job; ``outcome`` ``ok`` (moved), ``not_found``, ``refused`` (the store would not: the
  job is cancelled, succeeded or its record expired), ``none`` (nothing was dead) or
  ``error``;
- ``redrive_all``: ``sluice dlq redrive QUEUE --all``; ``listed`` = the dead jobs read
  just before, ``moved`` = how many went back, ``refused`` = the ones the store refused.

  A redrive goes the way the CLI's does: through ``sluice.gateway.redrive`` (the jobs table mints
  the job's next redrive generation, then Redis moves it);
- ``purge``: ``sluice dlq purge QUEUE --yes``; ``listed`` = the dead jobs read just
  before, ``deleted`` = how many went;
- ``pause`` / ``resume``: ``sluice queue pause|resume QUEUE`` (``core.knobs``),
  the resume ``hold_s`` after the pause. A resume that fails is tried again until it
  lands: an operator who paused a queue does not walk away from it.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sluice_dev.chaos.history import History, Tail

KINDS = ("cancel", "redrive", "redrive_all", "purge", "pause")
WEIGHTS = {"cancel": 5, "redrive": 3, "redrive_all": 1, "purge": 1, "pause": 1}
ENDS = ("write", "failure", "ack", "fail", "release", "store_release")
LISTED = 1_000  # dead jobs read before a redrive or purge (the chaos queue never holds more)
RESUME_RETRY_S = 0.5
PAUSE_EVERY_S = 60.0  # at most one pause a minute


@dataclass(frozen=True, slots=True)
class Action:
    at_s: float  # seconds after the operator starts
    kind: str
    pick: float  # which candidate (a job, a dead job) the action takes: index = int(pick * n)
    hold_s: float = 0.0  # pause: how long until the resume

    def as_dict(self) -> dict[str, Any]:
        return {"at_s": round(self.at_s, 3), "kind": self.kind, "pick": round(self.pick, 6),
                "hold_s": round(self.hold_s, 3)}


def plan(seed: int, duration_s: float, *, interval_s: float, start_s: float = 4.0,
         tail_s: float = 8.0, hold_s: tuple[float, float] = (5.0, 10.0)) -> list[Action]:
    """Every kind once (a seeded shuffle), then weighted draws. A pause starts at least
    ``PAUSE_EVERY_S`` after the previous one (an operator pauses a queue now and then, not
    a third of the time: a long run would mostly measure the backlog), and its resume comes
    before the window's tail, so the drain starts unpaused."""
    rng = random.Random(f"operator:{seed}")
    first = list(KINDS)
    rng.shuffle(first)
    actions: list[Action] = []
    t = start_s
    next_pause = 0.0
    while t <= duration_s - tail_s:
        kind = first.pop(0) if first else rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]
        pick = rng.random()
        hold = rng.uniform(*hold_s) if kind == "pause" else 0.0
        if kind == "pause" and (t < next_pause or t + hold > duration_s - tail_s):
            kind, hold = "cancel", 0.0  # not so soon after the last pause, none past the window
        if kind == "pause":
            next_pause = t + PAUSE_EVERY_S
        actions.append(Action(t, kind, pick, hold))
        t += rng.uniform(0.5, 1.5) * interval_s
    return actions


def chosen(pick: float, candidates: Sequence[str]) -> str | None:
    return candidates[min(len(candidates) - 1, int(pick * len(candidates)))] if candidates else None


class Running:
    """The jobs a worker was granted and has not finished, as the history tells (oldest first).

    By time, not by line order (a line is written when its call returns, so a slow grant's
    line can follow a later write's): a job runs while its latest grant started after every
    result, failure record, ack, fail, release or lost heartbeat of it ended. A job whose
    worker died stays until someone else finishes it.
    """

    def __init__(self, path: str | Path) -> None:
        self.tail = Tail(path)
        self.granted: dict[str, float] = {}  # job -> t0 of its latest grant
        self.ended: dict[str, float] = {}  # job -> t1 of its latest ending

    def __call__(self) -> list[str]:
        for e in self.tail.read():
            job, op = e.get("job"), e.get("op")
            if not job:
                continue
            if op == "grant" and e.get("outcome") == "ok":
                self.granted[str(job)] = max(self.granted.get(str(job), 0.0), float(e.get("t0", 0)))
            elif op in ENDS or (op == "extend" and e.get("outcome") == "lost"):
                self.ended[str(job)] = max(self.ended.get(str(job), 0.0), float(e.get("t1", 0)))
        running = [j for j, t in self.granted.items() if t > self.ended.get(j, 0.0)]
        return sorted(running, key=lambda j: self.granted[j])


def newest_first(pick: float, candidates: Sequence[str]) -> str | None:
    """A job among ``candidates`` (newest last), the newest the likeliest: those are the ones
    still waiting in Kafka or Redis, or running, when the cancel comes."""
    return chosen(pick * pick, list(reversed(candidates)))


class Operator:
    """Carries out a plan of ``Action`` against the chaos queue, recording each in ``history``.

    ``api``: a ``sluice.gateway.api.Api`` (cancel); ``engine``: a ``RedisJobQueue`` (the dead-letter
    commands and the queue's config); ``store``: the jobs table (a redrive's generation);
    ``log``: Kafka (a redrive appends the job's record again; None in tests over fakes);
    ``recent``: the latest accepted job ids, newest last; ``running``: jobs a worker holds
    (``Running``). A cancel's ``pick`` below one half takes a recent job, above it a running
    one (a recent one if none runs).
    """

    def __init__(self, actions: list[Action], api: Any, engine: Any, store: Any, queue: str, history: History,
                 recent: Callable[[], Sequence[str]], *, running: Callable[[], Sequence[str]] = list,
                 clock: Callable[[], float] = time.monotonic, log: Any = None) -> None:
        self.actions, self.api, self.engine, self.store, self.queue = actions, api, engine, store, queue
        self.log = log  # Kafka: a redrive appends the job's record again (sluice.gateway.redrive)
        self.history, self.recent, self.running, self.clock = history, recent, running, clock
        self.done: dict[str, int] = {}
        self._paused = False
        self._lock = threading.Lock()
        self._timers: list[threading.Timer] = []

    def run(self, stop: threading.Event) -> None:
        started = self.clock()
        for action in self.actions:
            if stop.wait(max(0.0, started + action.at_s - self.clock())):
                return
            try:
                self.act(action)
            except Exception as exc:  # an operator's mistake must not end the run: record it, go on
                self.history.emit("operator", kind=action.kind, outcome="error", error=str(exc)[:200])

    def act(self, a: Action) -> None:
        self.done[a.kind] = self.done.get(a.kind, 0) + 1
        {"cancel": self._cancel, "redrive": self._redrive, "redrive_all": self._redrive_all,
         "purge": self._purge, "pause": self._pause}[a.kind](a)

    def _record(self, kind: str, t0: float, outcome: str, **fields: Any) -> None:
        self.history.emit("operator", kind=kind, outcome=outcome, t0=t0, t1=time.time(), **fields)

    def _cancel(self, a: Action) -> None:
        from sluice.core.errors import AlreadyFinished, JobNotFound, SluiceError

        pick = (a.pick % 0.5) * 2
        running = list(self.running()) if a.pick >= 0.5 else []
        target = "running" if running else "recent"
        job = chosen(pick, running) if running else newest_first(pick, self.recent())
        if job is None:
            self._record("cancel", time.time(), "none")
            return
        t0 = time.time()
        try:
            answer = self.api.cancel(job)
        except AlreadyFinished:
            self._record("cancel", t0, "finished", job=job, target=target)
        except JobNotFound:
            self._record("cancel", t0, "not_found", job=job, target=target)
        except SluiceError as exc:  # the gateway's 503: the store may or may not have cancelled it
            self._record("cancel", t0, "error", job=job, target=target, error=str(exc)[:200])
        else:
            self._record("cancel", t0, str(answer.status), job=job, target=target)

    def _dead(self) -> list[str]:
        return [d.job_id for d in self.engine.dead_letters(self.queue, LISTED)]

    def _redrive(self, a: Action) -> None:
        from sluice.core.errors import AlreadyFinished, JobNotFound, SluiceError
        from sluice.gateway.redrive import redrive_one

        t0 = time.time()
        try:
            job = chosen(a.pick, self._dead())
        except SluiceError as exc:
            self._record("redrive", t0, "error", error=str(exc)[:200])
            return
        if job is None:
            self._record("redrive", t0, "none")
            return
        t0 = time.time()
        try:
            moved = int(redrive_one(self.engine, self.store, self.queue, job, log=self.log,
                                    reseal=self.api.pipeline.reseal_now))  # sealed, as the gateway's
        except JobNotFound:
            self._record("redrive", t0, "not_found", job=job)
        except AlreadyFinished as exc:
            self._record("redrive", t0, "refused", job=job, error=str(exc)[:200])
        except SluiceError as exc:
            self._record("redrive", t0, "error", job=job, error=str(exc)[:200])
        else:
            self._record("redrive", t0, "ok" if moved else "not_found", job=job, moved=moved)

    def _listed_then(self, kind: str, call: Callable[[], dict[str, Any]]) -> None:
        from sluice.core.errors import SluiceError

        t0 = time.time()
        listed: list[str] = []
        try:
            listed = self._dead()
            counts = call()
        except SluiceError as exc:
            self._record(kind, t0, "error", listed=listed, error=str(exc)[:200])
        else:
            self._record(kind, t0, "ok", listed=listed, **counts)

    def _redrive_all(self, a: Action) -> None:
        from sluice.gateway.redrive import redrive_all

        def redrive() -> dict[str, Any]:
            report = redrive_all(self.engine, self.store, self.queue, log=self.log,
                                 reseal=self.api.pipeline.reseal_now)
            refused = {"refused": sorted(report.refused)} if report.refused else {}
            return {"moved": int(report.moved), **refused}

        self._listed_then("redrive_all", redrive)

    def _purge(self, a: Action) -> None:
        self._listed_then("purge", lambda: {"deleted": int(self.engine.purge_dead(self.queue))})

    def _pause(self, a: Action) -> None:
        from sluice.core import knobs
        from sluice.core.errors import SluiceError

        t0 = time.time()
        with self._lock:
            self._paused = True  # even if the call fails: it may have landed, so resume it anyway
        try:
            knobs.pause(self.engine, self.queue)
        except SluiceError as exc:
            self._record("pause", t0, "error", queue=self.queue, error=str(exc)[:200])
        else:
            self._record("pause", t0, "ok", queue=self.queue)
        timer = threading.Timer(a.hold_s, self.resume)
        timer.daemon = True
        self._timers.append(timer)
        timer.start()

    def resume(self, deadline_s: float = 30.0) -> None:
        """Resume the queue if this operator paused it; retried until it lands or ``deadline_s``."""
        from sluice.core import knobs
        from sluice.core.errors import SluiceError

        with self._lock:
            if not self._paused:
                return
            give_up = self.clock() + deadline_s
            while True:
                t0 = time.time()
                try:
                    knobs.resume(self.engine, self.queue)
                except SluiceError as exc:
                    self._record("resume", t0, "error", queue=self.queue, error=str(exc)[:200])
                    if self.clock() >= give_up:
                        return
                    time.sleep(RESUME_RETRY_S)
                    continue
                self._record("resume", t0, "ok", queue=self.queue)
                self._paused = False
                return

    def close(self) -> None:
        """Cancel the pending resumes and resume now: the drain must not start on a paused queue."""
        for timer in self._timers:
            timer.cancel()
        self.resume()
