"""In-memory fake of ``ports.JobStore`` with the contract's semantics, for tests: the worker's, the
gateway's and the relay's.

The store mirrors the DynamoDB token authority: ``grant`` mints the fencing token, writes are
fenced on ``token = mine AND status = leased``. ``broken`` injects errors per method.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from sluice.core.endings import Settled, cancels_at_once, settle_outcome
from sluice.core.errors import (
    AlreadyFinished,
    BackendUnavailable,
    JobCancelled,
    JobNotFound,
    LeaseLost,
    StaleToken,
    StoreError,
)
from sluice.core.models import (
    FINAL_STATES,
    JobRecord,
    JobState,
    SettleEntry,
    WriteOutcome,
    dump_json,
)
from sluice_dev.fakes.queue import Broken

# The relay's calls to the jobs table; a relay rig passes them as ``only`` so that any other
# call fails the test.
RELAY_CALLS = frozenset({"mark_queued", "final_job_ids", "relay_view", "settle_ended", "refuse_record"})


class FakeStore:
    """The one in-memory ``ports.JobStore`` of the tests: the worker's, the gateway's, the relay's.

    ``items`` holds one plain dict per job (the jobs item's attributes). ``final`` adds ids
    that ``final_job_ids`` reports final without an item; ``down`` makes the relay's calls
    unavailable; ``only`` (a set of method names) makes any other call an assertion error.
    """

    def __init__(self, *, only: Iterable[str] | None = None) -> None:
        self.items: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str, int]] = []
        self.broken = Broken()
        self._lock = threading.RLock()
        self.only = frozenset(only) if only is not None else None
        self.final: set[str] = set()
        self.queued: list[tuple[str, str, int]] = []  # every mark_queued entry, in order
        self.mark_calls = 0
        self.final_calls = 0
        self.down = False
        self.settled: list[SettleEntry] = []
        self.refuse_settle: set[str] = set()  # job ids whose settle_ended fails
        self.refuse_redrive: dict[str, Exception] = {}  # job id -> what its redrive raises
        self.fail_cancel: Exception | None = None
        self.unrecorded: list[tuple[str, str, str]] = []  # cancel_unrecorded calls
        self.generations: dict[str, int] = {}  # redrive generations minted

    def __getattribute__(self, name: str) -> Any:
        only = object.__getattribute__(self, "only")
        if only is not None and name in _STORE_CALLS and name not in only:
            raise AssertionError(f"this caller should not call store.{name}")
        return object.__getattribute__(self, name)

    def item(self, job_id: str) -> dict[str, Any]:
        return self.items[job_id]

    def called(self, method: str) -> list[tuple[str, str, int]]:
        return [c for c in self.calls if c[0] == method]

    def _unavailable(self) -> None:
        if self.down:
            raise BackendUnavailable("dynamodb is down")

    def mark_queued(self, jobs: Sequence[tuple[str, str, int]]) -> None:
        """The relay's part: creates the item if absent, moves only accepted -> queued."""
        with self._lock:
            self.mark_calls += 1
            self.queued.extend(jobs)
            for job_id, queue, _ in jobs:
                it = self.items.setdefault(job_id, {"queue": queue, "status": "queued", "token": 0,
                                                    "attempts": 0, "cancel_requested": False})
                if it["status"] == "accepted":
                    it["status"] = "queued"

    def set_status(self, job_id: str, status: JobState, **extra: Any) -> None:
        self.items[job_id].update(status=status.value, **extra)

    def put(self, record: JobRecord) -> None:
        """Seed an item from a record, as if the job had got there."""
        it = record.model_dump(exclude={"job_id", "lease_owner"})
        self.items[record.job_id] = {**it, "status": record.status.value, "owner": record.lease_owner}

    def grant(self, job_id: str, queue: str, owner: str, redrive_gen: int = 0, *,
              lease_token: int | None = None) -> int:
        with self._lock:
            self.broken.check("grant")
            it = self.items.setdefault(job_id, {"queue": queue, "status": "queued", "token": 0,
                                                "attempts": 0, "cancel_requested": False})
            if lease_token is not None and it.get("lease_token", 0) > lease_token:
                raise LeaseLost(f"job {job_id} was granted to a newer lease")
            if it["status"] in ("failed", "dead") and redrive_gen <= it.get("run_gen", 0):
                raise AlreadyFinished(f"job {job_id} already {it['status']}", status=it["status"])
            it["run_gen"] = redrive_gen
            if it["status"] == "cancelled" or it["cancel_requested"]:
                if it["status"] != "succeeded":
                    it["status"] = "cancelled"
                raise JobCancelled(f"job {job_id} was cancelled")
            it["token"] += 1
            it["attempts"] += 1
            it["owner"] = owner
            if lease_token is not None:
                it["lease_token"] = lease_token
            if it["status"] != "succeeded":  # once succeeded, always (a re-run keeps the status)
                it["status"] = "leased"
            self.calls.append(("grant", job_id, it["token"]))
            return int(it["token"])

    def _fenced(self, method: str, job_id: str, token: int) -> dict[str, Any] | None:
        """The item if ``token`` may write now; None if this is a landed retry to be checked."""
        self.broken.check(method)
        self.calls.append((method, job_id, token))
        it = self.items.get(job_id)
        if it is None:
            raise StoreError(f"{method}: no item for {job_id}")
        if it["token"] > token:
            raise StaleToken(mine=token, current=it["token"])
        if it["status"] == "cancelled":
            raise JobCancelled(f"job {job_id} was cancelled")
        if it["token"] == token and it["status"] == "leased":
            return it
        if (method == "write_result" and it["token"] == token and it["status"] == "succeeded"
                and it.get("result_token", 0) < token):
            return it  # the current holder of a re-run writes once
        return None

    def _refuse_if_succeeded(self, job_id: str, token: int) -> None:
        it = self.items[job_id]
        if it["token"] == token and it["status"] == "succeeded":
            raise AlreadyFinished(f"job {job_id} already succeeded")

    def write_result(self, job_id: str, token: int, result: Any) -> WriteOutcome:
        with self._lock:
            text = dump_json(result)
            it = self._fenced("write_result", job_id, token)
            if it is None:
                old = self.items[job_id]
                if old["status"] == "succeeded" and old.get("result_json") == text:
                    return WriteOutcome.ALREADY_WRITTEN
                raise StoreError(f"write_result: {job_id} is {old['status']}")
            it.update(status="succeeded", result=result, result_json=text, result_token=token)
            return WriteOutcome.WRITTEN

    def write_result_unfenced(self, job_id: str, token: int, result: Any) -> None:
        with self._lock:
            self.items[job_id].update(status="succeeded", result=result, result_token=token)

    def record_failure(self, job_id: str, token: int, error: str, status: str) -> None:
        with self._lock:
            if status not in ("queued", "failed", "dead", "cancelled"):
                raise ValueError(status)
            it = self._fenced("record_failure", job_id, token)
            if it is None:
                self._refuse_if_succeeded(job_id, token)
                raise StoreError(f"record_failure: {job_id} is {self.items[job_id]['status']}")
            it.update(status=status, last_error=error)

    def write_progress(self, job_id: str, token: int, fraction: float, detail: str = "") -> None:
        from sluice.core.models import validate_progress

        with self._lock:
            fraction, detail = validate_progress(fraction, detail)
            it = self._fenced("write_progress", job_id, token)
            if it is None:
                raise LeaseLost(f"write_progress: {job_id} is {self.items[job_id]['status']}")
            it.update(progress=fraction, progress_detail=detail)

    def release(self, job_id: str, token: int) -> None:
        with self._lock:
            it = self._fenced("release", job_id, token)
            if it is None:
                self._refuse_if_succeeded(job_id, token)
                raise StoreError("release: not leased")
            it["attempts"] -= 1
            it["status"] = "queued"

    def get_job(self, job_id: str) -> JobRecord:
        it = self.items.get(job_id)
        if it is None:
            raise JobNotFound(f"no job {job_id}")
        fields = {k: v for k, v in it.items() if k in JobRecord.model_fields and v is not None}
        return JobRecord(**{**fields, "job_id": job_id, "status": JobState(it["status"]),
                            "lease_owner": it.get("owner")})

    def request_cancel(self, job_id: str) -> JobRecord:
        with self._lock:
            record = self.get_job(job_id)
            it = self.items[job_id]
            gen = self.generations.get(job_id, 0)
            if cancels_at_once(record.status, gen, it.get("run_gen", 0)):
                it["status"] = "cancelled"
                it["run_gen"] = max(gen, it.get("run_gen", 0))  # a redriven job's: its generation's ending
            elif record.status.final:
                raise AlreadyFinished(f"job {job_id} is {record.status}")
            else:
                it["cancel_requested"] = True
            return self.get_job(job_id)

    def cancel_unrecorded(self, job_id: str, queue: str, reason: str, created_at_ms: int = 0) -> JobRecord:
        with self._lock:
            self.unrecorded.append((job_id, queue, reason))
            if self.fail_cancel is not None:
                raise self.fail_cancel
            if job_id not in self.items:
                self.items[job_id] = {"queue": queue, "status": "cancelled", "token": 0, "attempts": 0,
                                      "cancel_requested": False, "last_error": reason}
                return self.get_job(job_id)
        return self.request_cancel(job_id)

    def honour_cancel(self, job_id: str) -> JobRecord:
        record = self.get_job(job_id)
        if record.status is JobState.CANCELLED:
            return record
        if record.status.final:
            raise AlreadyFinished(f"job {job_id} is {record.status}")
        assert record.cancel_requested, "honour_cancel without a cancel request"
        self.items[job_id]["status"] = "cancelled"
        return self.get_job(job_id)

    def final_job_ids(self, job_ids: Iterable[str]) -> set[str]:
        self.final_calls += 1
        self._unavailable()
        return {j for j in job_ids if j in self.final or (
            j in self.items and JobState(self.items[j]["status"]) in FINAL_STATES)}

    def relay_view(self, job_ids: Iterable[str]) -> tuple[set[str], dict[str, int]]:
        ids = list(job_ids)
        return self.final_job_ids(ids), {j: self.generations[j] for j in ids if self.generations.get(j)}

    def settle_ended(self, ended: SettleEntry) -> Settled:
        """As the jobs table (``core.endings.settle_outcome``); a job with no item is recorded only."""
        if ended.job_id in self.refuse_settle:
            raise BackendUnavailable("dynamodb is down")
        self._unavailable()
        with self._lock:
            it = self.items.get(ended.job_id)
            gen = ended.redrive_gen or 0
            if it is None:
                self.settled.append(ended)
                return Settled.WRITTEN
            outcome = settle_outcome(JobState(it["status"]), self.generations.get(ended.job_id, 0),
                                     it.get("run_gen", 0), gen)
            if outcome is Settled.WRITTEN:
                self.settled.append(ended)
                it.update(status=ended.status.value, run_gen=gen)
            return outcome

    def refuse_record(self, job_id: str, queue: str, reason: str, created_at_ms: int = 0, *,
                      queued: bool = False) -> bool:
        """As the jobs table: dead with ``reason`` only while there is no item or an accepted one
        (``queued``: or a queued one)."""
        self._unavailable()
        with self._lock:
            item = self.items.get(job_id)
            if item is not None and item["status"] not in ("accepted", *(("queued",) if queued else ())):
                return False
            self.items[job_id] = {**(item or {"token": 0, "attempts": 0, "cancel_requested": False}),
                                  "queue": queue, "status": "dead", "last_error": reason}
            return True

    def redrive(self, job_id: str) -> int:
        if job_id in self.refuse_redrive:
            raise self.refuse_redrive[job_id]
        self.generations[job_id] = self.generations.get(job_id, 0) + 1
        return self.generations[job_id]

    def fenced_table(self, table_name: str, job_id: str, token: int, *,
                     events: Any = None) -> FakeFencedTable:
        return FakeFencedTable(self, table_name, job_id, token)


_STORE_CALLS = frozenset(n for n, v in vars(FakeStore).items() if callable(v) and not n.startswith("_"))


class FakeFencedTable:
    def __init__(self, store: FakeStore, name: str, job_id: str, token: int) -> None:
        self.store, self.table_name, self.job_id, self.token = store, name, job_id, token
        self.rows: dict[str, Any] = {}

    def put_item(self, item: dict[str, Any]) -> None:
        current = self.store.items[self.job_id]["token"]
        if current > self.token:
            raise StaleToken(mine=self.token, current=current)
        self.rows[str(item.get("id"))] = item


if TYPE_CHECKING:  # each fake is its port's: mypy --strict checks these, nothing runs them
    from sluice.core import ports

    _STORE: ports.JobStore = FakeStore()
