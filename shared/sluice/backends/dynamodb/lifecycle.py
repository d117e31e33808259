"""The lifecycle writes: the jobs table's writes made outside a lease.

``record_accepted`` / ``mark_queued`` (the relay, before any worker), ``request_cancel`` /
``cancel_unrecorded`` / ``honour_cancel`` (docs/api.md, DELETE),
``redrive`` (the jobs-table half of ``sluice.gateway.redrive``: the redrive generation) and
``settle_ended`` (the relay's write of a settle entry, fenced on that generation). See
docs/store.md.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from sluice.backends.dynamodb.codec import N, S, created_ms, generation, item_int, item_str
from sluice.backends.dynamodb.errors import is_conditional_failure, old_item, translate
from sluice.backends.dynamodb.items import ItemTable
from sluice.core import formats
from sluice.core.endings import Settled, redriven_waiting, settle_outcome
from sluice.core.errors import AlreadyFinished, InvalidInput, JobExists, JobNotFound, StoreError
from sluice.core.ids import named_key_id
from sluice.core.models import (
    FINAL_STATES,
    JobRecord,
    JobSpec,
    JobState,
    SettleEntry,
    truncate_error,
    validate_job_id,
    validate_queue_name,
)
from sluice.core.pools import LazyPool

# The fields of an item written for the first time by a lifecycle write (an item the gateway never
# created, or one that expired): its queue, creation time, attempts and fencing token.
BORN = ("#q = if_not_exists(#q, :queue), #cr = if_not_exists(#cr, :created), "
        "#att = if_not_exists(#att, :zero), #tok = if_not_exists(#tok, :zero)")


log = logging.getLogger("sluice.backends.dynamodb")

# A failed or dead item redriven since it last ran, its redriven attempt not granted yet
# (``core.endings.redriven_waiting``); needs ``:failed`` and ``:dead``.
REDRIVEN_WAITING = ("(#st IN (:failed, :dead) AND attribute_exists(#rg) "
                    "AND (attribute_not_exists(#run) OR #run < #rg))")


def state_of(item: dict[str, Any] | None) -> tuple[JobState | None, int, int]:
    """(status, redrive_gen, run_gen) of an item as the store returned it; (None, 0, 0) for none."""
    if item is None:
        return None, 0, 0
    status = item_str(item, "status")
    return (JobState(status) if status else None), item_int(item, "redrive_gen"), item_int(item, "run_gen")


_ABSENT = object()


class Unqueued:
    """Jobs the relay's read (``reads.JobReads.relay_view``) found with an item that ``mark_queued``
    is to leave as it is, until their ``mark_queued`` (a bounded memory: one forgotten is written
    as before).

    Two kinds (issue 30): an item past ``accepted``, whose write the condition refuses (DynamoDB
    bills a refused write all the same: a Kafka duplicate, a redriven job); and a family's job (a
    child or a continuation: an item naming its ``parent_id``, which the gateway created), which
    stays ``accepted`` until its grant. A child's ``queued`` cost one more write per child, and
    nothing decides on it (``relay.status``)."""

    def __init__(self, limit: int = 20_000) -> None:
        self._limit = limit
        self._ids: dict[str, None] = {}

    @staticmethod
    def leaves(item: dict[str, Any]) -> bool:
        return item_str(item, "status") != JobState.ACCEPTED or "parent_id" in item

    def note(self, job_id: str) -> None:
        if named_key_id(job_id) is not None:
            return  # the relay writes no ``queued`` for a keyed id at all (``relay.status.needs_item``)
        if len(self._ids) >= self._limit:
            self._ids.pop(next(iter(self._ids)), None)
        self._ids[job_id] = None

    def take(self, job_id: str) -> bool:
        """Whether ``mark_queued`` leaves ``job_id`` (forgotten then: the next read notes it again)."""
        return self._ids.pop(job_id, _ABSENT) is not _ABSENT


class Lifecycle:
    """The writes made outside a lease, on ``items``; ``pool`` runs ``mark_queued``'s writes, which
    leave the jobs ``unqueued`` holds."""

    def __init__(self, items: ItemTable, pool: LazyPool, unqueued: Unqueued | None = None) -> None:
        self.items, self._pool = items, pool
        self._unqueued = unqueued if unqueued is not None else Unqueued()

    def record_accepted(self, spec: JobSpec) -> None:
        """Write the ``accepted`` item of a job (tools and tests; the gateway writes none)."""
        if not isinstance(spec, JobSpec):
            raise InvalidInput("record_accepted takes a JobSpec")
        now = self.items.now_ms()
        item = {"job_id": S(spec.job_id), "queue": S(spec.queue), "status": S(JobState.ACCEPTED),
                "attempts": N(0), "token": N(0), "created_at_ms": N(spec.enqueued_at_ms or now),
                "updated_at_ms": N(now), "format_version": N(formats.ITEM)}
        try:
            self.items.client.put_item(TableName=self.items.table, Item=item,
                                       ConditionExpression="attribute_not_exists(job_id)",
                                       ReturnValuesOnConditionCheckFailure="ALL_OLD")
        except ClientError as exc:
            if not is_conditional_failure(exc):
                raise translate(exc, "record_accepted") from exc
            old = old_item(exc)
            if old is not None and item_str(old, "queue") != spec.queue:
                raise JobExists(f"job {spec.job_id} exists in queue {item_str(old, 'queue')}",
                                job_id=spec.job_id) from exc
            # Otherwise: a retry, or the relay or a worker got there first. Nothing to do.
        except BotoCoreError as exc:
            raise translate(exc, "record_accepted") from exc

    def mark_queued(self, jobs: Sequence[tuple[str, str, int]]) -> None:
        """accepted -> queued, creating the item if absent. Best effort: failures are logged.

        A job already leased or finished keeps its state (the condition fails, as intended).
        The third element is the job's enqueue time (``JobSpec.enqueued_at_ms``; 0 if unknown):
        the gateway writes no item, so this is where ``created_at_ms`` is first stored, and it
        must be the acceptance time GET showed from the id, not the relay's clock. A job the
        relay's read found past ``accepted``, or a family's (``Unqueued``), is not written.
        """
        # All or none: one bad tuple refuses the batch before any write.
        pairs = [(validate_job_id(j), validate_queue_name(q), created_ms(c)) for j, q, c in jobs]
        pairs = [pair for pair in pairs if not self._unqueued.take(pair[0])]
        self._pool.map(lambda pair: self._mark_one(*pair), pairs)

    def _mark_one(self, job_id: str, queue: str, created_at_ms: int) -> None:
        now = self.items.now_ms()
        request = self.items.request(
            job_id,
            update=f"SET #st = :queued, #up = :now, {BORN}",
            condition="attribute_not_exists(#id) OR #st = :accepted",
            values={":queued": S(JobState.QUEUED), ":now": N(now), ":queue": S(queue),
                    ":created": N(created_at_ms or now), ":zero": N(0), ":accepted": S(JobState.ACCEPTED)})
        try:
            _, ok = self.items.update("mark_queued", request)
        except Exception as exc:  # tolerated: status lags, nothing else depends on it
            log.warning("mark_queued failed for %s: %s", job_id, exc, extra={"job_id": job_id})
            return
        if not ok:
            log.debug("mark_queued skipped %s: already past accepted", job_id, extra={"job_id": job_id})

    def honour_cancel(self, job_id: str) -> JobRecord:
        """End as cancelled a job whose cancel was requested and which nobody will run any more.

        For a caller that knows no grant can follow: the holder asked to stop died, and Redis
        removed the job (``cancel`` with ``settle``) or no longer has it. Safe whenever
        ``cancel_requested`` is set, because a grant then refuses. Returns the cancelled
        record; a job that finished anyway raises ``AlreadyFinished``.
        """
        job_id = validate_job_id(job_id)
        attrs, ok = self.honour(job_id, "honour_cancel")
        if ok and attrs is not None:
            return self.items.record(attrs)
        if attrs is None:
            raise JobNotFound(f"no job {job_id}", job_id=job_id)
        status = item_str(attrs, "status")
        if status == JobState.CANCELLED:
            return self.items.record(attrs)
        if status in FINAL_STATES:
            raise AlreadyFinished(f"job {job_id} already {status}", job_id=job_id, status=status)
        raise StoreError(f"honour_cancel: no cancel was requested for {job_id} ({status})", job_id=job_id)

    def honour(self, job_id: str, operation: str) -> tuple[dict[str, Any] | None, bool]:
        """The holder asked to stop never finished it (crashed, lease expired): cancel now.

        A job that finished anyway (its holder wrote a result before seeing the request)
        keeps its final state; it is still not run again.
        """
        now = self.items.now_ms()
        request = self.items.request(
            job_id, update="SET #st = :cancelled, #up = :now, #fin = :now, #exp = :exp",
            condition="#cx = :true AND #st IN (:accepted, :queued, :leased)",
            values={":cancelled": S(JobState.CANCELLED), ":true": {"BOOL": True},
                    ":accepted": S(JobState.ACCEPTED), ":queued": S(JobState.QUEUED),
                    ":leased": S(JobState.LEASED), **self.items.finish_values(now)},
            ReturnValues="ALL_NEW")
        return self.items.update(operation, request)

    def request_cancel(self, job_id: str) -> JobRecord:
        job_id = validate_job_id(job_id)
        for _ in range(5):  # the status may move between our two conditional writes
            now = self.items.now_ms()
            request = self.items.request(
                job_id, update="SET #st = :cancelled, #up = :now, #fin = :now, #exp = :exp",
                condition="#st IN (:accepted, :queued)",
                values={":cancelled": S(JobState.CANCELLED), ":accepted": S(JobState.ACCEPTED),
                        ":queued": S(JobState.QUEUED), **self.items.finish_values(now)},
                ReturnValues="ALL_NEW")
            attrs, ok = self.items.update("request_cancel", request)
            if ok and attrs is not None:
                return self.items.record(attrs)
            if attrs is None:
                raise JobNotFound(f"no job {job_id}", job_id=job_id)
            status = item_str(attrs, "status")
            if redriven_waiting(*state_of(attrs)):
                # A redriven job waiting for its grant: cancelled as a queued one (issue 29).
                attrs, ok = self._cancel_redriven(job_id, attrs, now)
                if ok and attrs is not None:
                    return self.items.record(attrs)
                continue
            if status in FINAL_STATES:
                raise AlreadyFinished(f"job {job_id} already {status}", job_id=job_id, status=status)
            if status == JobState.LEASED:
                # The holder sees the flag on its next heartbeat and stops; grant honours it too.
                request = self.items.request(job_id, update="SET #cx = :true, #up = :now",
                                             condition="#st = :leased",
                                             values={":true": {"BOOL": True}, ":now": N(now),
                                                     ":leased": S(JobState.LEASED)},
                                             ReturnValues="ALL_NEW")
                attrs, ok = self.items.update("request_cancel", request)
                if ok and attrs is not None:
                    return self.items.record(attrs)
        raise StoreError(f"request_cancel: the status of {job_id} kept changing", job_id=job_id)

    def _cancel_redriven(self, job_id: str, old: dict[str, Any],
                         now: int) -> tuple[dict[str, Any] | None, bool]:
        """Cancel a ``failed``/``dead`` item whose redriven attempt waits for its grant, on the item
        as read (same status and generation, still not granted). ``run_gen`` becomes the redrive
        generation: the cancel is that generation's ending (its completion event, ``relay_view``)."""
        gen = item_int(old, "redrive_gen")
        request = self.items.request(
            job_id, update="SET #st = :cancelled, #up = :now, #fin = :now, #exp = :exp, #run = :gen",
            condition=f"{REDRIVEN_WAITING} AND #st = :was AND #rg = :gen",
            values={":cancelled": S(JobState.CANCELLED), ":failed": S(JobState.FAILED),
                    ":dead": S(JobState.DEAD), ":was": S(item_str(old, "status") or ""), ":gen": N(gen),
                    **self.items.finish_values(now)},
            ReturnValues="ALL_NEW")
        return self.items.update("request_cancel", request)

    def redrive(self, job_id: str) -> int:
        """The jobs-table half of a redrive: mint the job's next redrive generation.

        ``sluice.gateway.redrive`` calls this before it moves the job out of Redis's dead set with
        the generation, which the next lease hands to the grant. The status stays as it is
        until that grant (so a redrive whose Redis half fails changes nothing); the item
        stops expiring (its token must survive until the job runs) and an earlier cancel
        request is dropped (the operator's redrive supersedes it). Refused with
        ``JobNotFound`` when the item is gone: its record expired (``retention_days``) and
        with it the job's highest token, so a redrive would hand out tokens that were
        already used; purge it and enqueue the work again under a new id. A cancelled or
        succeeded job is ``AlreadyFinished``.
        """
        job_id = validate_job_id(job_id)
        request = self.items.request(
            job_id, update="ADD #rg :one SET #up = :now REMOVE #exp, #cx",
            condition="attribute_exists(#id) AND NOT (#st IN (:cancelled, :succeeded))",
            values={":one": N(1), ":now": N(self.items.now_ms()), ":cancelled": S(JobState.CANCELLED),
                    ":succeeded": S(JobState.SUCCEEDED)},
            ReturnValues="UPDATED_NEW")
        attrs, ok = self.items.update("redrive", request)
        if ok and attrs is not None:
            return item_int(attrs, "redrive_gen")
        if attrs is None:
            raise JobNotFound(f"job {job_id} has no record in the jobs table: it expired after it ended "
                              "(or the relay has not settled its ending yet); a redrive could hand out "
                              "fencing tokens already used, so it is refused. Purge it and enqueue the "
                              "work again under a new id", job_id=job_id)
        status = item_str(attrs, "status")
        raise AlreadyFinished(f"job {job_id} already {status}; a redrive cannot run it again",
                              job_id=job_id, status=status)

    def cancel_unrecorded(self, job_id: str, queue: str, reason: str, created_at_ms: int = 0) -> JobRecord:
        """Cancel a job that may have no item yet (the gateway writes none on accept).

        Creates a ``cancelled`` item when there is none; otherwise ``request_cancel``
        (so a finished job raises AlreadyFinished and a leased one is flagged).
        ``created_at_ms``: when the job was accepted, if known (0: now).
        """
        job_id, queue = validate_job_id(job_id), validate_queue_name(queue)
        created = created_ms(created_at_ms)
        if not isinstance(reason, str) or not reason:
            raise InvalidInput("reason must be a non-empty string")
        now = self.items.now_ms()
        item = {"job_id": S(job_id), "queue": S(queue), "status": S(JobState.CANCELLED), "attempts": N(0),
                "token": N(0), "created_at_ms": N(created or now), "updated_at_ms": N(now),
                "finished_at_ms": N(now),
                "last_error": S(truncate_error(reason)),
                "expires_at": N(now // 1000 + self.items.retention_s)}
        if not self.items.put_new("cancel_unrecorded", item):
            return self.request_cancel(job_id)
        return self.items.record(item)

    def refuse_record(self, job_id: str, queue: str, reason: str, created_at_ms: int = 0, *,
                      queued: bool = False) -> bool:
        """End ``dead``, with ``reason``, a job whose Kafka record the relay refused for its seal or
        its age (docs/security.md, "Records"). Only while it has no item or an ``accepted`` one (a
        child's, before its record came): a refused copy never ends a job that was pushed, runs or
        ended. ``queued``: a genuine record past the life bound (replayed after a Redis loss) ends a
        ``queued`` item too, which no push will move on any more. True if written."""
        job_id, queue = validate_job_id(job_id), validate_queue_name(queue)
        if not isinstance(reason, str) or not reason:
            raise InvalidInput("reason must be a non-empty string")
        now = self.items.now_ms()
        request = self.items.request(
            job_id,
            update=f"SET #st = :state, #err = :err, #up = :now, #fin = :now, #exp = :exp, {BORN}",
            condition="attribute_not_exists(#id) OR #st IN (:accepted, :queued)",
            values={":state": S(JobState.DEAD), ":err": S(truncate_error(reason)), ":queue": S(queue),
                    ":created": N(created_ms(created_at_ms) or now), ":zero": N(0),
                    ":accepted": S(JobState.ACCEPTED),
                    ":queued": S(JobState.QUEUED if queued else JobState.ACCEPTED),
                    **self.items.finish_values(now)})
        _, ok = self.items.update("refuse_record", request)
        return ok

    def settle_ended(self, ended: SettleEntry) -> Settled:
        """Tell the jobs table that Redis ended a job no worker is left to report (``keys.settle``).

        Applies only while the item is not final (a worker's own verdict, or a succeeded
        result, always wins), or while it is a redriven job whose redriven attempt (the
        entry's generation) was never granted: that attempt's ending is recorded as a queued
        job's would be (``core.endings``, issue 29); creates the item if the relay's
        ``mark_queued`` never did. Fenced like every write: only on the attempt that ended,
        that is while no newer redrive generation than the entry's has been minted
        (``redrive_gen``) or granted (``run_gen``). Minted counts, not only granted: a redrive
        that lands between the relay's read of the settle set and this write has already put
        the job back in Redis, and a job never granted since would otherwise end ``dead``
        while it waits (the job model found this). A job leaves Redis's dead set or comes back
        after a cancel only through a redrive, so a newer grant within the same generation
        cannot exist. ``run_gen`` becomes the entry's generation: the ending used it up.
        ``Settled.FINAL`` when the item is succeeded or cancelled (Redis's dead job is residue).
        """
        job_id, queue = validate_job_id(ended.job_id), validate_queue_name(ended.queue)
        gen = generation(ended.redrive_gen or 0)
        if ended.status not in (JobState.DEAD, JobState.CANCELLED):
            raise InvalidInput(f"settle_ended takes dead or cancelled, not {ended.status.value}")
        why = ended.last_error if ended.status is JobState.DEAD and ended.last_error else (
            "the lease expired on the last attempt" if ended.status is JobState.DEAD
            else "cancelled: the lease ended after a cancel request")
        now = self.items.now_ms()
        request = self.items.request(
            job_id,
            update="SET #st = :state, #err = :err, #up = :now, #fin = :now, #exp = :exp, #run = :gen, "
                   f"{BORN}",
            condition="(attribute_not_exists(#id) OR #st IN (:accepted, :queued, :leased) "
                      f"OR ({REDRIVEN_WAITING} AND #rg = :gen)) "
                      "AND (attribute_not_exists(#run) OR #run <= :gen) "
                      "AND (attribute_not_exists(#rg) OR #rg <= :gen)",
            values={":state": S(ended.status), ":err": S(truncate_error(why)), ":queue": S(queue),
                    ":created": N(now), ":zero": N(0), ":accepted": S(JobState.ACCEPTED),
                    ":queued": S(JobState.QUEUED), ":leased": S(JobState.LEASED), ":gen": N(gen),
                    ":failed": S(JobState.FAILED), ":dead": S(JobState.DEAD),
                    **self.items.finish_values(now)})
        attrs, ok = self.items.update("settle_ended", request)
        if ok:
            return Settled.WRITTEN
        found = settle_outcome(*state_of(attrs), gen)
        # A refusal the rules would have written: the item changed in between (a grant, a redrive).
        return Settled.MOVED_ON if found is Settled.WRITTEN else found
