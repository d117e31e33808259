"""The demo's workload: which jobs, and sending them to the gateway over HTTP.

The plan is a pure function of (jobs, seed), so a run can be repeated. It mixes
every example queue, and ``word-count``, which a second worker function runs
(``TEAM_WORKER``): most jobs are plain, some are delayed, some fail once and
then succeed, some are destined to fail (dead-lettered), a few run longer than
their lease, a few fan out to children and a continuation that sums them
(``fanout``, docs/flows.md), and a few are sent twice with the same idempotency key. The plan
also predicts how each job ends (``expect_dead``), so the demo can say whether
the pipeline did what the handlers say it should.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from sluice.client import Client
from sluice_dev.examples import failing_attempts

BATCH = 100
TEAM_WORKER = ("words", "sluice_dev.examples_team")  # the demo's second worker function (issue 15)
DEMO_MAX_ATTEMPTS = 3
DEMO_LEASE_S = 3  # each job's own lease: short, so the slow jobs outlive theirs several times
SLOW_SECONDS = 7.0
FANOUT_CHILDREN = 10


@dataclass
class PlannedJob:
    index: int
    queue: str
    payload: Any
    delay_s: int = 0
    max_attempts: int = DEMO_MAX_ATTEMPTS
    duplicate: bool = False  # sent alone with an idempotency key, then sent again with it
    expect_dead: bool = False
    job_id: str | None = None
    sent_at: float = 0.0  # wall clock, when its request started


@dataclass
class Plan:
    jobs: list[PlannedJob]

    def count(self, pred: Callable[[PlannedJob], bool]) -> int:
        return sum(1 for j in self.jobs if pred(j))


def plan(n: int, seed: int, sink_url: str) -> Plan:
    rng = random.Random(seed)
    jobs: list[PlannedJob] = []
    slow = max(2, n // 200)
    fanouts = slow + max(1, n // 400)
    for i in range(n):
        if i < slow:
            jobs.append(PlannedJob(i, "slow", {"seconds": SLOW_SECONDS, "i": i}))
        elif i < fanouts:  # a parent of FANOUT_CHILDREN children and a continuation summing them
            jobs.append(PlannedJob(i, "fanout", {"n": FANOUT_CHILDREN}))
        else:
            jobs.append(_planned(i, rng, seed, sink_url))
    for job in rng.sample(jobs[slow:], k=max(1, n * 3 // 100)):
        if job.delay_s == 0:
            job.duplicate = True
    return Plan(jobs)


def _planned(i: int, rng: random.Random, seed: int, sink_url: str) -> PlannedJob:
    job = _rolled(i, rng, seed, sink_url)
    if job.queue == "flaky":
        job.expect_dead = failing_attempts(job.payload) is None or \
            (failing_attempts(job.payload) or 0) >= job.max_attempts
    return job


def _rolled(i: int, rng: random.Random, seed: int, sink_url: str) -> PlannedJob:
    """One plain job of the mix, by a roll of ``rng``."""
    roll = rng.random()
    if roll < 0.45:
        job = PlannedJob(i, "echo", {"i": i, "text": f"hello {i}"})
        if rng.random() < 0.10:
            job.delay_s = rng.randint(1, 4)
    elif roll < 0.50:  # the second worker function's queue (sluice_dev.examples_team, TEAM_WORKER)
        job = PlannedJob(i, "word-count", {"i": i, "text": f"job number {i} of seed {seed}"})
    elif roll < 0.65:
        job = PlannedJob(i, "hash", {"data": f"demo-{seed}-{i}", "rounds": 500})
    elif roll < 0.73:
        job = PlannedJob(i, "ledger", {"account": f"acct-{i % 25}", "amount": i % 100})
    elif roll < 0.78:
        job = PlannedJob(i, "notify", {"url": f"{sink_url}/demo", "message": f"job {i}"})
    elif roll < 0.98:
        payload: dict[str, Any] = {"i": i, "seed": seed}
        job = PlannedJob(i, "flaky", payload)
    else:
        job = PlannedJob(i, "flaky", {"i": i, "always_fail": True}, max_attempts=2)
    return job


@dataclass
class SendReport:
    accepted: int = 0
    duplicates_sent: int = 0
    duplicates_suppressed: int = 0  # the repeat returned the original job id: no second job
    errors: list[str] = field(default_factory=list)
    started: float = 0.0
    finished: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, n: int) -> None:
        with self.lock:
            self.accepted += n


def _request(job: PlannedJob) -> dict[str, Any]:
    return {"payload": job.payload, "delay_seconds": job.delay_s, "max_attempts": job.max_attempts,
            "lease_seconds": DEMO_LEASE_S}


def send(p: Plan, gateway_url: str, report: SendReport, *, threads: int = 4) -> None:
    """Enqueue the plan: batches of up to 100 per queue, duplicates one by one, twice."""
    report.started = report.started or time.time()
    local = threading.local()

    def client() -> Client:
        if not hasattr(local, "client"):
            local.client = Client(gateway_url, timeout_s=30, max_attempts=8)
        c: Client = local.client
        return c

    def batch(jobs: Sequence[PlannedJob]) -> None:
        sent = time.time()
        try:
            result = client().enqueue_batch(jobs[0].queue, [_request(j) for j in jobs])
        except Exception as exc:  # reported, and the invariants check counts what was accepted
            report.errors.append(f"batch of {len(jobs)} on {jobs[0].queue}: {exc}")
            return
        for job, accepted in zip(jobs, result.jobs, strict=True):
            job.job_id, job.sent_at = accepted.job_id, sent
        report.add(len(jobs))

    def twice(job: PlannedJob) -> None:
        key = f"demo-{job.index}-{time.time_ns()}"
        sent = time.time()
        try:
            first = client().enqueue(job.queue, job.payload, delay_seconds=job.delay_s,
                                     max_attempts=job.max_attempts, lease_seconds=DEMO_LEASE_S,
                                     idempotency_key=key)
            job.job_id, job.sent_at = first.job_id, sent
            report.add(1)
            again = client().enqueue(job.queue, job.payload, delay_seconds=job.delay_s,
                                     max_attempts=job.max_attempts, lease_seconds=DEMO_LEASE_S,
                                     idempotency_key=key)
        except Exception as exc:
            report.errors.append(f"keyed enqueue of job {job.index}: {exc}")
            return
        with report.lock:
            report.duplicates_sent += 1
            if again.job_id == first.job_id:
                report.duplicates_suppressed += 1
            else:
                report.accepted += 1  # a second job was created: the invariants will count it
                report.errors.append(f"duplicate of job {job.index} created a second job {again.job_id}")

    todo = [j for j in p.jobs if j.job_id is None]  # skip what ``send_one`` already sent
    singles = [j for j in todo if j.duplicate]
    by_queue: dict[str, list[PlannedJob]] = {}
    for j in todo:
        if not j.duplicate:
            by_queue.setdefault(j.queue, []).append(j)
    chunks = [q[i:i + BATCH] for q in by_queue.values() for i in range(0, len(q), BATCH)]
    chunks.sort(key=lambda c: c[0].index)  # slow jobs first: they take longest
    with ThreadPoolExecutor(threads, thread_name_prefix="sluice-demo-send") as pool:
        futures = [pool.submit(batch, c) for c in chunks]
        futures += [pool.submit(twice, j) for j in singles]
        for f in futures:
            f.result()
    report.finished = time.time()


def send_one(job: PlannedJob, gateway_url: str, report: SendReport) -> None:
    """Enqueue one job on its own, ahead of the rest (the demo's freeze target)."""
    job.sent_at = time.time()
    report.started = report.started or job.sent_at
    try:
        accepted = Client(gateway_url, timeout_s=30, max_attempts=8).enqueue(
            job.queue, job.payload, delay_seconds=job.delay_s, max_attempts=job.max_attempts,
            lease_seconds=DEMO_LEASE_S)
    except Exception as exc:
        report.errors.append(f"enqueue of job {job.index}: {exc}")
        return
    job.job_id = accepted.job_id
    report.add(1)
