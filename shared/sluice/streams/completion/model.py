"""A jobs-table stream record -> the completion event it stands for, or None. Pure: no I/O.

The jobs table is the one place every final state is written (the worker's verdict, the
relay's settle, a cancel), and DynamoDB writes the stream record atomically with the item.
A record is a **final transition** when its new image has a final status and its old image
has none (no item, or a status that is not final), or had one under an older ``run_gen`` (a
redriven job ended before its grant: ``sluice.core.endings``). Each such record is one ``JobEnded`` of
the in-process bus (``sluice.core.bus``): the same job, state and redrive generation, written by
the same write, so a crash between that write and any publish loses nothing.

Records that are not transitions: a re-run of a succeeded job writing its result again
(succeeded -> succeeded), a redrive minting its generation (failed/dead stay), an
``ended_token``, a TTL deletion. Each returns None.

The event id is ``<job id>:<state>:<generation>``, the generation being ``run_gen`` (the
redrive generation the ending ran under; 0 if never redriven). A duplicate delivery carries
the same id; a redriven job that ends again gets a new one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sluice.backends.dynamodb.codec import item_int, item_str
from sluice.core.errors import SluiceError
from sluice.core.models import FINAL_STATES, JobState

SOURCE = "sluice"
# Each event's source names its queue (issue 27): ``sluice.queue.<queue>``, so an IAM policy can
# scope a team to its queues' events (``events:source`` on PutRule, StringLike
# ``sluice.queue.thumbs-*``) and a rule matches one queue, or every one with a prefix match on
# SOURCE_PREFIX. The queue is the job id's own (``<ULID>.<queue>.<mac>``, the part IAM's
# LeadingKeys vouches for), not the item's ``queue`` attribute, which a team's code writes.
SOURCE_PREFIX = "sluice.queue."


def source_of(queue: str) -> str:
    return f"{SOURCE_PREFIX}{queue}"
DETAIL_TYPES = {JobState.SUCCEEDED: "Job Succeeded", JobState.FAILED: "Job Failed",
                JobState.DEAD: "Job Dead", JobState.CANCELLED: "Job Cancelled"}
# A result up to this many bytes (canonical JSON) rides in the event; a larger one is an S3
# pointer. EventBridge bills each 64 KB of an entry as one event and refuses entries over 256 KB.
DEFAULT_INLINE_RESULT_BYTES = 16 * 1024
MAX_ERROR_IN_EVENT = 1024


def event_id(job_id: str, state: str, generation: int) -> str:
    return f"{job_id}:{state}:{generation}"


@dataclass(frozen=True, slots=True)
class Completion:
    """One completion event. ``result_text``: the inline result's JSON when it is too large for
    the event and has no S3 object yet (the publisher uploads it and points to it)."""

    event_id: str
    state: JobState
    detail: dict[str, Any]
    result_text: str | None = None
    result_key: str | None = None  # where result_text goes (results/<id>/<token>/<digest>.json)

    @property
    def detail_type(self) -> str:
        return DETAIL_TYPES[self.state]


def _status(image: Mapping[str, Any] | None) -> str | None:
    return item_str(image, "status") if image else None


def is_final_transition(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> bool:
    """New final, and the old image not final, or final under an older generation: a redriven
    job that ended before its grant (a cancel, a settle) goes from ``failed``/``dead`` to a final
    state with ``run_gen`` raised to its redrive generation (``sluice.core.endings``)."""
    new_status = _status(new)
    if new_status not in FINAL_STATES:
        return False
    return _status(old) not in FINAL_STATES or item_int(new or {}, "run_gen") > item_int(old or {}, "run_gen")


def final_image(record: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The new image of a stream record (Lambda's DynamoDB event shape) that makes its job
    final, or None (a removal, or not a transition into a final state)."""
    if record.get("eventName") not in ("INSERT", "MODIFY"):
        return None
    data = record.get("dynamodb") or {}
    new, old = data.get("NewImage"), data.get("OldImage")
    if new is None or not is_final_transition(old, new):
        return None
    image: Mapping[str, Any] = new
    return image


def from_record(record: Mapping[str, Any], *,
                inline_bytes: int = DEFAULT_INLINE_RESULT_BYTES) -> Completion | None:
    """The completion event of one stream record, or None."""
    new = final_image(record)
    return None if new is None else from_item(new, inline_bytes=inline_bytes)


def from_item(item: Mapping[str, Any], *, inline_bytes: int = DEFAULT_INLINE_RESULT_BYTES) -> Completion:
    """The completion event of a final item (DynamoDB-typed attributes)."""
    from sluice.backends.dynamodb.results import job_result_key, queue_of_id, result_key
    from sluice.core.ids import NO_QUEUE

    state = JobState(item_str(item, "status") or "")
    job_id = item_str(item, "job_id") or ""
    gen = item_int(item, "run_gen")
    eid = event_id(job_id, state.value, gen)
    queue = queue_of_id(job_id)
    if queue == NO_QUEUE:  # an id without a queue part (tools, tests): the item's
        queue = item_str(item, "queue") or ""
    detail: dict[str, Any] = {
        "event_id": eid, "job_id": job_id, "queue": queue, "status": state.value,
        "attempts": item_int(item, "attempts"), "token": item_int(item, "token"), "redrive_gen": gen,
        "created_at_ms": item_int(item, "created_at_ms"), "finished_at_ms": item_int(item, "finished_at_ms"),
        # a child job's parent (flows), as the store writes it (``Families.record_children``); None
        # for a plain job
        "parent": item_str(item, "parent_id"),
    }
    if (error := item_str(item, "last_error")) is not None and state is not JobState.SUCCEEDED:
        detail["last_error"] = error[:MAX_ERROR_IN_EVENT]
    if state is not JobState.SUCCEEDED:
        return Completion(eid, state, detail)
    if (ref := item_str(item, "result_ref")) is not None:
        try:  # only the job's own result (results/<queue>/<id>/...): the item is a team's to write
            job_result_key(ref, job_id, None)
        except SluiceError:
            detail["result_ref"] = None
            detail["result_omitted"] = "the item's result_ref is not its own result"
        else:
            detail["result_ref"] = ref
        return Completion(eid, state, detail)
    text = item_str(item, "result")
    if text is None:
        detail["result"] = None
        return Completion(eid, state, detail)
    size = len(text.encode("utf-8"))
    if size <= inline_bytes:
        detail["result"] = json.loads(text)
        return Completion(eid, state, detail)
    detail["result_bytes"] = size
    digest = item_str(item, "result_digest") or ""
    key = result_key(job_id, item_int(item, "result_token", item_int(item, "token")), digest)
    return Completion(eid, state, detail, result_text=text, result_key=key)


def entry(completion: Completion, bus_name: str) -> dict[str, Any]:
    """The ``PutEvents`` entry; consumers dedupe on ``detail.event_id`` (EventBridge's own ``id``
    is new on every put)."""
    return {"Source": source_of(str(completion.detail.get("queue") or "")),
            "DetailType": completion.detail_type, "EventBusName": bus_name,
            "Detail": json.dumps(completion.detail, separators=(",", ":"), sort_keys=True)}
