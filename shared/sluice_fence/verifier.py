"""The fence's decision for one request, shared by the WSGI and the ASGI middleware.

A request that claims to be a job's holder (``sluice.core.fencing.read_claim``: job id, fencing
token, perhaps a resource) is let through when its token is not older than the newest the fence
has recorded for the job: a newer one is recorded, the same one is let through again (an
idempotent retry of the same attempt: the worker's own, or a client's after a lost answer), an
older one is refused with 409 and nothing is recorded. The record is one conditional write in a
store of the service's (``FenceStore``: Redis, ``redis_store``, or DynamoDB, ``dynamodb_store``),
so it is durable and atomic across every process of the service.

What the fence does not do: authenticate. A caller that can reach the service can send any token;
a forged token within the bounds, recorded, refuses the job's real holder for as long as the record
lives. Put the service's authentication before the fence. And it orders admission, not effects: a
request admitted before a newer holder's may still be running when the newer one is admitted, so a
slow handler whose effect must not land late writes conditionally itself (the token it was admitted
with is in the request's ``sluice.fence``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, Protocol

from sluice.core.errors import InvalidInput, SluiceError
from sluice.core.fencing import (
    JOB_HEADER,
    PROBLEM_BAD,
    PROBLEM_CONTENT_TYPE,
    PROBLEM_MISSING,
    PROBLEM_UNAVAILABLE,
    TOKEN_HEADER,
    Claim,
    problem,
    read_claim,
    stale_problem,
)

log = logging.getLogger("sluice_fence")

WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class Advance(NamedTuple):
    """A store's answer: the token's ``verdict`` (``new``: recorded, newer than any seen; ``same``:
    the newest already; ``stale``: older, nothing written) and the ``newest`` recorded now."""

    verdict: Literal["new", "same", "stale"]
    newest: int


class FenceStore(Protocol):
    """Where a fence records the newest token per key, with one atomic conditional write."""

    def advance(self, key: str, token: int) -> Advance:
        """Record ``token`` for ``key`` unless a newer one is recorded. Raises ``SluiceError``
        (``BackendUnavailable``) when the store cannot answer: the fence then refuses (503)."""
        ...


@dataclass(frozen=True, slots=True)
class Admitted:
    """What an admitted request carries on (``environ`` / ``scope`` key ``sluice.fence``): its
    claim (None: it claimed nothing and the fence lets such requests through) and whether its
    token was the newest already (a retry of a call already admitted)."""

    claim: Claim | None
    replay: bool = False


class Decision(NamedTuple):
    """Let through (``admitted``), or answer ``status`` with ``body`` (a problem) and ``headers``."""

    admitted: Admitted | None
    status: int = 200
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()


ENVIRON_KEY = "sluice.fence"


class Fence:
    """The fence of one service: its ``store``, the ``namespace`` its keys live under (two services
    sharing one store fence apart unless they share it), and what it asks of a request.

    - ``missing``: a request with no fencing header at all: ``"reject"`` (400, the default), or
      ``"allow"`` (a service some of whose callers are not Sluice workers). A request with some
      fencing headers that do not make a claim is always 400.
    - ``methods``: the methods fenced (the writes by default; None: every one); others pass untouched.
    - ``per_resource``: record per job and resource (``Sluice-Fence-Resource``) instead of per job.
      Per job (the default) is the stricter: a stale holder is refused on every resource once a
      newer holder called any. A job's tokens are comparable with each other only, so a key is
      always the job's, never a resource's across jobs.
    """

    def __init__(self, store: FenceStore, *, namespace: str = "default",
                 missing: Literal["reject", "allow"] = "reject", methods: frozenset[str] | None = WRITES,
                 per_resource: bool = False) -> None:
        if missing not in ("reject", "allow"):
            raise InvalidInput(f"missing must be 'reject' or 'allow', got {missing!r}")
        if not namespace or not namespace.isascii() or not namespace.isprintable() or len(namespace) > 64:
            raise InvalidInput(f"invalid fence namespace {namespace!r}: 1..64 printable ASCII characters")
        self.store, self.namespace, self.missing = store, namespace, missing
        self.methods = None if methods is None else frozenset(m.upper() for m in methods)
        self.per_resource = per_resource

    def fences(self, method: str) -> bool:
        """Whether requests of ``method`` are fenced (the others pass untouched)."""
        return self.methods is None or method.upper() in self.methods

    def key(self, claim: Claim) -> str:
        return f"{self.namespace}:{claim.key(self.per_resource)}"

    def decide(self, method: str, get: Callable[[str], list[str]]) -> Decision:
        """The decision for a request of ``method`` whose headers ``get(name)`` returns."""
        if not self.fences(method):
            return Decision(Admitted(None))
        try:
            claim = read_claim(get)
        except InvalidInput as exc:
            return refuse(problem(PROBLEM_BAD, 400, "Malformed fencing headers", str(exc)))
        if claim is None:
            if self.missing == "allow":
                return Decision(Admitted(None))
            return refuse(problem(PROBLEM_MISSING, 400, "Fencing headers required",
                                  f"this service fences {method.upper()} requests: send {JOB_HEADER} and "
                                  f"{TOKEN_HEADER} (a Sluice handler's ctx.http does)"))
        try:
            verdict, newest = self.store.advance(self.key(claim), claim.token)
        except SluiceError as exc:
            log.error("fence store unavailable: %s", exc)
            return refuse(problem(PROBLEM_UNAVAILABLE, 503, "Fence unavailable",
                                  "the fence could not check this request's token; try again"),
                          ("Retry-After", "1"))
        if verdict == "stale":
            log.warning("stale fencing token %d refused for job %s (newest %d)", claim.token, claim.job_id,
                        newest, extra={"job_id": claim.job_id, "token": claim.token, "current_token": newest})
            return refuse(stale_problem(claim, newest))
        return Decision(Admitted(claim, replay=verdict == "same"))


def refuse(body: dict[str, Any], *headers: tuple[str, str]) -> Decision:
    raw = json.dumps(body, separators=(",", ":")).encode()
    return Decision(None, int(body["status"]), raw,
                    (("Content-Type", PROBLEM_CONTENT_TYPE), ("Content-Length", str(len(raw))), *headers))
