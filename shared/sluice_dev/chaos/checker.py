"""The chaos run's checker: reads the history and the stores' final state, counts violations.

Pure: events (``sluice_dev.chaos.history``) and snapshots in, a ``Report`` out. What each
count means (docs/break-it.md has the argument):

- ``lost``: accepted (Kafka acknowledged the enqueue) but neither succeeded (a result
  write was accepted, or the store says succeeded) nor dead/failed;
- ``unexpected``: a result exists for a job no enqueue ever named (an enqueue whose
  outcome is unknown counts as named: its job may legitimately run);
- ``duplicate_executions``: handler runs beyond the first, summed over jobs. Allowed by
  at-least-once, so only counted;
- ``duplicate_results``: jobs for which storage accepted two different results, or
  accepted the same token's write twice (a blind retry into a duplicate). Must be 0;
- ``wrong_results``: jobs whose accepted or stored result is not the deterministic
  function of the payload. Must be 0;
- ``stale_writes_accepted``: accepted writes with a token older than one already
  granted when the write started (DynamoDB had seen the newer token), plus succeeded
  items whose result is older than another accepted write. Must be 0;
- ``stuck``: the store says leased and Redis holds no live lease for the job. Must be 0;
- ``family_violations`` (``chaos.families``): a parent whose runs named different children or
  continuations, a child that did not end succeeded, a continuation that did not run to success,
  holds two results, or ran before its last child's first result write. Must be 0. Children
  and continuations are named by their parent's ``family`` line (never ``unexpected``), and
  counted in ``families``/``family_children``/``continuation_runs``, not as accepted jobs;
  the result checks (duplicate, wrong, stale) apply to them as to any job.

With the operator on (``chaos.operator``), its ``operator`` lines change what a job may
do, and nothing else (``chaos.rules`` has each rule and its argument):

- ``cancelled``: jobs that end ``cancelled`` after an operator cancel the API accepted
  (or answered with an unknown outcome); such a job is not lost. Ending ``cancelled``
  without one is still lost;
- ``cancel_violations``: a job the API answered ``cancelled`` that does not end
  ``cancelled``, or is granted or has a result accepted after that answer; a job
  answered ``cancel_requested`` that is granted again after the answer. Must be 0;
- ``reruns_without_redrive``: a grant of a job that started after the store accepted
  its final verdict (``dead`` or ``failed``), with no redrive of the job (or of every
  dead job) in between; jobs the workload enqueued only. Must be 0;
- ``purged_lost``: accepted jobs that end neither succeeded nor final in the store,
  excused because an operator purge deleted them while they were dead in Redis
  (listed by the purge's dead-letter read, or dead-lettered by a worker between that
  read and the purge). Counted;
- ``pause_violations``: a push that added jobs to the queue while the operator had it
  paused (from the pause's answer plus the relay's config refresh, until the resume, or
  a Redis restart, which forgets the pause). Must be 0.

Over every job a caller was answered 202 for (issue 28, item 3: a 202 is binding):

- ``lost_after_202``: a job whose enqueue was answered 202 (``enqueue`` ``ok``), or a child or a
  continuation whose family the gateway answered 202 for (its parent's ``family_accepted`` line,
  written once ``ctx.enqueue_many`` returned), that ends with neither a result (an accepted
  result write, or a ``succeeded`` item) nor a visible final ending: an item ``dead``, ``failed``
  or ``cancelled`` (whatever cancelled it). An operator's purge of the job while it was dead is
  excused (counted in ``purged_lost``), as for ``lost``. Must be 0. Unlike ``lost`` it covers
  family members, and counts what ended silently: a job the relay dropped (dead-lettered with no
  item), or one left ``accepted``/``queued`` with nothing in Redis, as before issue 28 the loser
  of two gateways' race for the registry's last slot was.

When the run collected its completion events (a ``completions`` line, ``chaos.completions``):

- ``completion_violations``: a final job without an event naming its final status; an
  ending (a job and redrive generation) with two distinct event ids (two states); a job
  that is not final with an event of a generation it has not been redriven past (a job
  that never ended got an event). Must be 0. Duplicates of one id are allowed (at least
  once) and counted in ``completions_duplicated``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sluice_dev.chaos import rules

ACCEPTED_WRITES = ("written", "already_written")
FINAL_FAILURES = ("dead", "failed")
VISIBLE_ENDINGS = ("dead", "failed", "cancelled")  # with an item: GET, the events and the console show it
SAMPLES = 5


@dataclass(frozen=True, slots=True)
class StoreItem:
    """A job's item in the jobs table at the end of the run."""

    status: str
    token: int = 0
    result_token: int | None = None
    result_digest: str | None = None
    redrive_gen: int = 0  # redrives made
    run_gen: int = 0  # the generation its latest grant ran under: its ending's event names it
    last_error: str = ""


