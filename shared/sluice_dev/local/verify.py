"""The demo's end-of-run check: what the stores say, against what was accepted and recorded.

Invariants (the demo exits non-zero if any fails):

- **final**: every accepted job ended ``succeeded`` or ``dead`` in the jobs table;
- **one result**: a succeeded job holds exactly one result, written with its current
  result token, equal to the last accepted write in the history and, for the
  deterministic queues, to the result the handler must return; a dead job holds none;
  no job has two accepted writes with different results;
- **no stale write**: no write was accepted after a newer token had been granted
  (``history.Analyser.finish``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from boto3.dynamodb.types import TypeDeserializer

from sluice.core.config import Settings
from sluice_dev import examples_team
from sluice_dev.examples import expected_result
from sluice_dev.local.history import HistoryReport, digest
from sluice_dev.local.workload import PlannedJob

_FIELDS = "job_id, #st, attempts, #res, result_token, result_ref, result_digest, #tok, lease_owner"


@dataclass
class Verdict:
    checked: int = 0
    succeeded: int = 0
    dead: int = 0
    not_final: list[str] = field(default_factory=list)
    wrong_results: list[str] = field(default_factory=list)
    conflicting_writes: list[str] = field(default_factory=list)
    unexpected_dead: int = 0  # died though the handlers say they should succeed (not an invariant)
    unexpected_success: int = 0
    stale_writes_accepted: int = 0

    @property
    def ok(self) -> bool:
        return not (self.not_final or self.wrong_results or self.conflicting_writes
                    or self.stale_writes_accepted)

    def failures(self) -> list[str]:
        out = []
        if self.not_final:
            out.append(f"{len(self.not_final)} accepted jobs never ended succeeded or dead "
                       f"(e.g. {self.not_final[0]})")
        if self.wrong_results:
            out.append(f"{len(self.wrong_results)} jobs hold a wrong or missing result "
                       f"({self.wrong_results[0]})")
        if self.conflicting_writes:
            out.append(f"{len(self.conflicting_writes)} jobs had two different results accepted "
                       f"({self.conflicting_writes[0]})")
        if self.stale_writes_accepted:
            out.append(f"{self.stale_writes_accepted} stale writes were accepted")
        return out


def fetch(settings: Settings, job_ids: Sequence[str], fields: str = _FIELDS) -> dict[str, dict[str, Any]]:
    """The jobs table's items for ``job_ids`` (BatchGetItem, 100 at a time, retrying leftovers)."""
    import boto3

    client = boto3.client("dynamodb", region_name=settings.aws_region, endpoint_url=settings.aws_endpoint_url)
    des = TypeDeserializer()
    out: dict[str, dict[str, Any]] = {}
    for start in range(0, len(job_ids), 100):
        keys: list[dict[str, Any]] = [{"job_id": {"S": j}} for j in job_ids[start:start + 100]]
        for _ in range(10):
            if not keys:
                break
            reply = client.batch_get_item(RequestItems={settings.jobs_table: {
                "Keys": keys, "ConsistentRead": True, "ProjectionExpression": fields,
                "ExpressionAttributeNames": {"#st": "status", "#res": "result", "#tok": "token"}}})
            responses: dict[str, Any] = dict(reply.get("Responses") or {})
            for item in responses.get(settings.jobs_table, []):
                plain = {k: des.deserialize(v) for k, v in item.items()}
                out[str(plain["job_id"])] = plain
            leftover: dict[str, Any] = dict(reply.get("UnprocessedKeys") or {})
            keys = list((leftover.get(settings.jobs_table) or {}).get("Keys", []))
    return out


def _decoded(result: Any) -> Any:
    """Results are stored as canonical JSON text; numbers come back from DynamoDB as Decimal."""
    if isinstance(result, str):
        try:
            return json.loads(result)
        except ValueError:
            return result
    return json.loads(json.dumps(result, default=lambda d: int(d) if d == int(d) else float(d)))


def check(jobs: Iterable[PlannedJob], items: dict[str, dict[str, Any]], history: HistoryReport) -> Verdict:
    v = Verdict(stale_writes_accepted=history.stale_writes_accepted)
    for job in jobs:
        if job.job_id is None:
            continue  # never accepted
        v.checked += 1
        item = items.get(job.job_id)
        status = item.get("status") if item else None
        facts = history.jobs.get(job.job_id)
        writes = facts.writes if facts else []
        if len({w.get("digest") for w in writes}) > 1:
            v.conflicting_writes.append(job.job_id)
        if status == "succeeded":
            v.succeeded += 1
            v.unexpected_success += job.expect_dead
            _check_result(job, item or {}, writes, v)
        elif status == "dead":
            v.dead += 1
            v.unexpected_dead += not job.expect_dead
            if (item or {}).get("result") is not None:
                v.wrong_results.append(f"{job.job_id}: dead but holds a result")
        else:
            detail = "" if item is None else \
                f" with token {item.get('token')}, owner {item.get('lease_owner')}, " \
                f"attempts {item.get('attempts')}"
            v.not_final.append(f"{job.job_id} ({job.queue}) is {status or 'missing'}{detail}")
    return v


