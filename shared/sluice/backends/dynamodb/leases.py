"""The writes a lease holder makes to the jobs table: its result, its failure, its release, its progress.

Every one is conditional on ``token = :mine AND status = leased`` and goes through
``_fenced_update``. When the condition fails DynamoDB returns the item as it was
(``ReturnValuesOnConditionCheckFailure=ALL_OLD``), and that one read-free answer says
which of three things happened: my own earlier write had landed (the item carries my
token and what my write sets: success), a newer token exists (``StaleToken``, counted
and logged with both tokens), or something else (typed error). So a retry never writes
twice and never needs a read first. See docs/store.md.

Once ``succeeded``, a job stays succeeded. A re-run (the worker crashed before its ack)
is granted a newer token and may write its result again, but a re-run that fails, is
released or dies cannot take the stored result's status away (``_end_rerun``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from sluice.backends.dynamodb.codec import N, S, item_int, item_str
from sluice.backends.dynamodb.fenced import Fence, classify
from sluice.backends.dynamodb.items import ItemTable
from sluice.backends.dynamodb.results import EncodedResult, result_key
from sluice.core.errors import AlreadyFinished, InvalidInput, LeaseLost, StoreError
from sluice.core.models import (
    FINAL_STATES,
    JobState,
    WriteOutcome,
    truncate_error,
    validate_job_id,
    validate_progress,
    validate_token,
)

log = logging.getLogger("sluice.backends.dynamodb")

FENCE = "#tok = :mine AND #st = :leased"
# A result may also be written by the current holder of a re-run of a succeeded job, once:
# its own earlier write (same token) must read as "already written", never land twice.
RESULT_FENCE = "#tok = :mine AND (#st = :leased OR (#st = :succeeded AND #rt < :mine))"
FAILURE_STATES = frozenset({JobState.QUEUED, JobState.FAILED, JobState.DEAD, JobState.CANCELLED})


def _same(item: Mapping[str, Any], name: str, value: dict[str, str]) -> bool:
    """The item's attribute ``name`` holds ``value`` (numbers compared as numbers)."""
    if "N" in value:
        return name in item and item_int(item, name) == int(value["N"])
    return item_str(item, name) == value["S"]


