"""The tenant nemesis (issue 28): one tenant holds its own queue every way it can, the others run.

While the ordinary workload runs on ``chaos`` (``chaos.workload``), one tenant owns the queue
``chaos-tenant`` and does everything that used to stall the relay for every queue:

- **pause**: at the start its queue is paused (``sluice queue pause``), recorded as an ``operator``
  pause line, so the checker's pause rule (``chaos.rules``) holds it too: nothing of it is pushed
  while paused;
- **flood**: ``flood`` jobs as fast as the gateway's use case takes them (at least ten times the
  relay's old hold limit of 5,000 records per partition in a real run), in batches of 100;
- **far**: ``far`` jobs delayed by the longest delay there is (7 days), which it cancels at the end,
  recorded as the operator's cancels (a cancelled job is owed nothing more);
- **rate**: halfway through the window (``rate_at``) the pause becomes a rate limit of ``rate_per_s``;
- **budget**: where the deployment has byte budgets (``QueueConfig.max_bytes``), its queue's is set
  to ``budget_bytes`` and a share of the flood carries ``pad_bytes`` of padding, so it is over
  its budget as well.

``release`` lifts every hold (resume, no rate, no budget of its own) and cancels the far jobs.
The run waits for the others' jobs *before* it releases the tenant (``others_drained_while_held``):
if the tenant's held records still stood in the others' way, they would never finish.

``latency`` is what the tenant must not change: the others' time from an accepted enqueue to
their first accepted result, p50 and p99. ``benchmarks/bench_tenant.py`` compares it with a run
without the tenant in the same session.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from sluice_dev.chaos.app import TENANT
from sluice_dev.chaos.history import History, digest

__all__ = ["TENANT", "Tenant", "TenantPlan", "latency", "tenant_payload"]

FAR_S = 7 * 24 * 3600  # the longest delay a job may have (sluice.core.wire.MAX_DELAY_SECONDS)
FIRST_INDEX = 10_000_000  # the tenant's workload indices: apart from the others'


@dataclass(frozen=True, slots=True)
class TenantPlan:
    flood: int = 50_000
    far: int = 100
    rate_per_s: float = 20.0
    budget_bytes: int = 256 * 1024
    pad_bytes: int = 16 * 1024
    padded_every: int = 10  # every tenth flood job carries the padding (the budget act)
    rate_at: float | None = 0.5  # the share of the window after which the pause becomes a rate limit;
    # None: paused to the end (then the others' drain while it holds proves nothing waits behind it)

    def __post_init__(self) -> None:
        if self.flood < 0 or self.far < 0 or self.rate_per_s <= 0 or self.padded_every < 1:
            raise ValueError("tenant plan: flood and far >= 0, rate_per_s > 0, padded_every >= 1")


def tenant_payload(seed: int, i: int, pad_bytes: int) -> dict[str, Any]:
    from sluice_dev.chaos.workload import payload

    p = payload(seed, i)
    if pad_bytes:
        p["pad"] = "x" * pad_bytes
    return p


class Tenant:
    """Carries a ``TenantPlan`` out through the gateway's use case (``api``, its own) and the
    queue knobs (``engine``), recording each enqueue, pause, resume and cancel in the history."""

    def __init__(self, plan: TenantPlan, api: Any, engine: Any, history: History, seed: int, *,
                 mint_key: bytes, window_s: float) -> None:
        self.plan, self.api, self.engine, self.history = plan, api, engine, history
        self.seed, self.mint_key, self.window_s = seed, mint_key, window_s
        self.accepted = 0
        self.far_ids: list[str] = []
        self.budgets = False  # the deployment has byte budgets (set when the tenant uses them)
        self._ids: deque[str] = deque()
        self._lock = threading.Lock()
        self._paused = False
        api.new_id = lambda _now_ms: self._ids.popleft()  # the use case's id hook, as chaos.workload's

    # -- the acts ------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        from sluice.core import knobs

        started = time.monotonic()
        self._knob("pause", lambda: knobs.pause(self.engine, TENANT))
        self.budgets = self._set_budget(self.plan.budget_bytes)
        self._enqueue_far(stop)
        index = FIRST_INDEX + self.plan.far
        for first in range(0, self.plan.flood, 100):
            if stop.is_set():
                return
            n = min(100, self.plan.flood - first)
            pad = self.plan.pad_bytes if self.budgets and (first // 100) % self.plan.padded_every == 0 else 0
            self._enqueue(list(range(index + first, index + first + n)), pad, delay_s=0, stop=stop)
        # halfway: the pause becomes a rate limit, the records still held behind it
        if self.plan.rate_at is None:
            return
        if not stop.wait(max(0.0, started + self.window_s * self.plan.rate_at - time.monotonic())):
            self._knob("rate", lambda: knobs.set_rate(self.engine, TENANT, self.plan.rate_per_s))
            self._knob("resume", lambda: knobs.resume(self.engine, TENANT))

    def _enqueue_far(self, stop: threading.Event) -> None:
        for first in range(0, self.plan.far, 100):
            n = min(100, self.plan.far - first)
            ids = self._enqueue(list(range(FIRST_INDEX + first, FIRST_INDEX + first + n)), 0,
                                delay_s=FAR_S, stop=stop)
            self.far_ids.extend(ids)

    def _enqueue(self, indices: list[int], pad: int, *, delay_s: int, stop: threading.Event) -> list[str]:
        from sluice.core import ids as job_ids
        from sluice.core.clock import wall_ms
        from sluice.core.errors import SluiceError
        from sluice.core.wire import BatchRequest, EnqueueRequest
        from sluice_dev.chaos.families import expected_result
        from sluice_dev.chaos.workload import MAX_ATTEMPTS

        while not stop.is_set():
            now = wall_ms()
            names = [job_ids.mint(now, TENANT, self.mint_key) for _ in indices]
            payloads = [tenant_payload(self.seed, i, pad) for i in indices]
            request = BatchRequest(jobs=[EnqueueRequest(payload=p, max_attempts=MAX_ATTEMPTS,
                                                        delay_seconds=delay_s) for p in payloads])
            self._ids.clear()
            self._ids.extend(names)
            t0 = time.time()
            try:
                self.api.enqueue_batch(TENANT, request)
                outcome = "ok"
            except SluiceError:  # unknown outcome (Kafka did not answer): these ids stay named
                outcome = "info"
            t1 = time.time()
            for i, jid, p in zip(indices, names, payloads, strict=True):
                self.history.emit("enqueue", job=jid, i=i, expect=digest(expected_result(p)), outcome=outcome,
                                  t0=t0, t1=t1, queue=TENANT, delayed=delay_s > 0)
            if outcome == "ok":
                self.accepted += len(names)
                return names
            stop.wait(0.5)  # the same payloads again, as new jobs, once Kafka is back
        return []

    def _set_budget(self, budget: int) -> bool:
        """The queue's byte budget, if the deployment has budgets (``QueueConfig.max_bytes``)."""
        from sluice.core.models import QueueConfig

        if "max_bytes" not in QueueConfig.model_fields:
            return False
        self._knob("budget", lambda: self.engine.set_config(TENANT, max_bytes=budget), bytes=budget)
        return True

    def _knob(self, kind: str, call: Any, **fields: Any) -> None:
        """One knob turn, recorded as the operator's (``pause``/``resume`` feed the pause rule);
        retried until it lands: a tenant's hold the run does not know about would wreck its checks."""
        from sluice.core.errors import SluiceError

        with self._lock:
            if kind == "pause":
                self._paused = True  # even if the call fails: it may have landed
            for _ in range(60):
                t0 = time.time()
                try:
                    call()
                except SluiceError as exc:
                    self.history.emit("operator", kind=kind, outcome="error", queue=TENANT, t0=t0,
                                      t1=time.time(), error=str(exc)[:200], **fields)
                    time.sleep(0.5)
                    continue
                self.history.emit("operator", kind=kind, outcome="ok", queue=TENANT, t0=t0, t1=time.time(),
                                  **fields)
                if kind == "resume":
                    self._paused = False
                return
            raise RuntimeError(f"the tenant nemesis could not {kind} its queue for 30 s")

    # -- the end -------------------------------------------------------------------------------

    def release(self) -> None:
        """Lift every hold and cancel the far jobs: the run then waits for all of the tenant's."""
        from sluice.core import knobs

        self._knob("rate", lambda: knobs.set_rate(self.engine, TENANT, 0, 0))
        if self.budgets:
            self._set_budget(0)
        if self._paused:
            self._knob("resume", lambda: knobs.resume(self.engine, TENANT))
        for job in self.far_ids:
            self._cancel(job)

    def _cancel(self, job: str) -> None:
        from sluice.core.errors import AlreadyFinished, JobNotFound, SluiceError

        t0 = time.time()
        for _ in range(20):
            try:
                answer = self.api.cancel(job)
            except (AlreadyFinished, JobNotFound) as exc:
                outcome = "finished" if isinstance(exc, AlreadyFinished) else "not_found"
                self.history.emit("operator", kind="cancel", outcome=outcome, job=job, target="tenant",
                                  t0=t0, t1=time.time())
                if outcome == "finished":
                    return
                time.sleep(0.5)  # not recorded by the relay yet: ask again (parked jobs are recorded)
                t0 = time.time()
                continue
            except SluiceError as exc:
                self.history.emit("operator", kind="cancel", outcome="error", job=job, target="tenant",
                                  t0=t0, t1=time.time(), error=str(exc)[:200])
                time.sleep(0.5)
                t0 = time.time()
                continue
            self.history.emit("operator", kind="cancel", outcome=str(answer.status), job=job, target="tenant",
                              t0=t0, t1=time.time())
            return


