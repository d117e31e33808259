"""Run one handler call on its own thread and stop waiting at the hard timeout.

Python cannot kill a thread. A handler that overruns its timeout keeps running as
an abandoned daemon thread: the runtime records the attempt as failed, sets the
job's ``lease_lost`` event (a cooperative handler checks it and stops), stops
renewing the lease, and never writes whatever the handler eventually returns. Any
side effect it makes through ``ctx.fenced_table`` is refused once another worker
has been granted the job. A handler that must be stoppable should poll
``ctx.should_stop()``.

A handler that returns an awaitable (an ``async def``) is awaited on the process's handler
loop (``runtime.aio``), from this same job thread, under the same hard timeout; at the timeout its
task is cancelled too, which stops it at its next ``await``; one that does not stop at once holds
the loop (it never awaits), so the loop is retired and the next async job starts a new one.
"""

from __future__ import annotations

import inspect
import threading
import time
from dataclasses import dataclass
from typing import Any

from sluice.core.models import Job
from sluice.worker.runtime import aio
from sluice.worker.runtime.context import JobContext
from sluice.worker.runtime.options import Handler

CANCEL_GRACE_S = 0.2  # how long a cancelled async handler has to stop before its loop is retired


@dataclass(frozen=True, slots=True)
class Invocation:
    result: Any = None
    error: BaseException | None = None
    timed_out: bool = False
    duration_ms: float = 0.0


def invoke(fn: Handler, job: Job, ctx: JobContext, timeout_s: float) -> Invocation:
    done = threading.Event()
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            result = fn(job, ctx)
            if inspect.isawaitable(result):
                box["submitted"] = submitted = aio.submit(result)
                result = submitted.future.result()
            box["result"] = result
        except BaseException as exc:  # SystemExit in a handler is still a handler error
            box["error"] = exc
        finally:
            done.set()

    started = time.monotonic()
    thread = threading.Thread(target=target, name=f"sluice-job-{job.job_id}", daemon=True)
    thread.start()
    finished = done.wait(timeout=max(0.0, timeout_s))
    duration_ms = (time.monotonic() - started) * 1000
    if not finished:
        submitted: aio.Submitted | None = box.get("submitted")
        if submitted is not None:
            submitted.future.cancel()
            if not submitted.ended.wait(CANCEL_GRACE_S):  # the cancel did not stop it: it holds its loop
                aio.retire(submitted.loop)
        return Invocation(timed_out=True, duration_ms=duration_ms)
    return Invocation(result=box.get("result"), error=box.get("error"), duration_ms=duration_ms)
