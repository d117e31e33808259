"""The jobs table: job status for users, and the fencing-token authority for workers.

One item per job (partition key ``job_id``). ``grant`` mints the fencing token with
``ADD token 1`` and returns it (``UPDATED_NEW``): DynamoDB has made the increment
durable before it answers, so tokens stay strictly increasing per job whatever
happens to Redis, whose own lease token is used only for liveness.

Every write a lease holder makes is conditional on ``token = :mine AND status =
leased``. When the condition fails DynamoDB returns the item as it was
(``ReturnValuesOnConditionCheckFailure=ALL_OLD``), and that one read-free answer
says which of three things happened: my own earlier write had landed (same token,
same digest: success), a newer token exists (``StaleToken``, counted and logged
with both tokens), or something else (typed error). So a retry never writes twice
and never needs a read first. See docs/store.md.

Once ``succeeded``, a job stays succeeded. A re-run (the worker crashed before its
ack) is granted a newer token and may write its result again, but a re-run that
fails, is released or dies cannot take the stored result's status away.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from sluice.config import Settings
from sluice.errors import (
    AlreadyFinished,
    BackendUnavailable,
    InvalidInput,
    JobCancelled,
    JobExists,
    JobNotFound,
    StoreError,
)
from sluice.events import EventBus
from sluice.models import (
    FINAL_STATES,
    JobRecord,
    JobSpec,
    JobState,
    WriteOutcome,
    validate_job_id,
    validate_queue_name,
    validate_token,
)
from sluice.pools import LazyPool
from sluice.ports import Metrics, ResultSink
from sluice.store.endings import Endings
from sluice.store.errors import is_conditional_failure, old_item, translate, translated
from sluice.store.fenced import EmfMetrics, Fence, FencedTable, classify, item_int, item_str
from sluice.store.items import MAX_ERROR_CHARS, N, S, _created, _generation
from sluice.store.results import EncodedResult, S3ResultSink, result_key

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

log = logging.getLogger("sluice.store")

FENCE = "#tok = :mine AND #st = :leased"
# A result may also be written by the current holder of a re-run of a succeeded job, once:
# its own earlier write (same token) must read as "already written", never land twice.
RESULT_FENCE = "#tok = :mine AND (#st = :leased OR (#st = :succeeded AND #rt < :mine))"
FAILURE_STATES = frozenset({JobState.QUEUED, JobState.FAILED, JobState.DEAD, JobState.CANCELLED})
NOT_CANCELLED = "(attribute_not_exists(#cx) OR #cx = :false)"
# A grant never leaves a final state, except failed or dead for a redrive generation newer than the
# one the item last ran under (and no newer than the redrives the item recorded): only an explicit
# redrive (sluice.redrive) re-opens a job, never a lease that lapsed after the verdict was written.
OPEN = "NOT (#st IN (:cancelled, :succeeded, :failed, :dead))"
REDRIVEN = "(#st IN (:failed, :dead) AND #rg >= :gen AND (attribute_not_exists(#run) OR #run < :gen))"
MAX_OWNER_CHARS = 256
BATCH_GET_LIMIT = 100
BATCH_GET_ROUNDS = 8


def _system_now_ms() -> int:
    return time.time_ns() // 1_000_000


class DynamoJobStore(Endings):
    """``ports.JobStore`` on a DynamoDB table, with large results in S3."""

    def __init__(self, client: DynamoDBClient, table_name: str = "sluice-jobs", *,
                 results: ResultSink | None = None, large_result_bytes: int = 300_000,
                 retention_days: int = 14, metrics: Metrics | None = None,
                 now_ms: Callable[[], int] = _system_now_ms, sleep: Callable[[float], None] = time.sleep,
                 max_workers: int = 16, fencing: bool = True) -> None:
        self._db = client
        # False only for the gc-pause scenario's --no-fencing: result writes go unconditional
        # (write_result_unfenced), the bug the fencing token exists to prevent.
        self.fencing = fencing
        self.table = table_name
        self._results = results
        self.large_result_bytes = large_result_bytes
        self.retention_s = retention_days * 86_400
        self._fence = Fence(metrics)
        self._now_ms = now_ms
        self._sleep = sleep
        self._pool = LazyPool(max_workers, "sluice-store")

    @classmethod
    def from_settings(cls, settings: Settings, *, metrics: Metrics | None = None,
                      fencing: bool = True) -> DynamoJobStore:
        import boto3

        config = Config(retries={"mode": "standard", "total_max_attempts": 4}, connect_timeout=3,
                        read_timeout=10, max_pool_connections=32)
        common: dict[str, Any] = {"region_name": settings.aws_region, "config": config,
                                  "endpoint_url": settings.aws_endpoint_url}
        return cls(boto3.client("dynamodb", **common), settings.jobs_table,
                   results=S3ResultSink(boto3.client("s3", **common), settings.results_bucket),
                   large_result_bytes=settings.large_result_bytes, retention_days=settings.retention_days,
                   metrics=metrics if metrics is not None else EmfMetrics(), fencing=fencing)

    # -- the token authority ----------------------------------------------------------------

    def grant(self, job_id: str, queue: str, owner: str, redrive_gen: int = 0) -> int:
        """The next fencing token for a lease just taken in Redis.

        ``redrive_gen``: the job's redrive generation in Redis (``LeasedJob.redrive_gen``).
        A failed or dead item is granted only for a generation newer than the one it last
        ran under (``AlreadyFinished`` otherwise); a redriven job's item must exist (its
        token cannot restart at 1: ``AlreadyFinished`` with status "expired").
        """
        job_id, queue = validate_job_id(job_id), validate_queue_name(queue)
        if not isinstance(owner, str) or not owner or len(owner) > MAX_OWNER_CHARS:
            raise InvalidInput(f"invalid lease owner {owner!r}: 1..{MAX_OWNER_CHARS} characters")
        gen = _generation(redrive_gen)
        now = self._now_ms()
        values = {":one": N(1), ":leased": S(JobState.LEASED), ":owner": S(owner), ":now": N(now),
                  ":queue": S(queue), ":cancelled": S(JobState.CANCELLED), ":false": {"BOOL": False},
                  ":succeeded": S(JobState.SUCCEEDED), ":failed": S(JobState.FAILED),
                  ":dead": S(JobState.DEAD), ":gen": N(gen)}
        condition = (f"attribute_not_exists(#id) OR ({OPEN} AND {NOT_CANCELLED})" if gen == 0 else
                     f"attribute_exists(#id) AND {NOT_CANCELLED} AND ({OPEN} OR {REDRIVEN})")
        request = self._request(
            job_id,
            update="ADD #tok :one, #att :one SET #st = :leased, #own = :owner, #up = :now, #run = :gen, "
                   "#q = if_not_exists(#q, :queue), #cr = if_not_exists(#cr, :now) REMOVE #exp, #fin",
            condition=condition, values=values, ReturnValues="UPDATED_NEW")
        attrs, ok = self._update("grant", request)
        if ok and attrs is not None:
            return item_int(attrs, "token")
        status = item_str(attrs, "status") if attrs is not None else None
        if attrs is None or status in (JobState.FAILED, JobState.DEAD):
            # The verdict was written and then the lease lapsed (the worker died before it told
            # Redis), or the item expired after it ended: not run again without a redrive.
            raise AlreadyFinished(f"job {job_id} already {status or 'ended and its record expired'}; "
                                  "not run again without a redrive", job_id=job_id,
                                  status=status or "expired", redrive_gen=gen)
        if status == JobState.SUCCEEDED:
            # A re-run (its worker crashed before the ack): a newer token, the status stays.
            request = self._request(
                job_id, update="ADD #tok :one, #att :one SET #own = :owner, #up = :now",
                condition="#st = :succeeded AND (attribute_not_exists(#cx) OR #cx = :false)",
                values=values, ReturnValues="UPDATED_NEW")
            attrs, ok = self._update("grant", request)
            if ok and attrs is not None:
                return item_int(attrs, "token")
        if status not in (JobState.CANCELLED, JobState.SUCCEEDED):
            self._honour(job_id, "grant.cancel")
        raise JobCancelled(f"job {job_id} was cancelled; no lease granted", job_id=job_id)

    # -- fenced writes -----------------------------------------------------------------------

    def write_result(self, job_id: str, token: int, result: Any) -> WriteOutcome:
        if not self.fencing:
            self.write_result_unfenced(job_id, token, result)
            return WriteOutcome.WRITTEN
        job_id, token = validate_job_id(job_id), validate_token(token)
        encoded = EncodedResult.of(result)
        request = self._result_request(job_id, token, encoded, fenced=True)
        old, ok = self._update("write_result", request)
        if ok:
            return WriteOutcome.WRITTEN
        if (old is not None and item_int(old, "token") == token
                and item_str(old, "status") == JobState.SUCCEEDED
                and item_int(old, "result_token", -1) == token
                and item_str(old, "result_digest") == encoded.digest):
            return WriteOutcome.ALREADY_WRITTEN  # a retry of my own write that had landed
        raise classify(self._fence, "write_result", job_id, token, old,
                       lambda msg: StoreError(msg, job_id=job_id, token=token))

    def write_result_unfenced(self, job_id: str, token: int, result: Any) -> None:
        """THE BUG the fencing token exists to prevent; only the gc-pause scenario's --no-fencing uses it."""
        job_id, token = validate_job_id(job_id), validate_token(token)
        request = self._result_request(job_id, token, EncodedResult.of(result), fenced=False)
        log.warning("UNFENCED result write for %s with token %d: a stale writer can overwrite", job_id,
                    token, extra={"job_id": job_id, "token": token})
        self._update("write_result_unfenced", request)

    def _result_request(self, job_id: str, token: int, encoded: EncodedResult, *,
                        fenced: bool) -> dict[str, Any]:
        values: dict[str, Any] = {":succeeded": S(JobState.SUCCEEDED), ":mine": N(token),
                                  ":digest": S(encoded.digest), ":leased": S(JobState.LEASED),
                                  **self._finish_values(self._now_ms())}
        if encoded.size > self.large_result_bytes:
            if self._results is None:
                raise InvalidInput(f"result of {encoded.size} bytes exceeds {self.large_result_bytes} "
                                   "and no results bucket is configured", job_id=job_id)
            # Uploaded before the fenced write; the key carries token and digest, so even
            # a stale writer's upload cannot replace the object the current item points to.
            key = result_key(job_id, token, encoded.digest)
            values[":ref"] = S(self._results.put(key, encoded.text.encode("utf-8")))
            stored, dropped = "#ref = :ref", "#res"
        else:
            values[":res"] = S(encoded.text)
            stored, dropped = "#res = :res", "#ref"
        update = (f"SET #st = :succeeded, {stored}, #rt = :mine, #dig = :digest, #up = :now, "
                  f"#fin = :now, #exp = :exp REMOVE {dropped}")
        return self._request(job_id, update=update, condition=RESULT_FENCE if fenced else None, values=values)

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
        error = error if len(error) <= MAX_ERROR_CHARS else error[:MAX_ERROR_CHARS] + "... [truncated]"
        now = self._now_ms()
        values = {":status": S(state), ":err": S(error), ":mine": N(token), ":leased": S(JobState.LEASED),
                  **self._finish_values(now)}
        update = "SET #st = :status, #err = :err, #up = :now"
        if state in FINAL_STATES:
            update += ", #fin = :now, #exp = :exp"
        old, ok = self._update("record_failure", self._request(job_id, update=update, condition=FENCE,
                                                               values=values))
        if ok or (old is not None and item_int(old, "token") == token and item_str(old, "status") == state
                  and item_str(old, "last_error") == error):
            return  # written now, or a retry of my own write that had landed
        self._end_rerun(job_id, token, old)
        raise classify(self._fence, "record_failure", job_id, token, old,
                       lambda msg: StoreError(msg, job_id=job_id, token=token))

    def release(self, job_id: str, token: int) -> None:
        job_id, token = validate_job_id(job_id), validate_token(token)
        request = self._request(job_id, update="ADD #att :minus SET #st = :queued, #up = :now",
                                condition=FENCE,
                                values={":minus": N(-1), ":queued": S(JobState.QUEUED),
                                        ":now": N(self._now_ms()), ":mine": N(token),
                                        ":leased": S(JobState.LEASED)})
        old, ok = self._update("release", request)
        if ok or (old is not None and item_int(old, "token") == token
                  and item_str(old, "status") == JobState.QUEUED):
            return  # released now, or a retry of my own release that had landed
        self._end_rerun(job_id, token, old)
        raise classify(self._fence, "release", job_id, token, old,
                       lambda msg: StoreError(msg, job_id=job_id, token=token))

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
            request = self._request(job_id, update="SET #end = :mine",
                                    condition="#tok = :mine AND #st = :succeeded",
                                    values={":mine": N(token), ":succeeded": S(JobState.SUCCEEDED)})
            self._update("end_rerun", request)  # refused: a newer grant retired this token anyway
        raise AlreadyFinished(f"job {job_id} already succeeded; this re-run changes nothing",
                              job_id=job_id, status=JobState.SUCCEEDED.value, token=token)

    def fenced_table(self, table_name: str, job_id: str, token: int, *,
                     events: EventBus | None = None) -> FencedTable:
        """A handler's own table, fenced on this job's token in this jobs table."""
        return FencedTable(self._db, table_name, job_id, token, jobs_table=self.table,
                           metrics=self._fence.metrics, events=events)

    # -- lifecycle outside a lease ------------------------------------------------------------

    def record_accepted(self, spec: JobSpec) -> None:
        if not isinstance(spec, JobSpec):
            raise InvalidInput("record_accepted takes a JobSpec")
        now = self._now_ms()
        item = {"job_id": S(spec.job_id), "queue": S(spec.queue), "status": S(JobState.ACCEPTED),
                "attempts": N(0), "token": N(0), "created_at_ms": N(spec.enqueued_at_ms or now),
                "updated_at_ms": N(now)}
        try:
            self._db.put_item(TableName=self.table, Item=item,
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
        must be the acceptance time GET showed from the id, not the relay's clock.
        """
        pairs = [(validate_job_id(j), validate_queue_name(q), _created(c)) for j, q, c in jobs]  # all or none
        self._pool.map(lambda pair: self._mark_one(*pair), pairs)

    def _mark_one(self, job_id: str, queue: str, created_at_ms: int) -> None:
        now = self._now_ms()
        request = self._request(
            job_id,
            update="SET #st = :queued, #up = :now, #q = if_not_exists(#q, :queue), "
                   "#cr = if_not_exists(#cr, :created), #att = if_not_exists(#att, :zero), "
                   "#tok = if_not_exists(#tok, :zero)",
            condition="attribute_not_exists(#id) OR #st = :accepted",
            values={":queued": S(JobState.QUEUED), ":now": N(now), ":queue": S(queue),
                    ":created": N(created_at_ms or now), ":zero": N(0), ":accepted": S(JobState.ACCEPTED)})
        try:
            _, ok = self._update("mark_queued", request)
        except Exception as exc:  # tolerated: status lags, nothing else depends on it
            log.warning("mark_queued failed for %s: %s", job_id, exc, extra={"job_id": job_id})
            return
        if not ok:
            log.debug("mark_queued skipped %s: already past accepted", job_id, extra={"job_id": job_id})

    def final_job_ids(self, job_ids: Iterable[str]) -> set[str]:
        ids = list(dict.fromkeys(validate_job_id(j) for j in job_ids))  # BatchGetItem refuses duplicates
        final: set[str] = set()
        for start in range(0, len(ids), BATCH_GET_LIMIT):
            keys: list[dict[str, Any]] = [{"job_id": S(j)} for j in ids[start:start + BATCH_GET_LIMIT]]
            for round_ in range(BATCH_GET_ROUNDS):
                response: Any
                with translated("batch_get_item"):
                    response = self._db.batch_get_item(RequestItems={self.table: {
                        "Keys": keys, "ConsistentRead": True,
                        "ProjectionExpression": "#id, #st",
                        "ExpressionAttributeNames": {"#id": "job_id", "#st": "status"}}})
                for item in response.get("Responses", {}).get(self.table, []):
                    if item_str(item, "status") in FINAL_STATES:
                        final.add(str(item["job_id"]["S"]))
                keys = list(response.get("UnprocessedKeys", {}).get(self.table, {}).get("Keys", []))
                if not keys:
                    break
                self._sleep(min(1.0, 0.025 * 2 ** round_))  # throttled: back off, then ask for the rest
            else:
                raise BackendUnavailable(f"batch_get_item left {len(keys)} keys unprocessed",
                                         unprocessed=len(keys))
        return final

    # -- reads -------------------------------------------------------------------------------

    def get_job(self, job_id: str, *, load_result: bool = True) -> JobRecord:
        job_id = validate_job_id(job_id)
        item = self._read(job_id)
        # TTL deletes lazily (up to days late); an expired item is already gone for users.
        if item is None or 0 < item_int(item, "expires_at") <= self._now_ms() // 1000:
            raise JobNotFound(f"no job {job_id}", job_id=job_id)
        return self._record(item, load_result=load_result)

    def close(self) -> None:
        self._pool.close()
