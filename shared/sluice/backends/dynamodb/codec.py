"""The jobs table's item codec: attribute names, DynamoDB's typed values, and a ``JobRecord``.

Pure: no client, no I/O. The writers (``leases.py``, ``lifecycle.py``) build their
expressions from ``NAMES`` and their values with ``S``/``N``; every reader decodes an
item with ``item_int``/``item_str`` and ``decode_record``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from sluice.core.errors import InvalidInput
from sluice.core.models import JobRecord, JobState

# Every attribute goes through a placeholder: status, token, queue and result are
# reserved words or close to it, and one table of aliases keeps expressions legible.
NAMES = {
    "#id": "job_id", "#q": "queue", "#st": "status", "#att": "attempts", "#tok": "token",
    "#own": "lease_owner", "#cr": "created_at_ms", "#up": "updated_at_ms", "#fin": "finished_at_ms",
    "#err": "last_error", "#res": "result", "#ref": "result_ref", "#rt": "result_token",
    "#dig": "result_digest", "#cx": "cancel_requested", "#exp": "expires_at",
    "#rg": "redrive_gen", "#run": "run_gen", "#end": "ended_token", "#lt": "lease_token",
    "#pg": "progress", "#pgd": "progress_detail", "#pgt": "progress_at_ms",
    # families (store/families.py)
    "#par": "parent_id", "#kids": "children", "#conts": "continuations", "#then": "continuation",
    "#left": "remaining", "#ended": "ended_slots", "#slot": "family_slot", "#rel": "released_at_ms",
    "#fv": "format_version",  # the writer's format (sluice.core.formats.ITEM; items.py)
    "#pend": "pending_children",
    "#nb": "buckets", "#bl": "buckets_left",  # a continuation counted on buckets (families.py, issue 30)
}


def S(value: str) -> dict[str, str]:  # DynamoDB's own type letters
    return {"S": value}


def N(value: int) -> dict[str, str]:
    return {"N": str(value)}


def item_int(item: Mapping[str, Any], name: str, default: int = 0) -> int:
    value = item.get(name)
    return int(value["N"]) if value and "N" in value else default


def item_str(item: Mapping[str, Any], name: str) -> str | None:
    value = item.get(name)
    return str(value["S"]) if value and "S" in value else None


def created_ms(value: object) -> int:
    """A job's enqueue time as stored (``JobSpec.enqueued_at_ms``; 0: unknown)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(f"invalid enqueue time {value!r}: a non-negative integer (ms)")
    return value


def generation(value: object) -> int:
    """A redrive generation (``LeasedJob.redrive_gen``, ``SettleEntry.redrive_gen``)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 2**53 - 1:
        raise InvalidInput(f"invalid redrive generation {value!r}: an integer >= 0")
    return value


def lease_token_of(value: object) -> int | None:
    """A Redis lease token a grant is fenced on (``LeasedJob.lease_token``), or None: not fenced."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 2**53 - 1:
        raise InvalidInput(f"invalid lease token {value!r}: an integer in 1..2**53-1")
    return value


def decode_record(item: Mapping[str, Any], load_result: Callable[[str], bytes] | None = None) -> JobRecord:
    """The item as a ``JobRecord``; ``load_result`` fetches a large result by its reference (S3)."""
    result: Any = None
    if (text := item_str(item, "result")) is not None:
        result = json.loads(text)
    ref = item_str(item, "result_ref")
    if ref is not None and load_result is not None:
        result = json.loads(load_result(ref))
    finished = item_int(item, "finished_at_ms", -1)
    return JobRecord(
        job_id=item_str(item, "job_id") or "", queue=item_str(item, "queue") or "",
        status=JobState(item_str(item, "status") or ""), attempts=item_int(item, "attempts"),
        token=item_int(item, "token"), lease_owner=item_str(item, "lease_owner"),
        created_at_ms=item_int(item, "created_at_ms"), updated_at_ms=item_int(item, "updated_at_ms"),
        finished_at_ms=finished if finished >= 0 else None, last_error=item_str(item, "last_error"),
        result=result, result_ref=ref,
        result_token=item_int(item, "result_token", -1) if "result_token" in item else None,
        cancel_requested=bool(item.get("cancel_requested", {}).get("BOOL", False)),
        redrive_gen=item_int(item, "redrive_gen"),
        progress=float(item["progress"]["N"]) if "N" in item.get("progress", {}) else None,
        progress_detail=item_str(item, "progress_detail"),
        progress_at_ms=item_int(item, "progress_at_ms") if "progress_at_ms" in item else None,
        parent_id=item_str(item, "parent_id"), children=item_set(item, "children"),
        continuations=item_set(item, "continuations"), continuation=item_str(item, "continuation"),
        waits_for=item_set(item, "waits_for"),
        remaining=item_int(item, "remaining") if "remaining" in item else
        item_int(item, "buckets_left") if "buckets_left" in item else None)  # a continuation (issue 30)


def item_set(item: Mapping[str, Any], name: str) -> list[str]:
    """A string set, sorted (ids sort by time); [] when absent (DynamoDB stores no empty set)."""
    value = item.get(name)
    return sorted(str(v) for v in value["SS"]) if value and "SS" in value else []