@dataclass
class Report:
    accepted: int = 0
    unknown_enqueues: int = 0
    succeeded: int = 0
    dead: int = 0
    lost: int = 0
    lost_after_202: int = 0
    answered_202: int = 0  # the jobs lost_after_202 is counted over: accepted ones and answered members
    unexpected: int = 0
    executions: int = 0
    duplicate_executions: int = 0
    jobs_run_more_than_once: int = 0
    duplicate_results: int = 0
    wrong_results: int = 0
    stale_writes_accepted: int = 0
    writes_rejected: int = 0
    stuck: int = 0
    cancelled: int = 0
    cancel_violations: int = 0
    reruns_without_redrive: int = 0
    purged_lost: int = 0
    pause_violations: int = 0
    completions: int = -1  # distinct completion events; -1: the run did not collect them
    completions_duplicated: int = 0
    completion_violations: int = 0
    families: int = 0
    families_refused: int = 0  # parents cancelled before their family was created: none of it exists
    family_children: int = 0
    continuation_runs: int = 0
    family_violations: int = 0
    operator: dict[str, int] = field(default_factory=dict)  # "<kind>:<outcome>" -> count
    faults: dict[str, int] = field(default_factory=dict)
    faults_landed: dict[str, int] = field(default_factory=dict)
    samples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.lost_after_202 or self.unexpected or self.duplicate_results
                    or self.wrong_results or self.stale_writes_accepted or self.stuck
                    or self.cancel_violations
                    or self.reruns_without_redrive or self.pause_violations or self.completion_violations
                    or self.family_violations)

    def as_dict(self) -> dict[str, Any]:
        return {"accepted": self.accepted, "lost": self.lost, "lost_after_202": self.lost_after_202,
                "answered_202": self.answered_202,
                "unexpected": self.unexpected,
                "duplicate_executions": self.duplicate_executions,
                "duplicate_results": self.duplicate_results, "wrong_results": self.wrong_results,
                "stale_writes_accepted": self.stale_writes_accepted, "stuck": self.stuck,
                "cancel_violations": self.cancel_violations,
                "reruns_without_redrive": self.reruns_without_redrive,
                "pause_violations": self.pause_violations,
                "completion_violations": self.completion_violations, "completions": self.completions,
                "completions_duplicated": self.completions_duplicated,
                "family_violations": self.family_violations, "families": self.families,
                "families_refused": self.families_refused,
                "family_children": self.family_children, "continuation_runs": self.continuation_runs,
                "faults": dict(sorted(self.faults.items())), "ok": self.ok,
                "cancelled": self.cancelled, "purged_lost": self.purged_lost,
                "operator": dict(sorted(self.operator.items())),
                "succeeded": self.succeeded, "dead": self.dead, "unknown_enqueues": self.unknown_enqueues,
                "executions": self.executions, "jobs_run_more_than_once": self.jobs_run_more_than_once,
                "writes_rejected": self.writes_rejected,
                "faults_landed": dict(sorted(self.faults_landed.items())),
                "samples": {k: v for k, v in self.samples.items() if v}}


