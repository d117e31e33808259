"""``flows.LambdaFamilyGateway`` adapters: how a worker (or the relay) reaches the gateway's family entry.

In AWS, a synchronous Lambda invoke (``RequestResponse``) of the gateway function through the
VPC's Lambda endpoint; on one machine, the local Lambda service's endpoint. The reply is the
gateway's internal entry's answer (``sluice.entry.gateway_internal``); an error reply becomes the
same ``SluiceError`` the use case raised (``errors.from_code``), so a handler sees
``TooManyChildren`` as if it were local.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from sluice.backends.aws.clients import lambda_client
from sluice.backends.aws.invoke import invoke_json
from sluice.core.config import Settings
from sluice.core.errors import from_code
from sluice.core.families import FamilyAccepted, FamilyRequest, ReleaseRequest

log = logging.getLogger(__name__)

Invoke = Callable[[dict[str, Any]], dict[str, Any]]  # event -> the gateway's answer


def answer(reply: dict[str, Any]) -> dict[str, Any]:
    """The internal function's ``reply``, or the error it carries raised as its ``SluiceError``."""
    error = reply.get("error")
    if isinstance(error, dict):
        raw = error.get("details")
        details: dict[str, Any] = raw if isinstance(raw, dict) else {}
        raise from_code(str(error.get("code", "SLUICE_ERROR")), str(error.get("message", "")), **details)
    return reply


class LambdaFamilyGateway:
    """``flows.LambdaFamilyGateway`` over any way of invoking the gateway (``invoke``)."""

    def __init__(self, invoke: Invoke) -> None:
        self._invoke = invoke

    def _call(self, event: dict[str, Any]) -> dict[str, Any]:
        return answer(self._invoke(event))

    def enqueue_children(self, request: FamilyRequest) -> FamilyAccepted:
        reply = self._call(request.model_dump(mode="json"))
        return FamilyAccepted.model_validate(reply.get("family"))

    def release(self, continuation: str) -> None:
        self._call(ReleaseRequest(continuation=continuation).model_dump(mode="json"))


class LambdaInvoke:
    """``Invoke`` as a synchronous invoke of the gateway function (client built on first use)."""

    def __init__(self, function_name: str, build_client: Callable[[], Any]) -> None:
        self.function_name = function_name
        self._build: Callable[[], Any] | None = build_client
        self._client: Any = None

    def __call__(self, event: dict[str, Any]) -> dict[str, Any]:
        if self._client is None and self._build is not None:
            self._client, self._build = self._build(), None
        return invoke_json(self._client, self.function_name, event,
                           what=f"the internal function {self.function_name}")

    @classmethod
    def from_settings(cls, settings: Settings) -> LambdaInvoke:
        def build() -> Any:
            return lambda_client(settings, read_timeout=30)

        return cls(settings.internal_function_name or "", build)
