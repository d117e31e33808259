"""``ctx.http``: a handler's HTTP calls, each carrying its attempt's fencing headers.

A holder that lost its lease without noticing (a GC pause, a frozen VM) must not change a
service any more than a table. Every call through ``ctx.http`` carries the job id, this attempt's
fencing token and, when the handler names one, the resource it acts on (``core.fencing``); a
service running the fence middleware (``sluice_fence``) refuses a token older than the newest it
has seen for the job with 409, and the call raises ``StaleToken``, as a ``FencedTable`` write
does: the runtime ends the attempt as lost, nothing of it is written.

The helper checks nothing locally (not ``ctx.lease_lost`` either): the service is the authority,
and a local check would only race the heartbeat. Light: urllib3 (botocore's own dependency, so in
the layer already), one pool of keep-alive connections per process, shared by every job; no
retries (the handler decides; a retry carries the same token and idempotency key) and no
redirects (one would carry the job's headers to wherever it points).
"""

from __future__ import annotations

import json as jsonlib
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from sluice.core.bus import EventBus, FencedCall, timed
from sluice.core.errors import BackendUnavailable, InvalidInput
from sluice.core.fencing import FENCE_HEADERS, IDEMPOTENCY_HEADER, fence_headers, stale_of

if TYPE_CHECKING:
    import urllib3

POOL_SIZE = 16  # connections kept per host: a worker runs up to SLUICE_WORKER_CONCURRENCY jobs at once
_pool: urllib3.PoolManager | None = None
_pool_lock = threading.Lock()
_RESERVED = frozenset(h.lower() for h in (*FENCE_HEADERS, IDEMPOTENCY_HEADER))


def pool() -> urllib3.PoolManager:
    """The process's one pool (built on the first call: a worker that makes none never imports
    urllib3), kept for the life of the process, as a Lambda container is reused."""
    global _pool
    with _pool_lock:
        if _pool is None:
            import urllib3

            _pool = urllib3.PoolManager(maxsize=POOL_SIZE, retries=False)
        return _pool


class FencedHttp:
    """The calls of one attempt (``job_id``, fencing ``token``), reported on ``events`` (``FencedCall``)."""

    def __init__(self, job_id: str, token: int, events: EventBus,
                 trace: Callable[[], str | None] | None = None) -> None:
        fence_headers(job_id, token)  # refuses what no header may carry, before any call
        self.job_id, self.token, self._events = job_id, token, events
        self._trace = trace  # ctx.traceparent: sent as the traceparent header unless the handler sets one

    def request(self, method: str, url: str, *, json: Any = None, body: bytes | str | None = None,
                headers: Mapping[str, str] | None = None, resource: str | None = None,
                timeout: float = 10.0) -> urllib3.BaseHTTPResponse:
        """``method url`` with this attempt's fencing headers (and ``resource``'s, if given), ``json``
        (encoded, with its content type) or ``body``. Returns the response, read whole, whatever
        its status, except the fence's refusal: ``StaleToken``. No answer: ``BackendUnavailable``."""
        method = method.upper()
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidInput(f"ctx.http calls http(s) URLs only, not {url[:80]!r}")
        if json is not None and body is not None:
            raise InvalidInput("give json or body, not both")
        sent = dict(headers or {})
        if _RESERVED.intersection(h.lower() for h in sent):
            raise InvalidInput(f"ctx.http sets {', '.join((*FENCE_HEADERS, IDEMPOTENCY_HEADER))} itself")
        sent.update(fence_headers(self.job_id, self.token, resource))
        traceparent = None if self._trace is None else self._trace()
        if traceparent is not None and not any(h.lower() == "traceparent" for h in sent):
            sent["traceparent"] = traceparent  # the service's spans join the job's trace
        if json is not None:
            body = jsonlib.dumps(json, separators=(",", ":"))
            sent.setdefault("Content-Type", "application/json")
        if isinstance(body, str):
            body = body.encode("utf-8")  # as urllib3 2 does; urllib3 1.26 would send latin-1
        if not 0 < timeout <= 900:
            raise InvalidInput(f"timeout must be in (0, 900] seconds, got {timeout!r}")
        operation = f"http {method} {parts.hostname}"

        def call() -> urllib3.BaseHTTPResponse:
            import urllib3

            try:
                response = pool().request(method, url, body=body, headers=sent, timeout=timeout,
                                          retries=False, redirect=False)
            except urllib3.exceptions.HTTPError as exc:
                raise BackendUnavailable(f"{operation}: {exc}") from exc
            stale = stale_of(response.status, response.data, job_id=self.job_id, mine=self.token,
                             operation=operation)
            if stale is not None:
                raise stale
            return response

        return timed(self._events, call, FencedCall,
                     {"job": self.job_id, "token": self.token, "method": method, "host": parts.netloc},
                     details=lambda r: {"status": r.status})

    async def arequest(self, method: str, url: str, **options: Any) -> urllib3.BaseHTTPResponse:
        """``request``, awaitable (on the loop's default thread executor, as the context's others)."""
        import asyncio

        return await asyncio.to_thread(lambda: self.request(method, url, **options))
