"""Families in the chaos run: some jobs start children and a continuation (docs/flows.md).

Every ``FAMILY_EVERY``-th job of the workload is a parent: its handler starts ``FAMILY_CHILDREN``
children and a continuation on the chaos queue through the gateway's family entry, as any
handler does (``ctx.enqueue_many``). Before it asks, it writes a ``family`` line naming the
children and the continuation, with their ids derived as the gateway derives them (keyless since
issue 29: ``ids.derive_keyless``; ``key`` is kept for the callers), so the checker knows every
job that may run and every right answer, even when the parent is killed between its request and
its return.

Payloads, so the answers are deterministic:

- a child: ``{"parent": i, "child": c, "work_ms": 5}``, its result ``expected_result`` of that;
- the continuation: ``{"then": i, "n": n}``; it reads its children's final records
  (``ctx.children()``) and returns ``expected_result`` of ``{"then": i, "children": [...]}``, the
  sorted sha256 of the children's results: right only if every child succeeded with its right
  result when the continuation ran.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from sluice.core.models import dump_json


def expected_result(payload: Any) -> dict[str, str]:
    """The one correct result of a chaos job."""
    return {"sha256": hashlib.sha256(dump_json(payload).encode("utf-8")).hexdigest()}


FAMILY_EVERY = 20  # one job in this many is a parent
FAMILY_CHILDREN = 4
CHILD_WORK_MS = 5


def is_parent(i: int) -> bool:
    return i % FAMILY_EVERY == FAMILY_EVERY - 1


def child_payload(parent: dict[str, Any], c: int) -> dict[str, Any]:
    return {"parent": parent["i"], "child": c, "work_ms": CHILD_WORK_MS}


def then_payload(parent: dict[str, Any]) -> dict[str, Any]:
    return {"then": parent["i"], "n": int(parent["family"])}


def then_result(i: int, child_results: list[Any]) -> dict[str, str]:

    shas = sorted(str(r.get("sha256")) if isinstance(r, dict) else repr(r) for r in child_results)
    return expected_result({"then": i, "children": shas})


def expected_then(parent: dict[str, Any]) -> dict[str, str]:

    kids = [expected_result(child_payload(parent, c)) for c in range(int(parent["family"]))]
    return then_result(int(parent["i"]), kids)


def start(job: Any, ctx: Any, queue: str, key: Callable[[], bytes], emit: Callable[..., None]) -> None:
    """The parent's part: name the family in the history, then ask the gateway for it."""
    from sluice.core import ids
    from sluice_dev.chaos.history import digest

    p = job.payload
    n, lease = int(p["family"]), int(p.get("lease_seconds", 30))
    kids = [child_payload(p, c) for c in range(n)]
    child_ids = [ids.derive_keyless(job.job_id, queue, f"c{c}") for c in range(n)]  # no key (issue 29)
    then_id = ids.derive_keyless(job.job_id, queue, ids.CONTINUATION_PREFIX + "then")
    expects = {cid: digest(expected_result(kp)) for cid, kp in zip(child_ids, kids, strict=True)}
    expects[then_id] = digest(expected_then(p))
    emit("family", job=job.job_id, children=child_ids, continuation=then_id, expects=expects)
    opts = {"max_attempts": int(p.get("max_attempts", 25)), "lease_seconds": lease}
    family = ctx.enqueue_many([{"queue": queue, "payload": kp, "key": f"c{c}", **opts}
                               for c, kp in enumerate(kids)],
                              then={"queue": queue, "payload": then_payload(p), **opts})
    if family.job_ids != child_ids or family.continuation != then_id:
        raise RuntimeError(f"the gateway derived other ids than the harness: {family}")
    # The gateway answered: every member is owed a result or a visible ending (lost_after_202).
    emit("family_accepted", job=job.job_id, children=child_ids, continuation=then_id)


def run_continuation(job: Any, ctx: Any) -> dict[str, str]:
    children = ctx.children()
    return then_result(int(job.payload["then"]),
                       [c.result if str(c.status) == "succeeded" else f"not succeeded: {c.status}"
                        for c in children])
