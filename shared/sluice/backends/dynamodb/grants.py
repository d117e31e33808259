"""The token authority: ``grant`` mints a job's fencing token in the jobs table.

``ADD token 1`` with ``ALL_NEW``: the answer is the item, so the grant also tells whether a
continuation waits for the job (``families.GrantedSlots``). DynamoDB has made the increment
durable before it answers, so fencing tokens stay strictly increasing per job whatever
happens to Redis, whose own lease token is used only for liveness. See docs/store.md.
"""

from __future__ import annotations

from typing import Any

from sluice.backends.dynamodb.codec import N, S, generation, item_int, item_str, lease_token_of
from sluice.backends.dynamodb.families import GrantedSlots
from sluice.backends.dynamodb.items import ItemTable
from sluice.backends.dynamodb.lifecycle import Lifecycle
from sluice.core.errors import AlreadyFinished, InvalidInput, JobCancelled, LeaseLost
from sluice.core.ids import NO_QUEUE, queue_in_id, ulid_time_ms
from sluice.core.models import FINAL_STATES, JobState, validate_job_id, validate_queue_name

NOT_CANCELLED = "(attribute_not_exists(#cx) OR #cx = :false)"
# A grant never leaves a final state, except failed or dead for a redrive generation newer than the
# one the item last ran under (and no newer than the redrives the item recorded): only an explicit
# redrive (sluice.gateway.redrive) re-opens a job, never a lease that lapsed after the verdict was written.
OPEN = "NOT (#st IN (:cancelled, :succeeded, :failed, :dead))"
REDRIVEN = "(#st IN (:failed, :dead) AND #rg >= :gen AND (attribute_not_exists(#run) OR #run < :gen))"
# run_gen never goes down: a lease of an older generation than the item last ran under was taken
# before a redrive that has run since, so its holder is stale (its Redis lease long gone). Were run_gen
# lowered, a redriven job that then ended unrun (a reap, a settle) would look redriven again, and the
# relay, which pushes a replayed job with the item's redrive_gen, would run it once more.
NOT_OLDER = "(attribute_not_exists(#run) OR #run <= :gen)"
# The grant is fenced on the Redis lease too: the item keeps the lease token of its latest grant, and a
# grant from an older lease is refused. A worker that checked its lease, then paused past its grant
# margin while the lease lapsed and another worker leased and was granted the job, would otherwise
# grant late and make that holder stale (the job model's grant-after-long-pause). Equal: the same lease
# (botocore retrying a grant whose answer was lost); lease tokens never repeat across a Redis loss or a
# failover to a lagging replica (_lib.lua take_seq). An older lease's grant that lands first is superseded
# by the newer one's.
LEASE_NEWER = "(attribute_not_exists(#lt) OR #lt <= :lt)"
MAX_OWNER_CHARS = 256


def accepted_ms(job_id: str, now_ms: int) -> int:
    """When the job was accepted, for an item its grant creates: the id's ULID time (a keyed id's
    item is first written by its grant: the relay writes no ``queued`` for it, ``relay.status``), so
    ``GET`` shows the acceptance time before and after the grant alike; ``now_ms`` for an id of
    another shape, and at most ``now_ms`` (an id is not proof of its time)."""
    ulid_ms = ulid_time_ms(job_id.split(".", 1)[0])
    return now_ms if ulid_ms is None else min(ulid_ms, now_ms)