class LeaseWrites:
    """``write_result``, ``record_failure``, ``release``: fenced on the caller's token.

    ``fencing`` False only for the gc-pause scenario's --no-fencing: result writes go
    unconditional (``write_result_unfenced``), the bug the fencing token exists to prevent.
    """

    def __init__(self, items: ItemTable, fence: Fence, *, large_result_bytes: int = 300_000,
                 fencing: bool = True) -> None:
        self.items, self._fence = items, fence
        self.large_result_bytes, self.fencing = large_result_bytes, fencing

    def _fenced_update(self, operation: str, job_id: str, token: int, request: dict[str, Any], *,
                       lands_as: Mapping[str, dict[str, str]], rerun_ends: bool) -> bool:
        """True if written now, False if this is a retry of my own write that had landed.

        ``lands_as``: the attributes (DynamoDB-typed) my write sets, which the item shows
        once it has landed, next to my token. Any other refusal raises: the classified
        error, after ``_end_rerun`` when ``rerun_ends`` (the caller ends its attempt).
        """
        old, ok = self.items.update(operation, request)
        if ok:
            return True
        if (old is not None and item_int(old, "token") == token
                and all(_same(old, name, value) for name, value in lands_as.items())):
            return False
        if rerun_ends:
            self._end_rerun(job_id, token, old)
        raise classify(self._fence, operation, job_id, token, old,
                       lambda msg: StoreError(msg, job_id=job_id, token=token))

    def write_result(self, job_id: str, token: int, result: Any) -> WriteOutcome:
        if not self.fencing:
            self.write_result_unfenced(job_id, token, result)
            return WriteOutcome.WRITTEN
        job_id, token = validate_job_id(job_id), validate_token(token)
        encoded = EncodedResult.of(result)
        request = self._result_request(job_id, token, encoded, fenced=True)
        written = self._fenced_update(
            "write_result", job_id, token, request, rerun_ends=False,
            lands_as={"status": S(JobState.SUCCEEDED), "result_token": N(token),
                      "result_digest": S(encoded.digest)})
        return WriteOutcome.WRITTEN if written else WriteOutcome.ALREADY_WRITTEN

    def write_result_unfenced(self, job_id: str, token: int, result: Any) -> None:
        """THE BUG the fencing token exists to prevent; only the gc-pause scenario's --no-fencing uses it."""
        job_id, token = validate_job_id(job_id), validate_token(token)
        request = self._result_request(job_id, token, EncodedResult.of(result), fenced=False)
        log.warning("UNFENCED result write for %s with token %d: a stale writer can overwrite", job_id,
                    token, extra={"job_id": job_id, "token": token})
        self.items.update("write_result_unfenced", request)

    def _result_request(self, job_id: str, token: int, encoded: EncodedResult, *,
                        fenced: bool) -> dict[str, Any]:
        values: dict[str, Any] = {":succeeded": S(JobState.SUCCEEDED), ":mine": N(token),
                                  ":digest": S(encoded.digest), ":leased": S(JobState.LEASED),
                                  **self.items.finish_values(self.items.now_ms())}
        if encoded.size > self.large_result_bytes:
            if self.items.results is None:
                raise InvalidInput(f"result of {encoded.size} bytes exceeds {self.large_result_bytes} "
                                   "and no results bucket is configured", job_id=job_id)
            # Uploaded before the fenced write; the key carries token and digest, so even
            # a stale writer's upload cannot replace the object the current item points to.
            key = result_key(job_id, token, encoded.digest)
            values[":ref"] = S(self.items.results.put(key, encoded.text.encode("utf-8")))
            stored, dropped = "#ref = :ref", "#res"
        else:
            values[":res"] = S(encoded.text)
            stored, dropped = "#res = :res", "#ref"
        update = (f"SET #st = :succeeded, {stored}, #rt = :mine, #dig = :digest, #up = :now, "
                  f"#fin = :now, #exp = :exp REMOVE {dropped}")
        return self.items.request(job_id, update=update, condition=RESULT_FENCE if fenced else None,
                                  values=values)

    def record_failure(self, job_id: str, token: int, error: str, status: str) -> None:
        job_id, token = validate_job_id(job_id), validate_token(token)
        try:
            state = JobState(status)
        except ValueError:
            state = None
        if state not in FAILURE_STATES:
            raise InvalidInput(f"invalid failure status {status!r}: one of queued, failed, dead, cancelled")
        if not isinstance(error, str):
            raise InvalidInput("error must be a string")
        error = truncate_error(error)
        values = {":status": S(state), ":err": S(error), ":mine": N(token), ":leased": S(JobState.LEASED),
                  **self.items.finish_values(self.items.now_ms())}
        update = "SET #st = :status, #err = :err, #up = :now"
        if state in FINAL_STATES:
            update += ", #fin = :now, #exp = :exp"
        request = self.items.request(job_id, update=update, condition=FENCE, values=values)
        self._fenced_update("record_failure", job_id, token, request, rerun_ends=True,
                            lands_as={"status": S(state), "last_error": S(error)})

    def release(self, job_id: str, token: int) -> None:
        job_id, token = validate_job_id(job_id), validate_token(token)
        request = self.items.request(job_id, update="ADD #att :minus SET #st = :queued, #up = :now",
                                     condition=FENCE,
                                     values={":minus": N(-1), ":queued": S(JobState.QUEUED),
                                             ":now": N(self.items.now_ms()), ":mine": N(token),
                                             ":leased": S(JobState.LEASED)})
        self._fenced_update("release", job_id, token, request, rerun_ends=True,
                            lands_as={"status": S(JobState.QUEUED)})

    def _end_rerun(self, job_id: str, token: int, old: dict[str, Any] | None) -> None:
        """The current holder of a re-run of a succeeded job ended it: the job keeps its result.

        The re-run's token stays the newest (nobody is granted after it), so it is recorded
        as ended (``ended_token``): a ``FencedTable`` write from the re-run's handler after
        this, such as its abandoned thread after a hard timeout, is refused. Idempotent, so
        a retry of the failure or release reads the same.
        """
        if not (old is not None and item_int(old, "token") == token
                and item_str(old, "status") == JobState.SUCCEEDED):
            return
        if item_int(old, "ended_token") != token:
            request = self.items.request(job_id, update="SET #end = :mine",
                                         condition="#tok = :mine AND #st = :succeeded",
                                         values={":mine": N(token), ":succeeded": S(JobState.SUCCEEDED)})
            self.items.update("end_rerun", request)  # refused: a newer grant retired this token anyway
        raise AlreadyFinished(f"job {job_id} already succeeded; this re-run changes nothing",
                              job_id=job_id, status=JobState.SUCCEEDED.value, token=token)


class ProgressWrites:
    """``write_progress``: a lease holder's progress, fenced like its result."""

    def __init__(self, items: ItemTable, fence: Fence) -> None:
        self.items, self._fence = items, fence

    def write_progress(self, job_id: str, token: int, fraction: float, detail: str = "") -> None:
        """The holder's progress, fenced like its result: only ``token`` of a leased job moves it.

        A stale holder gets ``StaleToken``; nothing is retried here (the next report, or the
        throttle's flush, carries the latest value anyway)."""
        job_id, token = validate_job_id(job_id), validate_token(token)
        fraction, detail = validate_progress(fraction, detail)
        request = self.items.request(job_id, update="SET #pg = :pg, #pgd = :pgd, #pgt = :now",
                                     condition=FENCE,
                                     values={":pg": {"N": repr(fraction)}, ":pgd": S(detail),
                                             ":now": N(self.items.now_ms()), ":mine": N(token),
                                             ":leased": S(JobState.LEASED)})
        old, ok = self.items.update("write_progress", request)
        if not ok:
            raise classify(self._fence, "write_progress", job_id, token, old,
                           lambda msg: LeaseLost(msg, job_id=job_id, token=token))
