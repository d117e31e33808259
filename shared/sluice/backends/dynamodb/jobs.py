"""The jobs table: job status for users, and the fencing-token authority for workers.

One item per job (partition key ``job_id``). ``grant`` mints the fencing token with
``ADD token 1`` and returns it (``ALL_NEW``: the item, so the grant also tells whether
a continuation waits for the job, ``store/families.py``): DynamoDB has made the increment
durable before it answers, so fencing tokens stay strictly increasing per job whatever
happens to Redis, whose own lease token is used only for liveness.

``DynamoJobStore`` is the ``ports.JobStore`` adapter, composed of its parts: the item
codec (``codec.py``), the request plumbing (``items.py``), the fenced writes of a lease
holder (``leases.py``) and the lifecycle writes made outside a lease (``lifecycle.py``).
This module adds the token authority, the reads, and the wiring (S3, a thread pool).
See docs/store.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from sluice.backends.aws.metrics import EmfMetrics
from sluice.backends.dynamodb.client import CONFIG, dynamodb_client
from sluice.backends.dynamodb.codec import N, S, generation, item_int, item_str, lease_token_of
from sluice.backends.dynamodb.errors import translated
from sluice.backends.dynamodb.families import Families
from sluice.backends.dynamodb.fenced import Fence
from sluice.backends.dynamodb.leases import LeaseWrites
from sluice.backends.dynamodb.lifecycle import Lifecycle
from sluice.backends.dynamodb.results import S3ResultSink
from sluice.core.clock import wall_ms
from sluice.core.config import Settings
from sluice.core.errors import (
    AlreadyFinished,
    BackendUnavailable,
    InvalidInput,
    JobCancelled,
    JobNotFound,
    LeaseLost,
)
from sluice.core.models import FINAL_STATES, JobRecord, JobState, validate_job_id, validate_queue_name
from sluice.core.pools import LazyPool
from sluice.core.ports import Metrics, ResultSink

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

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
# (botocore retrying a grant whose answer was lost); lease tokens never repeat across a Redis loss
# (_lib.lua take_seq). An older lease's grant that lands first is superseded by the newer one's.
LEASE_NEWER = "(attribute_not_exists(#lt) OR #lt <= :lt)"
MAX_OWNER_CHARS = 256
BATCH_GET_LIMIT = 100
BATCH_GET_ROUNDS = 8


class DynamoJobStore(LeaseWrites, Lifecycle, Families):
    """``ports.JobStore`` on a DynamoDB table, with large results in S3."""

    def __init__(self, client: DynamoDBClient, table_name: str = "sluice-jobs", *,
                 results: ResultSink | None = None, large_result_bytes: int = 300_000,
                 retention_days: int = 14, metrics: Metrics | None = None,
                 now_ms: Callable[[], int] = wall_ms, sleep: Callable[[float], None] = time.sleep,
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
        self._continuations: dict[str, tuple[str, int] | None] = {}  # job id -> its slot, from its grant

    @property
    def client(self) -> DynamoDBClient:
        """Its DynamoDB client, for other adapters on the same table (recovery's checkpoints)."""
        return self._db

    @classmethod
    def from_settings(cls, settings: Settings, *, client: DynamoDBClient | None = None,
                      metrics: Metrics | None = None, fencing: bool = True) -> DynamoJobStore:
        """``client``: the container's DynamoDB client (``wiring.dynamodb``); else a new one."""
        import boto3

        common: dict[str, Any] = {"region_name": settings.aws_region, "config": CONFIG,
                                  "endpoint_url": settings.aws_endpoint_url}
        return cls(client or dynamodb_client(settings), settings.jobs_table,
                   results=S3ResultSink(None, settings.results_bucket,
                                        build_client=lambda: boto3.client("s3", **common)),
                   large_result_bytes=settings.large_result_bytes, retention_days=settings.retention_days,
                   metrics=metrics if metrics is not None else EmfMetrics(), fencing=fencing)

    # -- the token authority ----------------------------------------------------------------

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
        if not isinstance(owner, str) or not owner or len(owner) > MAX_OWNER_CHARS:
            raise InvalidInput(f"invalid lease owner {owner!r}: 1..{MAX_OWNER_CHARS} characters")
        gen, lease = generation(redrive_gen), lease_token_of(lease_token)
        now = self._now_ms()
        values = {":one": N(1), ":leased": S(JobState.LEASED), ":owner": S(owner), ":now": N(now),
                  ":queue": S(queue), ":cancelled": S(JobState.CANCELLED), ":false": {"BOOL": False},
                  ":succeeded": S(JobState.SUCCEEDED), ":failed": S(JobState.FAILED),
                  ":dead": S(JobState.DEAD), ":gen": N(gen), ":lt": N(lease or 0)}
        fence, record = ("", "") if lease is None else (f" AND {LEASE_NEWER}", ", #lt = :lt")
        kept = f"{NOT_CANCELLED} AND {NOT_OLDER}{fence}"
        condition = (f"attribute_not_exists(#id) OR ({OPEN} AND {kept})" if gen == 0
                     else f"attribute_exists(#id) AND {kept} AND ({OPEN} OR {REDRIVEN})")
        request = self._request(
            job_id,
            update="ADD #tok :one, #att :one SET #st = :leased, #own = :owner, #up = :now, #run = :gen, "
                   f"#q = if_not_exists(#q, :queue), #cr = if_not_exists(#cr, :now){record} "
                   "REMOVE #exp, #fin",
            condition=condition, values=values, ReturnValues="ALL_NEW")
        attrs, ok = self._update("grant", request)
        if ok and attrs is not None:
            self._granted(job_id, attrs)
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
            request = self._request(
                job_id, update=f"ADD #tok :one, #att :one SET #own = :owner, #up = :now{record}",
                condition=f"#st = :succeeded AND (attribute_not_exists(#cx) OR #cx = :false){fence}",
                values=values, ReturnValues="ALL_NEW")
            attrs, ok = self._update("grant", request)
            if ok and attrs is not None:
                self._granted(job_id, attrs)
                return item_int(attrs, "token")
            self._refuse_older_lease(job_id, attrs, lease)  # a newer lease was granted in between
        if status not in (JobState.CANCELLED, JobState.SUCCEEDED):
            self._honour(job_id, "grant.cancel")
        raise JobCancelled(f"job {job_id} was cancelled; no lease granted", job_id=job_id)

    @staticmethod
    def _refuse_older_lease(job_id: str, attrs: dict[str, Any] | None, lease: int | None) -> None:
        """``LeaseLost`` if the item (as a refused grant found it) was granted to a newer lease."""
        granted = item_int(attrs, "lease_token") if attrs is not None else 0
        if lease is not None and granted > lease:
            raise LeaseLost(f"job {job_id} was granted to a newer lease (lease token {granted}) than this "
                            f"one ({lease}): the lease is stale; no token granted", job_id=job_id,
                            lease_token=lease, granted_lease_token=granted)

    # -- batch reads ------------------------------------------------------------------------

    def final_job_ids(self, job_ids: Iterable[str]) -> set[str]:
        """The ids whose item is in a final state (one consistent read per 100 ids)."""
        statuses = self._statuses(job_ids)
        return {job_id for job_id, (status, _, _) in statuses.items() if status in FINAL_STATES}

    def relay_view(self, job_ids: Iterable[str]) -> tuple[set[str], dict[str, int]]:
        """What the relay needs of ``job_ids``, in the same read: the ids whose jobs are done with,
        and the redrive generation of every job that has one.

        A failed or dead job redriven since it last ran (``redrive_gen > run_gen``) is not done
        with: it will run again. So the relay pushes its records (``push.lua`` skips the job while
        Redis holds it) with the generation its grant needs, and recovery keeps them pending until
        the job ends again (docs/redis-loss.md, "Redriven jobs").
        """
        done: set[str] = set()
        gens: dict[str, int] = {}
        for job_id, (status, gen, run) in self._statuses(job_ids).items():
            if gen:
                gens[job_id] = gen
            if status in FINAL_STATES and not (status in (JobState.FAILED, JobState.DEAD) and gen > run):
                done.add(job_id)
        return done, gens

    def _statuses(self, job_ids: Iterable[str]) -> dict[str, tuple[str | None, int, int]]:
        """job id -> (status, redrive_gen, run_gen) of the items that exist."""
        ids = list(dict.fromkeys(validate_job_id(j) for j in job_ids))  # BatchGetItem refuses duplicates
        found: dict[str, tuple[str | None, int, int]] = {}
        for start in range(0, len(ids), BATCH_GET_LIMIT):
            keys: list[dict[str, Any]] = [{"job_id": S(j)} for j in ids[start:start + BATCH_GET_LIMIT]]
            for round_ in range(BATCH_GET_ROUNDS):
                response: Any
                with translated("batch_get_item"):
                    response = self._db.batch_get_item(RequestItems={self.table: {
                        "Keys": keys, "ConsistentRead": True,
                        "ProjectionExpression": "#id, #st, #rg, #run",
                        "ExpressionAttributeNames": {"#id": "job_id", "#st": "status", "#rg": "redrive_gen",
                                                     "#run": "run_gen"}}})
                for item in response.get("Responses", {}).get(self.table, []):
                    found[str(item["job_id"]["S"])] = (
                        item_str(item, "status"), item_int(item, "redrive_gen"), item_int(item, "run_gen"))
                keys = list(response.get("UnprocessedKeys", {}).get(self.table, {}).get("Keys", []))
                if not keys:
                    break
                self._sleep(min(1.0, 0.025 * 2 ** round_))  # throttled: back off, then ask for the rest
            else:
                raise BackendUnavailable(f"batch_get_item left {len(keys)} keys unprocessed",
                                         unprocessed=len(keys))
        return found

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
