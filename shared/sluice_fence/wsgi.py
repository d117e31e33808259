"""The fence as WSGI middleware: ``app = FenceWSGI(app, Fence(RedisFenceStore(...)))``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from sluice_fence.verifier import ENVIRON_KEY, Fence

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

_STATUS = {400: "400 Bad Request", 409: "409 Conflict", 503: "503 Service Unavailable"}


class FenceWSGI:
    """Runs ``fence``'s decision before ``app``: a refused request is answered here (a problem
    body) and never reaches it; an admitted one reaches it with ``environ["sluice.fence"]``."""

    def __init__(self, app: WSGIApp, fence: Fence) -> None:
        self.app, self.fence = app, fence

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        def get(name: str) -> list[str]:
            # WSGI joins a repeated header's values with commas, which no claim's value holds: a
            # header given twice reads as one that does not parse.
            value = environ.get("HTTP_" + name.upper().replace("-", "_"))
            return [] if value is None else [value]

        decision = self.fence.decide(str(environ.get("REQUEST_METHOD", "GET")), get)
        if decision.admitted is None:
            start_response(_STATUS.get(decision.status, f"{decision.status} Refused"), list(decision.headers))
            return [decision.body]
        environ[ENVIRON_KEY] = decision.admitted
        return self.app(environ, start_response)
