"""What each operator action allows a job to do, for the checker (``chaos.checker``). Pure.

``Ops`` collects the history's ``operator`` lines (``chaos.operator``), the relay's
``push`` lines and the Redis restarts; the checker asks it one question per rule.
Every time below is a wall-clock ``t0``/``t1`` of the history (one machine, one clock),
and an action took effect at some instant inside its own ``[t0, t1]``.

**cancel** (``Api.cancel``), by the API's answer:

- ``cancelled``: the store moved the item from accepted/queued to ``cancelled``, a final
  state nothing leaves (grant refuses a cancelled item, a result write needs a leased
  one, the relay's settle write needs a non-final one). So the job must end
  ``cancelled``, and no grant and no accepted result write may *start* after the answer
  (``t0 > cancel.t1``): anything that started later came after the cancel took effect;
- ``cancel_requested``: the item was leased; the store flagged it. The holder may still
  finish (succeeded), fail (dead/failed) or stop (cancelled): any final state is allowed,
  and ending ``cancelled`` is not a loss. But grant refuses a flagged item, so no grant
  may start after the answer, unless a redrive of the job came after it: the store's
  redrive drops the request (the operator's redrive supersedes it, ``store.redrive``);
- ``error`` (the gateway's 503): the store may or may not have cancelled it, so ending
  ``cancelled`` is allowed and nothing else is asserted;
- ``finished`` (409) and ``not_found`` (404) changed nothing and allow nothing.

**redrive** (one job, or ``--all``): a job whose final verdict (``dead``/``failed``) the
store accepted may be granted again only if a redrive of it came after the verdict and
before the grant (``redrive.t1 > verdict.t0`` and ``redrive.t0 < grant.t0``). A redrive
answered ``not_found`` redrove nothing; one that failed with an error may have.

**purge**: deletes the jobs dead in Redis at that moment. Such a job may end without a
final state in the store (it is counted, not excused silently): only if it was listed
by the dead-letter read just before the purge, or a worker dead-lettered it between
that read and the purge's end.

**pause** / **resume** (``core.knobs``): a paused queue takes no new jobs from Kafka
(leasing what Redis already holds goes on, by design). Two rules:

- each relay honours what it read: a push that added jobs, by a relay process whose last
  config read of the queue before the push said paused, is a violation (exact: the
  relay's ``config`` lines: ``ConfigRead`` events, ``chaos.app.record_relay``);
- each relay reads it in time: every relay re-reads the config every ``refresh_s``
  (0.5 s), so from ``pause.t1 + PAUSE_GRACE_S`` until the next resume's ``t0`` (or a
  Redis restart's, which forgets the config and with it the pause), no push may add a
  job to the queue. That every job still ends after the resume is the
checker's ``lost`` rule, unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

PAUSE_GRACE_S = 3.0  # the relay's 0.5 s config refresh, plus a loaded machine's scheduling delays
MAY_HAVE_CANCELLED = ("cancelled", "cancel_requested", "error")
MAY_HAVE_MOVED = ("ok", "error")


@dataclass(frozen=True, slots=True)
class Span:
    t0: float
    t1: float
    outcome: str


def _span(e: Mapping[str, Any]) -> Span:
    t1 = float(e.get("t1", 0))
    return Span(float(e.get("t0", t1)), t1, str(e.get("outcome", "")))


@dataclass
class Ops:
    cancels: dict[str, list[Span]] = field(default_factory=dict)
    redrives: dict[str, list[Span]] = field(default_factory=dict)
    redrive_alls: list[Span] = field(default_factory=list)
    purges: list[tuple[Span, frozenset[str]]] = field(default_factory=list)
    switches: list[tuple[str, Span, str | None]] = field(default_factory=list)  # (pause|resume, span, queue)
    redis_restarts: list[float] = field(default_factory=list)
    pushes: list[tuple[float, str | None, str, Any]] = field(default_factory=list)  # (t0, queue, where, pid)
    configs: dict[tuple[Any, str | None], list[tuple[float, bool]]] = field(default_factory=dict)

    def add(self, e: Mapping[str, Any]) -> None:
        op, kind = e.get("op"), str(e.get("kind", ""))
        if op == "fault":
            if kind in ("restart_redis", "restart_redis_shard") and e.get("phase", "injected") == "injected":
                self.redis_restarts.append(float(e.get("t1", 0)))
            elif kind == "flush_registry_shard" and str(e.get("detail", "")).startswith("flushall"):
                self.redis_restarts.append(float(e.get("t1", 0)))  # a cluster shard lost all its data
        elif op == "push":
            if e.get("outcome") == "ok" and int(e.get("pushed", 0)) > 0:
                self.pushes.append((float(e.get("t0", 0)), e.get("queue"),
                                    f"pid {e.get('pid')} partition {e.get('partition')} at {e.get('t0')}",
                                    e.get("pid")))
        elif op == "config":
            self.configs.setdefault((e.get("pid"), e.get("queue")), []).append(
                (float(e.get("t1", 0)), bool(e.get("paused"))))
        elif op == "operator":
            self._operator(kind, e)

    def _operator(self, kind: str, e: Mapping[str, Any]) -> None:
        span, job = _span(e), e.get("job")
        if kind == "cancel" and job:
            self.cancels.setdefault(str(job), []).append(span)
        elif kind == "redrive" and job:
            self.redrives.setdefault(str(job), []).append(span)
        elif kind == "redrive_all":
            self.redrive_alls.append(span)
        elif kind == "purge":
            self.purges.append((span, frozenset(str(j) for j in e.get("listed") or ())))
        elif kind in ("pause", "resume"):
            self.switches.append((kind, span, e.get("queue")))

    # -- cancel ----------------------------------------------------------------------------------------

    def may_end_cancelled(self, job: str) -> bool:
        return any(c.outcome in MAY_HAVE_CANCELLED for c in self.cancels.get(job, ()))

    def cancel_broken(self, job: str, status: str | None, grant_starts: Sequence[float],
                      write_starts: Sequence[float]) -> bool:
        """``grant_starts``/``write_starts``: t0 of each accepted grant and result write."""
        for c in self.cancels.get(job, ()):
            granted_after = any(t0 > c.t1 for t0 in grant_starts)
            if c.outcome == "cancelled" and (status != "cancelled" or granted_after
                                             or any(t0 > c.t1 for t0 in write_starts)):
                return True
            if c.outcome == "cancel_requested" and any(
                    t0 > c.t1 and not self._redriven_between(job, c.t1, t0) for t0 in grant_starts):
                return True
        return False

    def _redriven_between(self, job: str, after: float, before: float) -> bool:
        return any(r.t1 > after and r.t0 < before for r in self._redrives_of(job))

    def _redrives_of(self, job: str) -> list[Span]:
        return [r for r in (*self.redrives.get(job, ()), *self.redrive_alls) if r.outcome in MAY_HAVE_MOVED]

    # -- redrive ---------------------------------------------------------------------------------------

    def rerun_without_redrive(self, job: str, verdicts: Iterable[tuple[float, float]],
                              grant_starts: Sequence[float]) -> bool:
        redrives = self._redrives_of(job)
        for v0, v1 in verdicts:
            for g in grant_starts:
                if g > v1 and not any(r.t1 > v0 and r.t0 < g for r in redrives):
                    return True
        return False

    # -- purge -----------------------------------------------------------------------------------------

    def purged_while_dead(self, job: str, redis_deaths: Iterable[tuple[float, float]]) -> bool:
        deaths = list(redis_deaths)
        for span, listed in self.purges:
            if span.outcome not in MAY_HAVE_MOVED:
                continue
            if job in listed or any(d1 > span.t0 and d0 < span.t1 for d0, d1 in deaths):
                return True
        return False

    # -- pause -----------------------------------------------------------------------------------------

    def paused_windows(self) -> list[tuple[float, float, str | None]]:
        """(from, until, queue): when no push may add a job to the queue. Only a pause that
        answered ok opens one; the first resume after it closes it, whatever it answered."""
        switches = sorted(self.switches, key=lambda s: s[1].t0)
        windows = []
        for i, (kind, span, queue) in enumerate(switches):
            if kind != "pause" or span.outcome != "ok":
                continue
            ends = [s.t0 for k, s, q in switches[i + 1:] if k == "resume" and q == queue]
            ends += [t for t in self.redis_restarts if t > span.t0]
            start, end = span.t1 + PAUSE_GRACE_S, min(ends, default=float("inf"))
            if start < end:
                windows.append((start, end, queue))
        return windows

    def saw_paused(self, pid: Any, queue: str | None, t0: float) -> bool:
        """Whether this relay process's last config read of ``queue`` before ``t0`` said paused."""
        before = [paused for t1, paused in self.configs.get((pid, queue), ()) if t1 < t0]
        return bool(before) and before[-1]

    def pushes_while_paused(self) -> list[str]:
        """Pushes that added jobs after their relay read "paused", or inside a paused window of
        their queue (a push or pause line without a queue matches any)."""
        windows = self.paused_windows()
        for reads in self.configs.values():
            reads.sort()
        return [where for t0, pq, where, pid in self.pushes
                if self.saw_paused(pid, pq, t0)
                or any(a < t0 < b and (pq is None or q is None or pq == q) for a, b, q in windows)]