@dataclass
class _Job:
    expect: str | None = None
    enqueue: str | None = None  # ok | info | fail
    grants: list[tuple[int, float]] = field(default_factory=list)  # (token, t1)
    grant_starts: list[float] = field(default_factory=list)  # t0 of each grant, in the same order
    verdicts: list[tuple[float, float]] = field(default_factory=list)  # accepted dead/failed: (t0, t1)
    redis_deaths: list[tuple[float, float]] = field(default_factory=list)  # fail -> dead: (t0, t1)
    writes: list[dict[str, Any]] = field(default_factory=list)  # accepted result writes
    invokes: int = 0
    completions: list[tuple[str, str, int]] = field(default_factory=list)  # (event id, state, generation)
    invoke_starts: list[float] = field(default_factory=list)


def _index(events: Iterable[Mapping[str, Any]], report: Report,  # noqa: C901 - one branch per op
           ops: rules.Ops, families: dict[str, list[Mapping[str, Any]]] | None = None,
           answered: set[str] | None = None) -> dict[str, _Job]:
    """``answered`` gains every family member whose family the gateway answered 202 for."""
    jobs: dict[str, _Job] = defaultdict(_Job)
    for e in events:
        op, outcome = e.get("op"), e.get("outcome")
        if op == "family" and families is not None:
            families.setdefault(str(e.get("job")), []).append(e)
            continue
        if op == "family_accepted":
            if answered is not None:
                answered.update(str(c) for c in (*e.get("children", ()), e.get("continuation")) if c)
            continue
        if op in ("operator", "push", "config"):
            ops.add(e)
            if op == "operator":
                key = f"{e.get('kind')}:{outcome}"
                report.operator[key] = report.operator.get(key, 0) + 1
            continue
        if op == "completions":  # the run collected its completion events (chaos.completions)
            report.completions = 0
            continue
        if op == "fault":
            ops.add(e)
            phase, kind = e.get("phase", "injected"), str(e.get("kind"))
            bucket = {"injected": report.faults, "landed": report.faults_landed,
                      "fallback": report.faults_landed}.get(str(phase))
            if bucket is not None:  # "resumed" and "error" are not faults of their own
                bucket[kind] = bucket.get(kind, 0) + 1
            continue
        job_id = e.get("job")
        if not job_id:
            continue
        j = jobs[str(job_id)]
        if op == "enqueue":
            # an enqueue retried under the same id: the best outcome wins (ok > info > fail)
            rank = {"ok": 3, "info": 2, "fail": 1}
            if rank.get(str(outcome), 0) > rank.get(j.enqueue or "", 0):
                j.enqueue = str(outcome)
            j.expect = e.get("expect", j.expect)
        elif op == "grant" and outcome == "ok":
            j.grants.append((int(e["token"]), float(e.get("t1", 0))))
            j.grant_starts.append(float(e.get("t0", e.get("t1", 0))))
        elif op == "failure" and outcome == "ok" and e.get("status") in FINAL_FAILURES:
            j.verdicts.append((float(e.get("t0", 0)), float(e.get("t1", 0))))
        elif op == "fail" and outcome == "dead":
            j.redis_deaths.append((float(e.get("t0", 0)), float(e.get("t1", 0))))
        elif op == "write":
            if outcome in ACCEPTED_WRITES:
                j.writes.append(dict(e))
            elif outcome == "rejected":
                report.writes_rejected += 1
        elif op == "invoke":
            j.invokes += 1
            j.invoke_starts.append(float(e.get("t0", 0)))
        elif op == "completion":
            j.completions.append((str(e.get("event_id")), str(e.get("state")), int(e.get("gen") or 0)))
    return jobs