def _check_result(job: PlannedJob, item: dict[str, Any], writes: list[dict[str, Any]], v: Verdict) -> None:
    assert job.job_id is not None
    stored = item.get("result")
    if stored is None and not item.get("result_ref"):
        v.wrong_results.append(f"{job.job_id}: succeeded without a result")
        return
    if not writes:
        v.wrong_results.append(f"{job.job_id}: succeeded but no worker recorded writing it")
        return
    last = max(writes, key=lambda w: int(w["token"]))
    if int(item.get("result_token") or -1) != int(last["token"]):
        v.wrong_results.append(f"{job.job_id}: result token {item.get('result_token')} is not the last "
                               f"accepted write's {last['token']}")
        return
    if str(item.get("result_digest", ""))[:16] != last.get("digest"):
        v.wrong_results.append(f"{job.job_id}: stored result differs from the last accepted write")
        return
    if stored is None:
        return  # a large result in S3, under a key carrying its token and digest
    value = _decoded(stored)
    if digest(value) != last.get("digest"):
        v.wrong_results.append(f"{job.job_id}: stored result does not match its own digest")
        return
    want = expected_result(job.queue, job.payload)
    if want is ...:  # the second worker function's queue: its result names the function that ran it
        want = examples_team.expected_result(job.queue, job.payload)
    if want is not ... and value != want:
        v.wrong_results.append(f"{job.job_id}: {job.queue} returned {str(value)[:80]}, "
                               f"expected {str(want)[:80]}")


# -- families (jobs that start jobs, docs/flows.md) -----------------------------------------------------

FAMILY_FIELDS = "job_id, #st, children, continuations, #res, remaining, buckets_left, #tok"


@dataclass
class FamilyVerdict:
    """The demo's ``fanout`` parents: every child ran once, and each continuation once, after them."""

    parents: int = 0
    children: int = 0
    continuations: int = 0
    sums_ok: int = 0
    problems: list[str] = field(default_factory=list)


def family_members(settings: Settings, parents: Sequence[str]) -> dict[str, tuple[list[str], list[str]]]:
    """Each parent's (children, continuations), for the parents that have recorded any."""
    out: dict[str, tuple[list[str], list[str]]] = {}
    for job_id, item in fetch(settings, list(parents), FAMILY_FIELDS).items():
        kids, thens = sorted(item.get("children") or ()), sorted(item.get("continuations") or ())
        if kids:
            out[job_id] = (kids, thens)
    return out


def check_families(jobs: Iterable[PlannedJob], members: dict[str, tuple[list[str], list[str]]],
                   items: dict[str, dict[str, Any]], history: HistoryReport) -> FamilyVerdict:
    """Per ``fanout`` parent: ``n`` children, each succeeded with one result; one continuation,
    succeeded, its sum right, counted down to 0, first granted after every child's result write."""
    v = FamilyVerdict()
    for job in jobs:
        if job.queue != "fanout" or job.job_id is None:
            continue
        v.parents += 1
        n = int(job.payload["n"])
        kids, thens = members.get(job.job_id, ([], []))
        v.children += len(kids)
        v.continuations += len(thens)
        if len(kids) != n or len(thens) != 1:
            v.problems.append(f"{job.job_id}: {len(kids)} children and {len(thens)} continuations, "
                              f"expected {n} and 1")
            continue
        last_child = 0.0
        for kid in kids:
            facts = history.jobs.get(kid)
            if (items.get(kid) or {}).get("status") != "succeeded" or facts is None or not facts.writes:
                v.problems.append(f"child {kid} of {job.job_id} did not succeed")
                continue
            if len({w.get("digest") for w in facts.writes}) > 1:
                v.problems.append(f"child {kid} has two different results")
            last_child = max(last_child, min(float(w["t1"]) for w in facts.writes))
        then = thens[0]
        item, facts = items.get(then) or {}, history.jobs.get(then)
        want = expected_result("sum", {"n": n})
        if item.get("status") != "succeeded" or _decoded(item.get("result")) != want:
            v.problems.append(f"continuation {then}: {item.get('status')} with {item.get('result')}, "
                              f"expected succeeded with {want}")
            continue
        left = item.get("buckets_left", item.get("remaining", -1))  # buckets (issue 30), or children
        if int(left) != 0:
            v.problems.append(f"continuation {then} counted down to {left}, not 0")
        if facts is None or not facts.grants or min(t0 for _, t0, _ in facts.grants) < last_child:
            v.problems.append(f"continuation {then} started before its last child's result was written")
            continue
        if len({w.get("digest") for w in facts.writes}) > 1:
            v.problems.append(f"continuation {then} has two different results")
            continue
        v.sums_ok += 1
    return v
