"""``AsyncClient``: ``sluice.Client``'s methods, awaitable, for an asyncio web server.

httpx is not among the client's dependencies (urllib3 is, through botocore), so this is asyncio
over the synchronous client: each call runs ``Client``'s method, retries and backoff included, in
the client's own thread pool (``max_connections`` threads, as many as its pool keeps connections),
and the event loop only awaits it. The same requests, errors, idempotency keys and pooled
keep-alive connections as ``Client``; a loop that awaits it is never blocked by I/O. A call whose
task is cancelled stops being awaited at once, but its request, already sent, still runs to its
end in its thread (as a synchronous call would have). ``wait`` polls with ``asyncio.sleep``, so a
long wait holds no thread.

Each call runs in a copy of the caller's ``contextvars`` context, so what the caller's context
carries (a current span, for one) is seen by the request as if it were sent from the loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, Self, TypeVar

from sluice.client import Client, ClientClosed, Poll
from sluice.core import wire
from sluice.core.models import FINAL_STATES

P = ParamSpec("P")
R = TypeVar("R")


def _awaitable(method: Callable[Concatenate[Client, P], R]
               ) -> Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, R]]:
    """``Client.<method>`` as a coroutine method of ``AsyncClient``, with the same signature."""

    @functools.wraps(method)
    async def call(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await self._run(functools.partial(method, self.sync, *args, **kwargs))

    return call


class AsyncClient:
    """``AsyncClient(api_url, **options)``: the options are ``Client``'s. Close it with
    ``await client.aclose()``, or use ``async with AsyncClient(...) as client``."""

    def __init__(self, api_url: str, *, max_connections: int = 10, **options: Any) -> None:
        self.sync = Client(api_url, max_connections=max_connections, **options)
        self._threads = ThreadPoolExecutor(max_workers=max_connections, thread_name_prefix="sluice-client")

    @classmethod
    def over(cls, client: Client, *, max_threads: int = 10) -> AsyncClient:
        """An AsyncClient sending through ``client`` (its transport, its settings); closing one
        closes both."""
        self = cls.__new__(cls)
        self.sync = client
        self._threads = ThreadPoolExecutor(max_workers=max_threads, thread_name_prefix="sluice-client")
        return self

    @property
    def closed(self) -> bool:
        return self.sync.closed

    async def _run(self, call: Callable[[], R]) -> R:
        if self.sync.closed:  # before the pool: a closed pool would say RuntimeError of its own
            raise ClientClosed("this client was closed")
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(self._threads, context.run, call)

    async def aclose(self) -> None:
        """Close the pooled connections and the threads; any later call raises ``ClientClosed``.
        Calls still running finish in their threads; their connections are then closed, not pooled."""
        self.sync.close()
        self._threads.shutdown(wait=False, cancel_futures=True)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    async def wait(self, job_id: str, *, timeout_s: float = 30.0, poll_s: float = 0.1,
                   clock: Callable[[], float] = time.monotonic) -> wire.JobView:
        """As ``Client.wait``, sleeping on the loop between looks."""
        poll = Poll(job_id, timeout_s, poll_s, clock)
        while True:
            view = await self.status(job_id)
            if view.status in FINAL_STATES:
                return view
            await asyncio.sleep(poll.next_delay(view.status))

    enqueue = _awaitable(Client.enqueue)
    enqueue_batch = _awaitable(Client.enqueue_batch)
    status = _awaitable(Client.status)
    cancel = _awaitable(Client.cancel)
    queue_stats = _awaitable(Client.queue_stats)
    pause = _awaitable(Client.pause)
    resume = _awaitable(Client.resume)
    set_rate = _awaitable(Client.set_rate)
    set_max_in_flight = _awaitable(Client.set_max_in_flight)
    set_watermarks = _awaitable(Client.set_watermarks)
    set_caps = _awaitable(Client.set_caps)
    set_sensitive = _awaitable(Client.set_sensitive)
    queue_rows = _awaitable(Client.queue_rows)
    queue_row = _awaitable(Client.queue_row)
    dead_letters = _awaitable(Client.dead_letters)
    list_jobs = _awaitable(Client.list_jobs)
    timeline = _awaitable(Client.timeline)
    depth_history = _awaitable(Client.depth_history)
    redrive = _awaitable(Client.redrive)
    purge_dead = _awaitable(Client.purge_dead)
    schedules = _awaitable(Client.schedules)
    create_schedule = _awaitable(Client.create_schedule)
    get_schedule = _awaitable(Client.get_schedule)
    pause_schedule = _awaitable(Client.pause_schedule)
    resume_schedule = _awaitable(Client.resume_schedule)
    delete_schedule = _awaitable(Client.delete_schedule)