def latency(events: list[dict[str, Any]], *, queue: str | None = None) -> dict[str, float | int]:
    """The others' time (ms) from an accepted enqueue to their first accepted result: p50, p99, n;
    and, for the jobs that have one, to their first lease (``lease_p50``, ``lease_p99``): what the
    gateway, Kafka, the relay and the wait for a worker took, the rest being the handler's run and
    its write.

    ``queue`` None: every job enqueued without a ``queue`` field (the ordinary workload's)."""
    from sluice_dev.chaos.checker import ACCEPTED_WRITES

    accepted: dict[str, float] = {}
    first_write: dict[str, float] = {}
    first_lease: dict[str, float] = {}
    for e in events:
        job = e.get("job")
        if not job:
            continue
        op = e.get("op")
        if op == "enqueue" and e.get("outcome") == "ok" and e.get("queue") == queue:
            accepted[str(job)] = float(e["t1"])
        elif op == "write" and e.get("outcome") in ACCEPTED_WRITES:
            first_write.setdefault(str(job), float(e.get("t1", 0)))
        elif op == "lease":
            first_lease.setdefault(str(job), float(e.get("t1", 0)))
    took = sorted((first_write[j] - t) * 1000 for j, t in accepted.items() if j in first_write)
    if not took:
        return {"p50": 0.0, "p99": 0.0, "n": 0}
    out: dict[str, float | int] = {"p50": _ms(took, 0.50), "p99": _ms(took, 0.99), "n": len(took)}
    leased = sorted((first_lease[j] - t) * 1000 for j, t in accepted.items() if j in first_lease)
    if leased:
        out |= {"lease_p50": _ms(leased, 0.50), "lease_p99": _ms(leased, 0.99)}
    return out


def _ms(ordered: list[float], q: float) -> float:
    return round(_quantile(ordered, q), 1)


def _quantile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
