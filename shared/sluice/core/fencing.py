"""Fencing for services: the headers a holder's HTTP call carries, and what a service answers.

A holder's fencing token (``ctx.token``) gets its stale writes refused by the jobs table and by
the handler's own tables (``FencedTable``). A service the handler calls can refuse them too: the
worker's ``ctx.http`` (``worker/runtime/http.py``) sends the job id, the token and, when the
handler names one, a resource (``fence_headers``); the service's fence middleware (the package
``sluice_fence``, outside the Lambda layer) reads them back (``read_claim``) and refuses a token
older than the newest it has seen for the job with 409 and a problem body (``stale_problem``),
which ``ctx.http`` turns back into ``StaleToken`` (``stale_of``). Pure, and the one definition
both sides share.

Tokens on the wire are canonical decimals in 1..2^63-1 (``MAX_FENCE_TOKEN``): the jobs table's
tokens start at 1 and grow by one a grant, so anything else is forged or broken, and a service
must never record it (a forged huge token recorded as the newest would refuse every later call
of that job).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sluice.core.errors import InvalidInput, StaleToken
from sluice.core.models import validate_job_id

JOB_HEADER = "Sluice-Job-Id"
TOKEN_HEADER = "Sluice-Fencing-Token"
RESOURCE_HEADER = "Sluice-Fence-Resource"
# Stable across every attempt of the job (the job id, plus the resource): a service that dedupes
# on it runs a retried call once, whichever holder sends it.
IDEMPOTENCY_HEADER = "Idempotency-Key"
FENCE_HEADERS = (JOB_HEADER, TOKEN_HEADER, RESOURCE_HEADER)
MAX_FENCE_TOKEN = 2**63 - 1
MAX_RESOURCE = 64
_TOKEN_RE = re.compile(r"[1-9][0-9]{0,18}")

PROBLEM_STALE = "urn:sluice:problem:stale-token"
PROBLEM_MISSING = "urn:sluice:problem:fencing-required"
PROBLEM_BAD = "urn:sluice:problem:bad-fencing"
PROBLEM_UNAVAILABLE = "urn:sluice:problem:fence-unavailable"
PROBLEM_CONTENT_TYPE = "application/problem+json"


@dataclass(frozen=True, slots=True)
class Claim:
    """What one request claims: it is ``job_id``'s holder with ``token`` (and acts on ``resource``)."""

    job_id: str
    token: int
    resource: str | None = None

    def key(self, per_resource: bool = False) -> str:
        """The fence's key: the job (its tokens are comparable with each other only), or the job
        and its resource when the service fences each resource of a job apart."""
        if per_resource and self.resource is not None:
            return f"{self.job_id}/{self.resource}"
        return self.job_id


def validate_resource(resource: object) -> str:
    if (not isinstance(resource, str) or not 0 < len(resource) <= MAX_RESOURCE or not resource.isascii()
            or not resource.isprintable()):
        raise InvalidInput(f"invalid fence resource {resource!r}: 1..{MAX_RESOURCE} printable ASCII "
                           "characters")
    return resource


def validate_fence_token(token: object) -> int:
    if isinstance(token, bool) or not isinstance(token, int) or not 0 < token <= MAX_FENCE_TOKEN:
        raise InvalidInput(f"invalid fencing token {token!r}: an integer in 1..2^63-1")
    return token


def fence_headers(job_id: str, token: int, resource: str | None = None) -> dict[str, str]:
    """The headers of a holder's call: job id, token, the resource if any, and an idempotency key
    (the job id, plus ``:<resource>``), the same for every attempt of the job."""
    key = validate_job_id(job_id)
    out = {JOB_HEADER: key, TOKEN_HEADER: str(validate_fence_token(token))}
    if resource is not None:
        out[RESOURCE_HEADER] = validate_resource(resource)
        key = f"{key}:{resource}"
    out[IDEMPOTENCY_HEADER] = key
    return out


def parse_token(raw: str) -> int:
    """A token header's value: a canonical decimal in 1..2^63-1, else InvalidInput (no sign, no
    space, no leading zero, no exponent: one spelling per token)."""
    if not isinstance(raw, str) or _TOKEN_RE.fullmatch(raw) is None or int(raw) > MAX_FENCE_TOKEN:
        raise InvalidInput(f"{TOKEN_HEADER} must be a canonical integer in 1..2^63-1, got {raw[:40]!r}")
    return int(raw)


def read_claim(get: Callable[[str], list[str]]) -> Claim | None:
    """The claim of a request whose headers ``get(name)`` returns (every value of that header).

    None when it carries no fencing header at all; InvalidInput when it carries some but not a
    whole, well-formed claim: a header given twice, a token or job id that does not parse, a
    resource without the rest."""
    values = {name: get(name) for name in FENCE_HEADERS}
    if not any(values.values()):
        return None
    for name, found in values.items():
        if len(found) > 1:
            raise InvalidInput(f"{name} given {len(found)} times")
    job, token, resource = (found[0] if found else None for found in values.values())
    if job is None or token is None:
        raise InvalidInput(f"a fenced request carries both {JOB_HEADER} and {TOKEN_HEADER}")
    try:
        job_id = validate_job_id(job)
    except InvalidInput:
        raise InvalidInput(f"{JOB_HEADER} is not a job id: {job[:40]!r}") from None
    return Claim(job_id, parse_token(token), None if resource is None else validate_resource(resource))


def problem(kind: str, status: int, title: str, detail: str, **extra: Any) -> dict[str, Any]:
    """An RFC 9457 problem body, as the gateway answers its errors."""
    return {"type": kind, "title": title, "status": status, "detail": detail, **extra}


def stale_problem(claim: Claim, newest: int) -> dict[str, Any]:
    """409: ``claim``'s token is older than the newest the service has seen for its job."""
    return problem(PROBLEM_STALE, 409, "Stale fencing token",
                   f"token {claim.token} of job {claim.job_id} is older than {newest}, already seen: "
                   "a newer holder of the job has called; this one lost its lease",
                   job_id=claim.job_id, token=claim.token, current=newest,
                   **({"resource": claim.resource} if claim.resource is not None else {}))


def stale_of(status: int, body: bytes, *, job_id: str, mine: int, operation: str) -> StaleToken | None:
    """The ``StaleToken`` a fence middleware's 409 stands for, or None for any other answer (a
    service's own 409 for something else is the handler's to read)."""
    if status != 409:
        return None
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    if not isinstance(doc, Mapping) or doc.get("type") != PROBLEM_STALE:
        return None
    current = doc.get("current")
    current = current if isinstance(current, int) and not isinstance(current, bool) else mine + 1
    return StaleToken(mine=mine, current=current, job_id=job_id, operation=operation)
