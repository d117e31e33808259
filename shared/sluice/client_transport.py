"""How ``sluice.Client`` sends one HTTP request: the ``Transport`` port and its two adapters.

``PooledTransport`` (the default, issue 31) keeps connections alive in a urllib3 pool (urllib3
comes with botocore, which the client needs for SigV4 anyway): one TCP and TLS handshake per host
for a client's life instead of one per request. ``UrllibTransport`` is the standard library's
urllib, a new connection per request: what the client used before, kept for a caller that wants no
pool (and as the baseline the client benchmark measures against, benchmarks/bench_client.py).

A transport never retries and never follows a redirect (``Client._call`` decides what is safe to
send again), and it raises ``OSError`` (``ConnectionError``, ``TimeoutError``) when no response
arrived, whatever the library underneath raised.

urllib3 is imported when a ``PooledTransport`` is built, not with this module: importing
``sluice.client`` stays cheap for a process that never sends (issue 14, cold start).
"""

from __future__ import annotations

import os
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import urllib3


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int
    headers: Mapping[str, str]  # lower-case names
    body: bytes


class Transport(Protocol):
    def send(self, method: str, url: str, headers: Mapping[str, str], body: bytes | None,
             timeout: float) -> HttpResponse:
        """Raise OSError (ConnectionError, TimeoutError, ...) when no response arrived."""
        ...


class UrllibTransport:
    """urllib from the standard library: a new connection (and TLS handshake) for every request.
    ``context``: the TLS settings (default: the system's CAs, as urllib's own default)."""

    def __init__(self, context: ssl.SSLContext | None = None) -> None:
        self.context = context

    def send(self, method: str, url: str, headers: Mapping[str, str], body: bytes | None,
             timeout: float) -> HttpResponse:
        request = urllib.request.Request(url, data=body, method=method, headers=dict(headers))
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=self.context) as response:
                return HttpResponse(response.status, {k.lower(): v for k, v in response.headers.items()},
                                    response.read())
        except urllib.error.HTTPError as exc:
            with exc:
                return HttpResponse(exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read())
        except urllib.error.URLError as exc:
            reason = exc.reason
            raise reason if isinstance(reason, OSError) else ConnectionError(str(reason)) from exc

    def close(self) -> None:
        """Nothing is kept open."""


class PooledTransport:
    """Keep-alive connections in a urllib3 pool, ``max_connections`` per host, thread-safe.

    More threads than ``max_connections`` sending at once each get a connection of their own, which
    is closed rather than pooled after its request (the pool does not block). urllib3 checks that a
    pooled connection is still open before reusing it, so a connection the server closed while idle
    is replaced, not sent on. ``HTTP(S)_PROXY`` and ``NO_PROXY`` are honoured as urllib honours them.
    A process forked after connections were opened (a pre-forking web server that builds its client
    before the fork) starts with pools of its own: two processes writing requests into one socket
    would read each other's answers.
    ``ca_certs``: a CA bundle to verify the server with instead of the system's (a test's own CA).
    """

    def __init__(self, *, max_connections: int = 10, ca_certs: str | None = None) -> None:
        import urllib3

        self._urllib3 = urllib3
        self._options: dict[str, object] = {"maxsize": max_connections, "block": False, "retries": False}
        if ca_certs is not None:
            self._options["ca_certs"] = ca_certs
        self._proxies = urllib.request.getproxies()
        self._lock = threading.Lock()
        self._fresh_pools()
        self.closed = False

    def _fresh_pools(self) -> None:
        self._pid = os.getpid()
        self._direct = self._urllib3.PoolManager(**self._options)  # type: ignore[arg-type]
        self._proxied: dict[str, urllib3.ProxyManager] = {}

    def _manager(self, url: str) -> urllib3.PoolManager:
        if os.getpid() != self._pid:  # forked: the parent's sockets are the parent's (not closed here)
            with self._lock:
                if os.getpid() != self._pid:
                    self._fresh_pools()
        parts = urlsplit(url)
        proxy = self._proxies.get(parts.scheme)
        if proxy is None or urllib.request.proxy_bypass(parts.hostname or ""):
            return self._direct
        with self._lock:
            if proxy not in self._proxied:
                self._proxied[proxy] = self._urllib3.ProxyManager(proxy, **self._options)  # type: ignore[arg-type]
            return self._proxied[proxy]

    def send(self, method: str, url: str, headers: Mapping[str, str], body: bytes | None,
             timeout: float) -> HttpResponse:
        exceptions = self._urllib3.exceptions
        try:
            response = self._manager(url).request(
                method, url, body=body, headers=dict(headers), redirect=False, preload_content=True,
                timeout=self._urllib3.Timeout(connect=timeout, read=timeout))
        except exceptions.NewConnectionError as exc:  # nothing was sent (a subclass of the timeouts)
            raise ConnectionError(str(exc)) from exc
        except exceptions.TimeoutError as exc:
            raise TimeoutError(str(exc)) from exc
        except exceptions.HTTPError as exc:  # reset, aborted, TLS failure: no (whole) answer
            raise ConnectionError(str(exc)) from exc
        return HttpResponse(response.status, {k.lower(): v for k, v in response.headers.items()},
                            response.data)

    def close(self) -> None:
        """Close every pooled connection; a send after this opens new ones (``Client`` refuses it)."""
        self.closed = True
        self._direct.clear()
        for manager in self._proxied.values():
            manager.clear()
