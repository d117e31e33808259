"""Handlers of the upgrade test (tests/stack/test_upgrade.py), importable by the code at c44b81f and by
today's: they use only ``sluice``'s top-level API (``Worker``, ``Job``, ``JobContext``, ``LeaseLost``),
which both versions export.

A job whose payload names a ``gate`` (a file path) waits for that file before it ends: the test holds
jobs running across the upgrade with it, and opens it once the new functions run.
"""

from __future__ import annotations

import os
from typing import Any

from sluice import Job, JobContext, LeaseLost, Worker

app = Worker()


def _payload(job: Job) -> dict[str, Any]:
    return job.payload if isinstance(job.payload, dict) else {}


def _wait_for_gate(job: Job, ctx: JobContext) -> None:
    gate = _payload(job).get("gate")
    while gate and not os.path.exists(gate):
        if ctx.lease_lost.wait(0.1):
            raise LeaseLost("the lease was lost while waiting for the gate")


@app.handler("up-echo")
def echo(job: Job, ctx: JobContext) -> dict[str, Any]:
    return {"echo": job.payload, "attempt": job.attempt}


@app.handler("up-gated", timeout_s=120)
def gated(job: Job, ctx: JobContext) -> dict[str, Any]:
    _wait_for_gate(job, ctx)
    return {"done": True, "attempt": job.attempt}


@app.handler("up-fail")
def fail_until_gate(job: Job, ctx: JobContext) -> dict[str, Any]:
    """Fails while the gate is shut: enqueued with one attempt, it dies; redriven later, it succeeds."""
    gate = _payload(job).get("gate")
    if not gate or not os.path.exists(gate):
        raise RuntimeError("up-fail: the gate is shut")
    return {"redriven": True, "attempt": job.attempt}


@app.handler("up-parent")
def parent(job: Job, ctx: JobContext) -> dict[str, Any]:
    """Two children (the second, on a queue of its own, waits for the gate), then a continuation
    summing them."""
    gate = _payload(job).get("gate")
    children = [("up-child", {"i": 1}, "c1"), ("up-child-gated", {"i": 2, "gate": gate}, "c2")]
    family = ctx.enqueue_many(children, then=("up-sum", {"of": 2}))
    return {"children": len(family.job_ids), "continuation": family.continuation}


@app.handler("up-child", timeout_s=120)
@app.handler("up-child-gated", timeout_s=120)
def child(job: Job, ctx: JobContext) -> int:
    _wait_for_gate(job, ctx)
    return int(_payload(job).get("i", 0)) * 10


@app.handler("up-sum")
def sum_children(job: Job, ctx: JobContext) -> dict[str, Any]:
    children = ctx.children()
    return {"sum": sum(c.result for c in children if isinstance(c.result, int)),
            "states": sorted(c.status.value for c in children)}