def _check_after_202(report: Report, job_id: str, j: _Job, item: StoreItem | None, ops: rules.Ops,
                     answered: bool, succeeded: bool) -> None:
    """``lost_after_202``: answered 202, yet neither a result nor a visible final ending."""
    report.answered_202 += answered
    if not answered or succeeded or (item is not None and item.status in VISIBLE_ENDINGS):
        return
    if ops.purged_while_dead(job_id, j.redis_deaths):
        return  # an operator's purge: excused, and counted in purged_lost
    report.lost_after_202 += 1
    _sample(report, "lost_after_202", job_id)


def _sample(report: Report, name: str, job_id: str) -> None:
    found = report.samples.setdefault(name, [])
    if len(found) < SAMPLES:
        found.append(job_id)


def check(events: Iterable[Mapping[str, Any]], store: Mapping[str, StoreItem],
          live_leases: set[str]) -> Report:
    """``store``: every item of the jobs table; ``live_leases``: jobs Redis holds a live lease on."""
    report = Report()
    ops = rules.Ops()
    families: dict[str, list[Mapping[str, Any]]] = {}
    answered: set[str] = set()  # family members whose family was answered 202
    jobs = _index(events, report, ops, families, answered)
    members = family_check(report, families, jobs, store, ops)
    for job_id in (*store, *answered):  # a member answered 202 may have left no other trace
        jobs.setdefault(job_id, _Job())
    for job_id, j in jobs.items():
        item = store.get(job_id)
        named = j.enqueue in ("ok", "info") or job_id in members
        succeeded = bool(j.writes) or (item is not None and item.status == "succeeded")
        dead = item is not None and item.status in FINAL_FAILURES
        _check_after_202(report, job_id, j, item, ops, j.enqueue == "ok" or job_id in answered, succeeded)
        report.accepted += j.enqueue == "ok"
        report.unknown_enqueues += j.enqueue == "info"
        if job_id in members:  # counted by family_check, not as the workload's own jobs
            _check_results(report, job_id, j, item)
            report.executions += j.invokes
            _check_stuck(report, job_id, item, live_leases)
            _check_operator(report, job_id, j, item, ops)  # a member's cancel obeys the same rules
            continue
        report.executions += j.invokes
        if j.invokes > 1:
            report.duplicate_executions += j.invokes - 1
            report.jobs_run_more_than_once += 1
        if succeeded and named:
            report.succeeded += 1
        elif dead and named:
            report.dead += 1
        cancelled = item is not None and item.status == "cancelled" and ops.may_end_cancelled(job_id)
        report.cancelled += cancelled and named
        if j.enqueue == "ok" and not succeeded and not dead and not cancelled:
            if ops.purged_while_dead(job_id, j.redis_deaths):
                report.purged_lost += 1
                _sample(report, "purged_lost", job_id)
            else:
                report.lost += 1
                _sample(report, "lost", job_id)
        _check_operator(report, job_id, j, item, ops)
        if succeeded and not named:
            report.unexpected += 1
            _sample(report, "unexpected", job_id)
        _check_results(report, job_id, j, item)
        _check_stuck(report, job_id, item, live_leases)
        if report.completions >= 0:
            _check_completions(report, job_id, j, item)
    paused_pushes = ops.pushes_while_paused()
    report.pause_violations = len(paused_pushes)
    for where in paused_pushes:
        _sample(report, "pause_violations", where)
    return report


