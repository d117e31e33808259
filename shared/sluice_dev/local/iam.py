"""IAM's decision on one request, over policy documents: the local Lambda service's resource policies.

Pure (no I/O) and small: the part of IAM's policy evaluation that Sluice's resource policies and
its functions' own policies use (issue 27). For a request within one account, as AWS decides it:

- an explicit ``Deny`` in the resource policy or in the caller's identity policies wins;
- otherwise an ``Allow`` in either admits the call;
- otherwise the call is implicitly denied.

Statements: ``Effect``, ``Principal`` (``"*"``, ``{"AWS": ...}`` with role ARNs or the account's
root, ``{"Service": ...}``), ``Action`` and ``Resource`` (with ``*``/``?`` wildcards) and
``Condition`` with the String and Arn operators (their ``Not`` and ``IfExists`` forms) and ``Null``
(``"true"``: the key is absent; ``"false"``: present). A key the
request does not carry fails a positive operator and passes a negated one, as in IAM: so
``ArnNotLike aws:SourceArn`` denies a direct invoke, which has no SourceArn. Anything else
(``NotAction``, ``NotPrincipal``, other operators) is refused with ValueError rather than guessed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

Decision = Literal["allow", "deny", "implicit-deny"]
_OPERATORS = {
    "StringEquals",
    "StringNotEquals",
    "StringLike",
    "StringNotLike",
    "ArnEquals",
    "ArnNotEquals",
    "ArnLike",
    "ArnNotLike",
}


@dataclass(frozen=True)
class Request:
    """Who asks for what: ``principal`` is a role's ARN (``aws:PrincipalArn``) or a service
    principal (``apigateway.amazonaws.com``), which then may carry ``source_arn``."""

    principal: str
    action: str
    resource: str
    source_arn: str | None = None

    @property
    def is_service(self) -> bool:
        return not self.principal.startswith("arn:")

    @property
    def account(self) -> str | None:
        parts = self.principal.split(":")
        return parts[4] if len(parts) > 5 else None

    def context(self) -> dict[str, str]:
        """The condition keys this request carries (lower-cased names)."""
        keys = {} if self.is_service else {"aws:principalarn": self.principal}
        if self.source_arn is not None:
            keys["aws:sourcearn"] = self.source_arn
        return keys


def decide(
    request: Request,
    resource_policy: Mapping[str, Any] | None,
    identity_policies: Iterable[Mapping[str, Any]] = (),
) -> Decision:
    """IAM's answer: the resource policy's statements whose principal names the caller, and the
    caller's own statements (identity policies name no principal)."""
    matching: list[str] = []
    for statement in _statements(resource_policy):
        if _principal_matches(statement, request) and _applies(statement, request):
            matching.append(_effect(statement))
    for policy in identity_policies:
        for statement in _statements(policy):
            if "Principal" in statement:
                raise ValueError("an identity policy's statement names no Principal")
            if _applies(statement, request):
                matching.append(_effect(statement))
    if "Deny" in matching:
        return "deny"
    return "allow" if "Allow" in matching else "implicit-deny"


def _statements(policy: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    if not policy:
        return []
    found = policy.get("Statement", [])
    return [found] if isinstance(found, Mapping) else list(found)


def _effect(statement: Mapping[str, Any]) -> str:
    effect = statement.get("Effect")
    if effect not in ("Allow", "Deny"):
        raise ValueError(f"a statement's Effect is Allow or Deny, not {effect!r}")
    return str(effect)


def _listed(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else [str(v) for v in value or []]


def _principal_matches(statement: Mapping[str, Any], request: Request) -> bool:
    if "NotPrincipal" in statement:
        raise ValueError("NotPrincipal is not understood locally")
    principal = statement.get("Principal")
    if principal == "*":
        return True
    if not isinstance(principal, Mapping):
        raise ValueError(f"a resource policy's statement needs a Principal, not {principal!r}")
    if request.is_service:
        return request.principal in _listed(principal.get("Service"))
    for name in _listed(principal.get("AWS")):
        if name in ("*", request.principal):
            return True
        root = re.fullmatch(r"arn:[^:]+:iam::(\d{12}):root|(\d{12})", name)
        if root and request.account in root.groups():  # the account: any of its principals
            return True
    return False


def _applies(statement: Mapping[str, Any], request: Request) -> bool:
    # NotAction/NotResource: the statement applies to every action/resource but those listed.
    if "NotAction" in statement:
        if any(_like(p, request.action, fold=True) for p in _listed(statement["NotAction"])):
            return False
    elif not any(_like(p, request.action, fold=True) for p in _listed(statement.get("Action"))):
        return False
    if "NotResource" in statement:
        if any(_like(p, request.resource) for p in _listed(statement["NotResource"])):
            return False
    elif not any(_like(p, request.resource) for p in _listed(statement.get("Resource", "*"))):
        return False
    return all(
        _condition(op, keys, request.context()) for op, keys in (statement.get("Condition") or {}).items()
    )


def _condition(operator: str, keys: Mapping[str, Any], context: Mapping[str, str]) -> bool:
    if operator == "Null":  # whether each key is absent ("true") or present ("false")
        return all((k.lower() not in context) == (str(want).lower() == "true") for k, want in keys.items())
    base = operator.removesuffix("IfExists")
    if base not in _OPERATORS:
        raise ValueError(f"condition operator {operator} is not understood locally")
    negated, wildcard = "Not" in base, base.endswith("Like") or base.startswith("Arn")
    for key, wanted in keys.items():
        value = context.get(key.lower())
        if value is None:
            if negated or operator.endswith("IfExists"):
                continue
            return False
        hit = any(_like(w, value) if wildcard else w == value for w in _listed(wanted))
        if hit == negated:
            return False
    return True


def _like(pattern: str, value: str, *, fold: bool = False) -> bool:
    return _glob(pattern, fold).fullmatch(value) is not None


@cache
def _glob(pattern: str, fold: bool) -> re.Pattern[str]:
    parts = (".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile("".join(parts), re.IGNORECASE if fold else 0)
