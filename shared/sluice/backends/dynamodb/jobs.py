"""The jobs table: job status for users, and the fencing-token authority for workers.

One item per job (partition key ``job_id``). ``DynamoJobStore`` is the ``ports.JobStore``
adapter, composed of parts that each take the table's plumbing (``items.ItemTable``: the
client, the table, the item codec) and what else they need, and nothing of each other but
what they are handed:

- ``grants.Grants``: the token authority (``grant``);
- ``reads.JobReads``: a job's record, and the relay's batch reads;
- ``leases.LeaseWrites``: the fenced writes of a lease holder (result, failure, release);
- ``lifecycle.Lifecycle``: the writes made outside a lease (queued, cancel, redrive, settle);
- ``families.Families`` (``store.families``): the ``core.families.FamilyStore``;
- ``leases.ProgressWrites`` (``store.progress``) and ``fenced.FencedTables`` (``store.tables``).

The composition root (``sluice.entry.root``) hands each consumer the part it needs. This
module adds the wiring (S3, a thread pool, the metrics). See docs/store.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from sluice.backends.aws.metrics import EmfMetrics
from sluice.backends.dynamodb.client import CONFIG, dynamodb_client
from sluice.backends.dynamodb.families import Families, GrantedSlots
from sluice.backends.dynamodb.fenced import Fence, FencedTable, FencedTables
from sluice.backends.dynamodb.grants import Grants
from sluice.backends.dynamodb.items import ItemTable
from sluice.backends.dynamodb.leases import LeaseWrites, ProgressWrites
from sluice.backends.dynamodb.lifecycle import Lifecycle, Unqueued
from sluice.backends.dynamodb.reads import JobReads
from sluice.backends.dynamodb.results import S3ResultSink
from sluice.core.bus import EventBus
from sluice.core.clock import wall_ms
from sluice.core.config import Settings
from sluice.core.endings import Settled
from sluice.core.models import JobRecord, JobSpec, SettleEntry, WriteOutcome
from sluice.core.pools import LazyPool
from sluice.core.ports import Metrics, ResultSink

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


class DynamoJobStore:
    """``ports.JobStore`` on a DynamoDB table, with large results in S3; its other ports are
    ``families``, ``progress`` and ``tables``."""

    def __init__(self, client: DynamoDBClient, table_name: str = "sluice-jobs", *,
                 results: ResultSink | None = None, large_result_bytes: int = 300_000,
                 retention_days: int = 14, metrics: Metrics | None = None,
                 now_ms: Callable[[], int] = wall_ms, sleep: Callable[[float], None] = time.sleep,
                 max_workers: int = 16, fencing: bool = True) -> None:
        self._db = client
        self.table = table_name
        self.items = ItemTable(client, table_name, results=results, retention_days=retention_days,
                               now_ms=now_ms)
        fence = Fence(metrics)
        self._pool = LazyPool(max_workers, "sluice-store")
        slots = GrantedSlots()
        unqueued = Unqueued()  # what the relay's read tells its status writes
        self.lifecycle = Lifecycle(self.items, self._pool, unqueued)
        self.grants = Grants(self.items, self.lifecycle, slots)
        self.reads = JobReads(self.items, sleep, unqueued)
        # fencing False only for the gc-pause scenario's --no-fencing (leases.LeaseWrites).
        self.leases = LeaseWrites(self.items, fence, large_result_bytes=large_result_bytes, fencing=fencing)
        self.families = Families(self.items, self._pool, slots)
        self.progress = ProgressWrites(self.items, fence)
        self.tables = FencedTables(client, table_name, fence)

    @property
    def client(self) -> DynamoDBClient:
        """Its DynamoDB client, for other adapters on the same table (recovery's checkpoints)."""
        return self._db

    @classmethod
    def from_settings(cls, settings: Settings, *, client: DynamoDBClient | None = None,
                      metrics: Metrics | None = None, fencing: bool = True) -> DynamoJobStore:
        """``client``: the container's DynamoDB client (``sluice.entry.root.dynamodb``); else a new one."""
        import boto3

        common: dict[str, Any] = {"region_name": settings.aws_region, "config": CONFIG,
                                  "endpoint_url": settings.aws_endpoint_url}
        return cls(client or dynamodb_client(settings), settings.jobs_table,
                   results=S3ResultSink(None, settings.results_bucket,
                                        build_client=lambda: boto3.client("s3", **common)),
                   large_result_bytes=settings.large_result_bytes, retention_days=settings.retention_days,
                   metrics=metrics if metrics is not None else EmfMetrics(), fencing=fencing)

    # -- ports.JobStore: each call goes to the part that makes it -----------------------------

    def grant(self, job_id: str, queue: str, owner: str, redrive_gen: int = 0, *,
              lease_token: int | None = None) -> int:
        return self.grants.grant(job_id, queue, owner, redrive_gen, lease_token=lease_token)

    def get_job(self, job_id: str, *, load_result: bool = True) -> JobRecord:
        return self.reads.get_job(job_id, load_result=load_result)

    def final_job_ids(self, job_ids: Iterable[str]) -> set[str]:
        return self.reads.final_job_ids(job_ids)

    def relay_view(self, job_ids: Iterable[str]) -> tuple[set[str], dict[str, int]]:
        return self.reads.relay_view(job_ids)

    def write_result(self, job_id: str, token: int, result: Any) -> WriteOutcome:
        return self.leases.write_result(job_id, token, result)

    def write_result_unfenced(self, job_id: str, token: int, result: Any) -> None:
        self.leases.write_result_unfenced(job_id, token, result)

    def record_failure(self, job_id: str, token: int, error: str, status: str) -> None:
        self.leases.record_failure(job_id, token, error, status)

    def release(self, job_id: str, token: int) -> None:
        self.leases.release(job_id, token)

    def record_accepted(self, spec: JobSpec) -> None:
        self.lifecycle.record_accepted(spec)

    def mark_queued(self, jobs: Sequence[tuple[str, str, int]]) -> None:
        self.lifecycle.mark_queued(jobs)

    def request_cancel(self, job_id: str) -> JobRecord:
        return self.lifecycle.request_cancel(job_id)

    def honour_cancel(self, job_id: str) -> JobRecord:
        return self.lifecycle.honour_cancel(job_id)

    def cancel_unrecorded(self, job_id: str, queue: str, reason: str, created_at_ms: int = 0) -> JobRecord:
        return self.lifecycle.cancel_unrecorded(job_id, queue, reason, created_at_ms)

    def redrive(self, job_id: str) -> int:
        return self.lifecycle.redrive(job_id)

    def settle_ended(self, ended: SettleEntry) -> Settled:
        return self.lifecycle.settle_ended(ended)

    def refuse_record(self, job_id: str, queue: str, reason: str, created_at_ms: int = 0, *,
                      queued: bool = False) -> bool:
        return self.lifecycle.refuse_record(job_id, queue, reason, created_at_ms, queued=queued)

    # -- the worker's lease-holder extras (``sluice.worker``) ------------------------------------

    def write_progress(self, job_id: str, token: int, fraction: float, detail: str = "") -> None:
        self.progress.write_progress(job_id, token, fraction, detail)

    def fenced_table(self, table_name: str, job_id: str, token: int, *,
                     events: EventBus) -> FencedTable:
        return self.tables.fenced_table(table_name, job_id, token, events=events)

    def close(self) -> None:
        self._pool.close()
