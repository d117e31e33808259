"""The per-caller limit at the public API's door (issue 27, item 5; docs/security.md, Per-caller throttle).

IAM mode had no limit of its own per caller: the stage throttle, the gateway's concurrency and
Kafka's partitions are shared, so one caller at a thousand requests a second of 256 KB bodies
starved every other. ``Throttle.check`` runs in the API entry once the caller is verified and
before its body is parsed: one request and its body's bytes from the caller's token buckets
(``sluice.core.throttle``), shared by every container through Redis (``throttle.lua``). Over
the limit: ``CallerThrottled`` (429 with Retry-After), and nothing is written.

**When Redis cannot be reached** the gateway neither refuses everyone (Redis is not on the
enqueue path otherwise: a Redis outage must not become an API outage, docs/redis-loss.md) nor
drops the limit: each container keeps the same buckets in memory for ``local_for_ms`` and then
tries Redis again. A caller is then held to its limit per container, at most the gateway's
reserved concurrency times its limit, under the stage throttle still.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from sluice.core import throttle
from sluice.core.caller import Caller
from sluice.core.clock import wall_ms
from sluice.core.errors import CallerThrottled, SluiceError
from sluice.core.lazy import Lazy, resolve
from sluice.core.ports import CallerThrottle
from sluice.core.throttle import Buckets, CallerLimit, CallerLimits, Verdict

log = logging.getLogger(__name__)

MAX_LOCAL_CALLERS = 10_000  # the fallback's buckets per container; the oldest half goes beyond


class Throttle:
    def __init__(self, shared: CallerThrottle | Lazy[CallerThrottle], limits: CallerLimits, *,
                 clock: Callable[[], int] = wall_ms, local_for_ms: int = 5_000) -> None:
        self._shared, self.limits, self.clock, self.local_for_ms = shared, limits, clock, local_for_ms
        self._local: dict[str, Buckets | None] = {}
        self._local_until = 0  # wall ms until which this container keeps its own buckets
        self._lock = threading.Lock()

    @property
    def off(self) -> bool:
        return self.limits.off

    def check(self, caller: Caller, size: int) -> None:
        """Raise ``CallerThrottled`` if ``caller`` may not send a request of ``size`` body bytes now."""
        if self.limits.off:
            return
        api_key = "" if caller.principal else caller.idempotency_scope  # API keys: the key id
        limit = self.limits.for_caller(caller.principal, api_key)
        if limit.off:
            return
        who = throttle.identity(caller.principal, api_key)
        verdict = self._take(who, limit, size)
        if not verdict.allowed:
            raise CallerThrottled(f"{who} sent more than its limit ({_describe(limit)}); nothing was "
                                  f"written; retry after {verdict.retry_after_s} s",
                                  retry_after_s=verdict.retry_after_s, caller=who)

    def _take(self, who: str, limit: CallerLimit, size: int) -> Verdict:
        now = self.clock()
        if now >= self._local_until:
            try:
                return resolve(self._shared).take(who, limit, size)
            except SluiceError as exc:  # BackendUnavailable, or a script or permission error
                log.warning("the callers' buckets in Redis cannot be used (%s); each container keeps "
                            "its own for %d ms", exc, self.local_for_ms)
                self._local_until = now + self.local_for_ms
        with self._lock:
            if len(self._local) >= MAX_LOCAL_CALLERS:
                for key in list(self._local)[:MAX_LOCAL_CALLERS // 2]:
                    del self._local[key]
            verdict, state = throttle.take(self._local.get(who), now, limit, size)
            self._local[who] = state
        return verdict


def _describe(limit: CallerLimit) -> str:
    parts = []
    if limit.rate_per_s > 0:
        parts.append(f"{limit.rate_per_s:g} requests/s, burst {limit.burst}")
    if limit.bytes_per_s > 0:
        parts.append(f"{limit.bytes_per_s} body bytes/s, burst {limit.byte_burst}")
    return "; ".join(parts)


def body_size(event: dict[str, object]) -> int:
    """The request body's bytes as the caller sent them (a base64 body decodes to 3/4 of its text)."""
    body = event.get("body")
    if not isinstance(body, str) or not body:
        return 0
    if event.get("isBase64Encoded"):
        return len(body) * 3 // 4
    return len(body.encode("utf-8")) if not body.isascii() else len(body)