def family_check(report: Report, families: Mapping[str, list[Mapping[str, Any]]],
                 jobs: dict[str, _Job], store: Mapping[str, StoreItem], ops: rules.Ops) -> set[str]:
    """Families (``chaos.families``): each parent named one set of children and one continuation
    (every run of the parent named the same); every child ended succeeded; the continuation
    succeeded, once: one result, its handler first run after every child's first accepted
    result write (each child's countdown follows its write). Returns every member's id (named:
    their results are expected, their right answers set here).

    The operator may cancel a member (``ops``): a child that ended ``cancelled`` under one of its
    cancels is owed nothing more, and the continuation still runs (docs/flows.md: whatever each
    child ended in), but on fewer results than the parent's expectation assumed, so only its
    right answer goes unchecked; a continuation so cancelled is owed nothing."""
    members: set[str] = set()
    for parent, lines in families.items():
        report.families += 1
        named = {(tuple(e.get("children", ())), str(e.get("continuation"))) for e in lines}
        if len(named) != 1:
            _violation(report, parent, "its runs named different families")
            continue
        (children, then), = named
        parent_item = store.get(parent)
        if parent_item is not None and parent_item.status == "cancelled" and \
                all(store.get(m) is None and not (jobs.get(m) and jobs[m].writes) for m in (*children, then)):
            # Cancelled before the gateway created its family (the family request refused under the
            # parent's cancel, or never sent): nothing of it exists, so nothing of it is owed. A
            # family created in part is still checked below (an `accepted` child left so is stuck).
            report.families_refused += 1
            continue
        for e in lines:
            for member, expect in dict(e.get("expects") or {}).items():
                jobs[member].expect = str(expect)
        members.update(children)
        members.add(then)
        report.family_children += len(children)
        if len(set(children)) != len(children):
            _violation(report, parent, "a child id repeats")
        last_child, answer_holds = _check_children(report, parent, children, jobs, store, ops)
        t = jobs.get(then)
        if not answer_holds and t is not None:
            t.expect = None
        _check_continuation(report, parent, then, last_child, t, store.get(then), ops)
    return members


def _check_children(report: Report, parent: str, children: Sequence[str], jobs: Mapping[str, _Job],
                    store: Mapping[str, StoreItem], ops: rules.Ops) -> tuple[float, bool]:
    """When the last child's first result was written, and whether the parent's expected answer
    for the continuation still holds (no child cancelled by the operator).

    A write landed somewhere between its request (``t0``) and its answer (``t1``): a worker frozen
    while its request is in flight answers seconds after the store applied it (and counted the
    child: the bucketed countdown lets another child's worker then release the continuation). Only
    a continuation that started before every accepted write of a child was even sent is proven early."""
    last_child, answer_holds = 0.0, True
    parent_item = store.get(parent)
    for child in children:
        c, item = jobs.get(child), store.get(child)
        if _cancelled_by_operator(child, item, ops) or _abandoned(child, item, parent, parent_item, c):
            answer_holds = False
            continue
        if c is None or not c.writes or item is None or item.status != "succeeded":
            _violation(report, child, f"child of {parent} did not succeed "
                                      f"({item.status if item else 'no item'})")
            continue
        last_child = max(last_child, min(float(w.get("t0", w.get("t1", 0))) for w in c.writes))
    return last_child, answer_holds


def _check_continuation(report: Report, parent: str, then: str, last_child: float, t: _Job | None,
                        item: StoreItem | None, ops: rules.Ops) -> None:
    if _cancelled_by_operator(then, item, ops):
        return
    if t is None or not t.writes or item is None or item.status != "succeeded":
        _violation(report, then, f"continuation of {parent} did not run to success "
                                 f"({item.status if item else 'no item'})")
        return
    report.continuation_runs += t.invokes
    if len({str(w.get("digest")) for w in t.writes}) > 1:
        _violation(report, then, "the continuation has two different results")
    if last_child and t.invoke_starts and min(t.invoke_starts) < last_child:
        _violation(report, then, "the continuation ran before its last child's result was written")


def _abandoned(child: str, item: StoreItem | None, parent: str, parent_item: StoreItem | None,
               c: _Job | None) -> bool:
    """A child ended ``dead`` unrun because its parent ended (not succeeded) before the append of its
    children was confirmed (docs/flows.md, Failure: the countdown function ends it with
    ``abandoned_reason``). A short operator run (seed 8111) cancelled a parent while its family
    request was in flight: two children still ``accepted`` ended so, and the continuation ran on the
    other two's results, a "wrong result" to a checker that knew only operator cancels."""
    return (item is not None and item.status == "dead" and not (c and c.writes)
            and item.last_error.startswith(f"never appended: its parent {parent} ended ")
            and parent_item is not None and parent_item.status in VISIBLE_ENDINGS)


