"""The jobs table's reads: a job's record, and the batch reads of the relay.

Consistent reads: the relay decides from them whether a record's job is done with.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from sluice.backends.dynamodb.codec import S, item_int, item_str
from sluice.backends.dynamodb.errors import translated
from sluice.backends.dynamodb.items import ItemTable
from sluice.backends.dynamodb.lifecycle import Unqueued
from sluice.core.endings import redriven_waiting
from sluice.core.errors import BackendUnavailable, JobNotFound
from sluice.core.models import FINAL_STATES, JobRecord, JobState, validate_job_id

BATCH_GET_LIMIT = 100
BATCH_GET_ROUNDS = 8


class JobReads:
    """``get_job``, ``final_job_ids``, ``relay_view`` on ``items``; ``sleep`` backs off a throttled batch;
    ``unqueued``: where ``relay_view`` notes the jobs ``mark_queued`` is to leave as they are."""

    def __init__(self, items: ItemTable, sleep: Callable[[float], None] = time.sleep,
                 unqueued: Unqueued | None = None) -> None:
        self.items, self._sleep = items, sleep
        self._unqueued = unqueued if unqueued is not None else Unqueued()

    def get_job(self, job_id: str, *, load_result: bool = True) -> JobRecord:
        job_id = validate_job_id(job_id)
        item = self.items.read(job_id)
        # TTL deletes lazily (up to days late); an expired item is already gone for users.
        if item is None or 0 < item_int(item, "expires_at") <= self.items.now_ms() // 1000:
            raise JobNotFound(f"no job {job_id}", job_id=job_id)
        return self.items.record(item, load_result=load_result)

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
        for job_id, (status, gen, run) in self._statuses(job_ids, self._unqueued).items():
            if gen:
                gens[job_id] = gen
            if status in FINAL_STATES and not redriven_waiting(JobState(status), gen, run):
                done.add(job_id)
        return done, gens

    def _statuses(self, job_ids: Iterable[str],
                  unqueued: Unqueued | None = None) -> dict[str, tuple[str | None, int, int]]:
        """job id -> (status, redrive_gen, run_gen) of the items that exist; each noted in
        ``unqueued`` if ``mark_queued`` is to leave it (``Unqueued.leaves``)."""
        ids = list(dict.fromkeys(validate_job_id(j) for j in job_ids))  # BatchGetItem refuses duplicates
        found: dict[str, tuple[str | None, int, int]] = {}
        for start in range(0, len(ids), BATCH_GET_LIMIT):
            keys: list[dict[str, Any]] = [{"job_id": S(j)} for j in ids[start:start + BATCH_GET_LIMIT]]
            for round_ in range(BATCH_GET_ROUNDS):
                response: Any
                with translated("batch_get_item"):
                    response = self.items.client.batch_get_item(RequestItems={self.items.table: {
                        "Keys": keys, "ConsistentRead": True,
                        "ProjectionExpression": "#id, #st, #rg, #run, #par",
                        "ExpressionAttributeNames": {"#id": "job_id", "#st": "status", "#rg": "redrive_gen",
                                                     "#run": "run_gen", "#par": "parent_id"}}})
                for item in response.get("Responses", {}).get(self.items.table, []):
                    job_id = str(item["job_id"]["S"])
                    found[job_id] = (item_str(item, "status"), item_int(item, "redrive_gen"),
                                     item_int(item, "run_gen"))
                    if unqueued is not None and Unqueued.leaves(item):
                        unqueued.note(job_id)
                keys = list(response.get("UnprocessedKeys", {}).get(self.items.table, {}).get("Keys", []))
                if not keys:
                    break
                self._sleep(min(1.0, 0.025 * 2 ** round_))  # throttled: back off, then ask for the rest
            else:
                raise BackendUnavailable(f"batch_get_item left {len(keys)} keys unprocessed",
                                         unprocessed=len(keys))
        return found
