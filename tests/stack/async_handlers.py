"""Handlers for tests/stack/test_async_stack.py: sync and ``async def`` handlers in one worker app."""

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