def _cancelled_by_operator(job_id: str, item: StoreItem | None, ops: rules.Ops) -> bool:
    return item is not None and item.status == "cancelled" and ops.may_end_cancelled(job_id)


def _check_stuck(report: Report, job_id: str, item: StoreItem | None, live_leases: set[str]) -> None:
    if item is not None and item.status == "leased" and job_id not in live_leases:
        report.stuck += 1
        _sample(report, "stuck", job_id)


def _violation(report: Report, job_id: str, why: str) -> None:
    report.family_violations += 1
    _sample(report, "family_violations", f"{job_id}: {why}")


def _check_operator(report: Report, job_id: str, j: _Job, item: StoreItem | None, ops: rules.Ops) -> None:
    writes = [float(w.get("t0", 0)) for w in j.writes]
    if ops.cancel_broken(job_id, item.status if item is not None else None, j.grant_starts, writes):
        report.cancel_violations += 1
        _sample(report, "cancel_violations", job_id)
    # Only the workload's jobs: the operator redrives those alone. (Jobs of other queues in the
    # history, such as the relay's partition-ownership jobs, are outside the run's contract.)
    if j.enqueue is not None and ops.rerun_without_redrive(job_id, j.verdicts, j.grant_starts):
        report.reruns_without_redrive += 1
        _sample(report, "reruns_without_redrive", job_id)


def _check_results(report: Report, job_id: str, j: _Job, item: StoreItem | None) -> None:
    written = [w for w in j.writes if w.get("outcome") == "written"]
    digests = {str(w.get("digest")) for w in j.writes}
    same_token = Counter(int(w["token"]) for w in written)
    if len(digests) > 1 or any(n > 1 for n in same_token.values()):
        report.duplicate_results += 1
        _sample(report, "duplicate_results", job_id)
    stored = item.result_digest if item is not None and item.status == "succeeded" else None
    if j.expect is not None and ((digests and digests != {j.expect})
                                 or (stored is not None and stored != j.expect)):
        report.wrong_results += 1
        _sample(report, "wrong_results", job_id)
    stale = sum(1 for w in written
                if any(tok > int(w["token"]) and t1 < float(w.get("t0", 0)) for tok, t1 in j.grants))
    if not stale and item is not None and item.status == "succeeded" and item.result_token is not None \
            and any(int(w["token"]) > item.result_token for w in written):
        # The item holds an older token's result over a newer accepted write. (An older result
        # under a newer grant alone is fine: a re-run of a succeeded job that never wrote.)
        stale = 1
    if stale:
        report.stale_writes_accepted += stale
        _sample(report, "stale_writes_accepted", job_id)


FINAL_STATES = ("succeeded", "failed", "dead", "cancelled")


def _check_completions(report: Report, job_id: str, j: _Job, item: StoreItem | None) -> None:
    """Exactly one distinct event per ending, none for a job that never ended."""
    ids = {eid for eid, _, _ in j.completions}
    report.completions += len(ids)
    report.completions_duplicated += len(j.completions) - len(ids)
    per_ending: dict[int, set[str]] = defaultdict(set)
    for eid, _, gen in j.completions:
        per_ending[gen].add(eid)
    final = item is not None and item.status in FINAL_STATES
    broken = any(len(v) > 1 for v in per_ending.values())
    if final:
        assert item is not None
        broken = broken or (item.status, item.run_gen) not in {(s, g) for _, s, g in j.completions}
    else:
        redriven_past = item.redrive_gen if item is not None else 0
        broken = broken or any(gen >= redriven_past for gen in per_ending)
    if broken:
        report.completion_violations += 1
        _sample(report, "completion_violations", job_id)