class Grants:
    """``grant`` on ``items``; a cancel found pending is honoured through ``lifecycle``, and what
    each grant's item says about a continuation is kept in ``slots``."""

    def __init__(self, items: ItemTable, lifecycle: Lifecycle, slots: GrantedSlots) -> None:
        self.items, self._lifecycle, self._slots = items, lifecycle, slots

    def grant(self, job_id: str, queue: str, owner: str, redrive_gen: int = 0, *,
              lease_token: int | None = None) -> int:
        """The next fencing token for a lease just taken in Redis.

        ``redrive_gen``: the job's redrive generation in Redis (``LeasedJob.redrive_gen``).
        A failed or dead item is granted only for a generation newer than the one it last
        ran under (``AlreadyFinished`` otherwise); a redriven job's item must exist (its
        token cannot restart at 1: ``AlreadyFinished`` with status "expired").
        ``lease_token``: the Redis lease's (``LeasedJob.lease_token``), recorded on the item;
        a lease older than the one granted last is refused (``LeaseLost``: ``LEASE_NEWER``).
        None (callers that hold no Redis lease: tests, tools) neither checks nor records one.
        """
        job_id, queue = validate_job_id(job_id), validate_queue_name(queue)
        named = queue_in_id(job_id)
        if named not in (NO_QUEUE, queue):
            # Issue 27: a grant in one queue never creates (or touches) an item for an id another
            # queue's gateway minted: what IAM's LeadingKeys allows a team follows the id.
            raise InvalidInput(f"job {job_id} names queue {named!r}, not {queue!r}: no token granted, "
                               "no item written", job_id=job_id)
        if not isinstance(owner, str) or not owner or len(owner) > MAX_OWNER_CHARS:
            raise InvalidInput(f"invalid lease owner {owner!r}: 1..{MAX_OWNER_CHARS} characters")
        gen, lease = generation(redrive_gen), lease_token_of(lease_token)
        now = self.items.now_ms()
        values = {":one": N(1), ":leased": S(JobState.LEASED), ":owner": S(owner), ":now": N(now),
                  ":created": N(accepted_ms(job_id, now)),
                  ":queue": S(queue), ":cancelled": S(JobState.CANCELLED), ":false": {"BOOL": False},
                  ":succeeded": S(JobState.SUCCEEDED), ":failed": S(JobState.FAILED),
                  ":dead": S(JobState.DEAD), ":gen": N(gen), ":lt": N(lease or 0)}
        fence, record = ("", "") if lease is None else (f" AND {LEASE_NEWER}", ", #lt = :lt")
        kept = f"{NOT_CANCELLED} AND {NOT_OLDER}{fence}"
        condition = (f"attribute_not_exists(#id) OR ({OPEN} AND {kept})" if gen == 0
                     else f"attribute_exists(#id) AND {kept} AND ({OPEN} OR {REDRIVEN})")
        request = self.items.request(
            job_id,
            update="ADD #tok :one, #att :one SET #st = :leased, #own = :owner, #up = :now, #run = :gen, "
                   f"#q = if_not_exists(#q, :queue), #cr = if_not_exists(#cr, :created){record} "
                   "REMOVE #exp, #fin",
            condition=condition, values=values, ReturnValues="ALL_NEW")
        attrs, ok = self.items.update("grant", request)
        if ok and attrs is not None:
            self._slots.granted(job_id, attrs)
            return item_int(attrs, "token")
        status = item_str(attrs, "status") if attrs is not None else None
        ran = item_int(attrs, "run_gen") if attrs is not None else 0
        if ran > gen and status not in FINAL_STATES:
            raise LeaseLost(f"job {job_id} ran under redrive generation {ran} since this lease (generation "
                            f"{gen}) was taken: the lease is stale; no token granted", job_id=job_id)
        self._refuse_older_lease(job_id, attrs, lease)
        if attrs is None or status in (JobState.FAILED, JobState.DEAD):
            # The verdict was written and then the lease lapsed (the worker died before it told
            # Redis), or the item expired after it ended: not run again without a redrive.
            raise AlreadyFinished(f"job {job_id} already {status or 'ended and its record expired'}; "
                                  "not run again without a redrive", job_id=job_id,
                                  status=status or "expired", redrive_gen=gen)
        if status == JobState.SUCCEEDED:
            # A re-run (its worker crashed before the ack): a newer token, the status stays.
            request = self.items.request(
                job_id, update=f"ADD #tok :one, #att :one SET #own = :owner, #up = :now{record}",
                condition=f"#st = :succeeded AND (attribute_not_exists(#cx) OR #cx = :false){fence}",
                values=values, ReturnValues="ALL_NEW")
            attrs, ok = self.items.update("grant", request)
            if ok and attrs is not None:
                self._slots.granted(job_id, attrs)
                return item_int(attrs, "token")
            self._refuse_older_lease(job_id, attrs, lease)  # a newer lease was granted in between
        if status not in (JobState.CANCELLED, JobState.SUCCEEDED):
            self._lifecycle.honour(job_id, "grant.cancel")
        raise JobCancelled(f"job {job_id} was cancelled; no lease granted", job_id=job_id)

    @staticmethod
    def _refuse_older_lease(job_id: str, attrs: dict[str, Any] | None, lease: int | None) -> None:
        """``LeaseLost`` if the item (as a refused grant found it) was granted to a newer lease."""
        granted = item_int(attrs, "lease_token") if attrs is not None else 0
        if lease is not None and granted > lease:
            raise LeaseLost(f"job {job_id} was granted to a newer lease (lease token {granted}) than this "
                            f"one ({lease}): the lease is stale; no token granted", job_id=job_id,
                            lease_token=lease, granted_lease_token=granted)
