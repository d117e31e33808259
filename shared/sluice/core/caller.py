"""Who an enqueue is for, as the entry that received the call verified it.

The gateway function's entries (``sluice.entry.gateway``) each know their callers: an API
request's IAM principal is what API Gateway verified (SigV4, ``requestContext.identity``); a
worker's children and a schedule's firing come from Sluice itself. Each entry builds a
``Caller`` and the enqueue pipeline (``sluice.gateway.pipeline``) only reads it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sluice.core import policy
from sluice.core.models import MAX_PRIORITY


@dataclass(frozen=True, slots=True)
class Caller:
    principal: str = ""  # the IAM ARN API Gateway verified; "" without SigV4 (API keys) or for Sluice itself
    is_operator: bool = False  # on the deployment's operator allow-list (SLUICE_OPERATOR_PRINCIPALS)
    max_priority: int = MAX_PRIORITY  # the highest priority this caller may give a job
    idempotency_scope: str = ""  # whom its Idempotency-Keys belong to: two tenants may pick the same key

    @classmethod
    def verified(cls, principal: str, scope: str, *, operators: Sequence[str],
                 max_caller_priority: int) -> Caller:
        """A caller API Gateway verified: priorities above ``max_caller_priority`` only for operators."""
        operator = policy.is_operator(principal, operators)
        return cls(principal, operator, MAX_PRIORITY if operator else max_caller_priority, scope)

    @classmethod
    def sluice(cls, max_caller_priority: int) -> Caller:
        """Sluice's own enqueues (a worker's children, a schedule's firing): a plain caller's limits."""
        return cls(max_priority=max_caller_priority)

    def may_use(self, priority: int) -> bool:
        return priority <= self.max_priority or self.is_operator

    def own_key(self, idempotency_key: str | None) -> str | None:
        """The caller's Idempotency-Key in its own scope, so another tenant's same key is another key.

        The scope's own ``\\`` and ``|`` are escaped, so the first bare ``|`` ends it: a caller
        ``a`` with key ``b|k`` and a caller ``a|b`` with key ``k`` are two keys. IAM ARNs and API
        key ids hold neither character, so their stored keys are what they were before the escape
        (records in flight during an upgrade still replay); a local caller's name may hold both."""
        if idempotency_key is None:
            return None
        scope = self.idempotency_scope.replace("\\", "\\\\").replace("|", "\\|")
        return f"{scope}|{idempotency_key}"
