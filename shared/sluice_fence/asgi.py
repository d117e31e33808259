"""The fence as ASGI middleware: ``app = FenceASGI(app, Fence(RedisFenceStore(...)))``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from sluice_fence.verifier import ENVIRON_KEY, Decision, Fence

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class FenceASGI:
    """Runs ``fence``'s decision before ``app`` for every HTTP request (lifespan and websocket
    scopes pass untouched): a refused request is answered here and never reaches ``app``; an
    admitted one reaches it with ``scope["sluice.fence"]``. The store's call is synchronous
    (redis-py, botocore), so it runs on the loop's default executor: the loop goes on meanwhile."""

    def __init__(self, app: ASGIApp, fence: Fence) -> None:
        self.app, self.fence = app, fence

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http" or not self.fence.fences(str(scope.get("method", "GET"))):
            await self.app(scope, receive, send)
            return
        headers: list[tuple[bytes, bytes]] = list(scope.get("headers") or [])

        def get(name: str) -> list[str]:
            wanted = name.lower().encode("latin-1")
            return [v.decode("latin-1") for k, v in headers if k.lower() == wanted]

        method = str(scope.get("method", "GET"))
        decision: Decision = await asyncio.to_thread(self.fence.decide, method, get)
        if decision.admitted is None:
            await send({"type": "http.response.start", "status": decision.status,
                        "headers": [(k.lower().encode("latin-1"), v.encode("latin-1"))
                                    for k, v in decision.headers]})
            await send({"type": "http.response.body", "body": decision.body})
            return
        scope[ENVIRON_KEY] = decision.admitted
        await self.app(scope, receive, send)
