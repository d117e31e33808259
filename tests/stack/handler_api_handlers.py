"""Handlers for tests/stack/test_handler_api_stack.py: sync and ``async def`` handlers in one worker app."""

import asyncio
import time

import sluice

app = sluice.Worker()


@app.handler("sync-echo")
def sync_echo(job: sluice.Job, ctx: sluice.JobContext) -> dict:
    return {"echo": job.payload, "kind": "sync"}


@app.handler("async-echo")
async def async_echo(job: sluice.Job, ctx: sluice.JobContext) -> dict:
    await asyncio.sleep(0.01)
    return {"echo": job.payload, "kind": "async"}


@app.handler("async-block", timeout_s=20)
async def async_block(job: sluice.Job, ctx: sluice.JobContext) -> dict:
    """Blocks its loop (``time.sleep`` in an ``async def``) for longer than its lease."""
    before = ctx.lease_deadline_ms
    time.sleep(job.payload["sleep"])
    return {"extended_ms": ctx.lease_deadline_ms - before, "lost": ctx.lease_lost.is_set()}


@app.handler("async-parent")
async def async_parent(job: sluice.Job, ctx: sluice.JobContext) -> dict:
    child = await ctx.aenqueue("sync-echo", {"from": job.job_id}, key="child")
    await ctx.aprogress(1.0, "child started")
    return {"child": child}


class Unrecoverable(Exception):
    """An error the handler's policy ends at once."""


@app.handler("policy-flaky", retry=sluice.RetryPolicy(max_attempts=7, backoff=0, fail_on=(Unrecoverable,)))
def policy_flaky(job: sluice.Job, ctx: sluice.JobContext) -> dict:
    """Fails until its attempt ``ok_at``; raises ``Unrecoverable`` when told to."""
    if job.payload.get("unrecoverable"):
        raise Unrecoverable("the record is gone")
    if ctx.attempt < job.payload["ok_at"]:
        raise ConnectionError(f"attempt {ctx.attempt} of {ctx.max_attempts}")
    return {"attempt": ctx.attempt, "max_attempts": ctx.max_attempts}
