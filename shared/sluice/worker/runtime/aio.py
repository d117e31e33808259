"""The event loop that ``async def`` handlers run on: one per process, on a thread of its own.

A handler registered as ``async def`` returns a coroutine; the runtime awaits it here and stores
what it returns (before, the coroutine object itself reached the result write, and every attempt
failed with "Object of type coroutine is not JSON serializable"). The loop is started on the first
awaitable and kept for the life of the process, so a worker Lambda's container reuses it across
invocations, and an async client a handlers module keeps (an HTTP session bound to a loop) stays
usable: no ``asyncio.run`` per job.

Jobs of one drain that run at once (``concurrency`` > 1) share the loop: their coroutines
interleave at each ``await``. A handler that blocks the loop (``time.sleep`` in an ``async def``)
stalls the other coroutines on it, never the leases: renewals run on the heartbeat's own thread
(``runtime.heartbeat``), and the hard timeout is watched from the job's thread (``runtime.invoke``).
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # asyncio is imported by the first async job: a sync worker's cold start skips it
    import asyncio
    import concurrent.futures

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def loop() -> asyncio.AbstractEventLoop:
    """The process's handler loop, started on first use (a daemon thread: it never holds up exit)."""
    import asyncio

    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            ready = threading.Event()
            new = asyncio.new_event_loop()

            def serve() -> None:
                asyncio.set_event_loop(new)
                new.call_soon(ready.set)
                new.run_forever()

            threading.Thread(target=serve, name="sluice-loop", daemon=True).start()
            ready.wait()
            _loop = new
        return _loop


@dataclass(frozen=True, slots=True)
class Submitted:
    """An awaitable scheduled on the handler loop: ``future.cancel()`` cancels its task (the future
    is cancelled at once; ``ended`` is set once the task itself has ended, on ``loop``)."""

    future: concurrent.futures.Future[Any]
    loop: asyncio.AbstractEventLoop
    ended: threading.Event


def submit(awaitable: Awaitable[Any]) -> Submitted:
    """Schedule ``awaitable`` on the handler loop."""
    import asyncio

    ended = threading.Event()

    async def wrapped() -> Any:
        try:
            return await awaitable
        finally:
            ended.set()

    running = loop()
    return Submitted(asyncio.run_coroutine_threadsafe(wrapped(), running), running, ended)


def retire(stuck: asyncio.AbstractEventLoop) -> None:
    """Start the next async job on a new loop: ``stuck`` is held by a handler that ran past its hard
    timeout and did not stop at the cancel (it never awaits: a CPU loop, a blocking call). Like a
    sync handler's thread past its timeout it runs on; the jobs already on that loop finish there
    when it lets go, and the loop's thread then ends. Without this, one such handler would time out
    every async job after it in the process (a worker Lambda's container lives for hours)."""
    import asyncio

    global _loop
    with _lock:
        if _loop is stuck:
            _loop = None

    async def stop_when_idle() -> None:
        while len(asyncio.all_tasks()) > 1:
            await asyncio.sleep(1)
        asyncio.get_running_loop().stop()

    asyncio.run_coroutine_threadsafe(stop_when_idle(), stuck)
