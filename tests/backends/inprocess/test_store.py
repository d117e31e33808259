"""DynamoJobStore against in-process moto (no sockets): every branch of the fenced writes.

The same behaviour is exercised over real HTTP in tests/backends/test_store.py;
these run in milliseconds, so they cover the long tail of outcomes.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from sluice.backends.dynamodb import tables
from sluice.backends.dynamodb.jobs import DynamoJobStore
from sluice.backends.dynamodb.results import S3ResultSink
from sluice.core.endings import Settled
from sluice.core.errors import (
    AlreadyFinished,
    BackendUnavailable,
    InvalidInput,
    JobCancelled,
    JobExists,
    JobNotFound,
    LeaseLost,
    StaleToken,
    StoreError,
)
from sluice.core.models import JobSpec, JobState, SettleEntry, WriteOutcome

BUCKET = "results"


class CountingMetrics:
    def __init__(self) -> None:
        self.counts: list[tuple[str, float, dict[str, str]]] = []

    def count(self, name: str, value: float = 1, **dimensions: str) -> None:
        self.counts.append((name, value, dimensions))


class Clock:
    def __init__(self) -> None:
        self.ms = 1_700_000_000_000

    def __call__(self) -> int:
        return self.ms


@pytest.fixture(scope="module")
def aws_clients() -> Iterator[tuple[Any, Any]]:
    """One mock account per module (clients are slow to build); tables are per test."""
    with mock_aws():
        db = boto3.client("dynamodb", region_name="us-east-1")
        s3 = boto3.client("s3", region_name="us-east-1")
        tables.create_results_bucket(s3, BUCKET)
        yield db, s3


@pytest.fixture
def table(aws_clients: tuple[Any, Any]) -> Iterator[str]:
    name = f"jobs-{uuid.uuid4().hex[:8]}"
    tables.create_jobs_table(aws_clients[0], name)
    yield name
    aws_clients[0].delete_table(TableName=name)


@pytest.fixture
def aws(aws_clients: tuple[Any, Any], table: str) -> Iterator[tuple[Any, Any]]:
    yield aws_clients
    s3 = aws_clients[1]
    for obj in s3.list_objects_v2(Bucket=BUCKET).get("Contents", []):
        s3.delete_object(Bucket=BUCKET, Key=obj["Key"])


@pytest.fixture
def metrics() -> CountingMetrics:
    return CountingMetrics()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(aws: tuple[Any, Any], table: str, metrics: CountingMetrics, clock: Clock) -> DynamoJobStore:
    db, s3 = aws
    return DynamoJobStore(db, table, results=S3ResultSink(s3, BUCKET), large_result_bytes=1000,
                          retention_days=2, metrics=metrics, now_ms=clock)


def raw(store: DynamoJobStore, job_id: str) -> dict[str, Any] | None:
    return store.items.read(job_id)


def test_grant_mints_strictly_increasing_tokens_and_counts_attempts(store: DynamoJobStore) -> None:
    tokens = [store.grant("j1", "q", f"w{i}") for i in range(4)]
    assert tokens == [1, 2, 3, 4]
    rec = store.get_job("j1")
    assert (rec.status, rec.token, rec.attempts, rec.lease_owner, rec.queue) == ("leased", 4, 4, "w3", "q")
    assert store.grant("other", "q", "w") == 1  # per job


def test_write_result_then_retry_is_already_written(store: DynamoJobStore, clock: Clock) -> None:
    token = store.grant("j1", "q", "w")
    assert store.write_result("j1", token, {"b": 1, "a": [1, 2]}) is WriteOutcome.WRITTEN
    # Same content in another key order is the same canonical JSON.
    assert store.write_result("j1", token, {"a": [1, 2], "b": 1}) is WriteOutcome.ALREADY_WRITTEN
    rec = store.get_job("j1")
    assert rec.status is JobState.SUCCEEDED and rec.result == {"a": [1, 2], "b": 1}
    assert rec.result_token == token and rec.finished_at_ms == clock.ms
    item = raw(store, "j1")
    assert item is not None and int(item["expires_at"]["N"]) == clock.ms // 1000 + 2 * 86_400


def test_same_token_different_result_is_store_error(store: DynamoJobStore) -> None:
    token = store.grant("j1", "q", "w")
    store.write_result("j1", token, 1)
    with pytest.raises(StoreError):
        store.write_result("j1", token, 2)
    assert store.get_job("j1").result == 1


def test_stale_write_rejected_counted_and_logged_with_both_tokens(
        store: DynamoJobStore, metrics: CountingMetrics, caplog: pytest.LogCaptureFixture) -> None:
    a = store.grant("j1", "q", "A")
    b = store.grant("j1", "q", "B")
    caplog.set_level(logging.WARNING, logger="sluice.backends.dynamodb")
    with pytest.raises(StaleToken) as info:  # rejected before B has written anything
        store.write_result("j1", a, "from A")
    assert (info.value.mine, info.value.current) == (a, b)
    assert metrics.counts == [("FencedWriteRejected", 1, {"operation": "write_result"})]
    assert any(getattr(r, "token", None) == a and getattr(r, "current_token", None) == b
               for r in caplog.records)
    assert store.write_result("j1", b, "from B") is WriteOutcome.WRITTEN
    with pytest.raises(StaleToken):
        store.write_result("j1", a, "from A")
    assert store.get_job("j1").result == "from B"
    assert len(metrics.counts) == 2


def test_rerun_after_success_writes_again_with_newer_token(store: DynamoJobStore) -> None:
    t1 = store.grant("j1", "q", "A")
    store.write_result("j1", t1, {"v": 1})
    t2 = store.grant("j1", "q", "B")  # crash before ack: redelivered, not refused
    assert t2 == t1 + 1 and store.get_job("j1").status is JobState.SUCCEEDED  # once succeeded, always
    with pytest.raises(StaleToken):
        store.write_result("j1", t1, {"v": 1})
    assert store.write_result("j1", t2, {"v": 1}) is WriteOutcome.WRITTEN
    assert store.write_result("j1", t2, {"v": 1}) is WriteOutcome.ALREADY_WRITTEN  # never lands twice
    with pytest.raises(StoreError):
        store.write_result("j1", t2, {"v": 2})
    rec = store.get_job("j1")
    assert (rec.status, rec.attempts, rec.result_token, rec.result) == (JobState.SUCCEEDED, 2, t2, {"v": 1})


@pytest.mark.parametrize("status", ["queued", "dead", "failed"])
def test_a_rerun_of_a_succeeded_job_cannot_take_its_result_away(store: DynamoJobStore, status: str) -> None:
    """The re-run after a crash before ack fails, or is released, or gives up: the job stays
    succeeded with its result, and the store says so with AlreadyFinished."""
    t1 = store.grant("j1", "q", "A")
    store.write_result("j1", t1, "first")
    t2 = store.grant("j1", "q", "B")
    with pytest.raises(AlreadyFinished):
        store.record_failure("j1", t2, "boom", status)
    with pytest.raises(AlreadyFinished):
        store.release("j1", t2)
    with pytest.raises(StaleToken):
        store.record_failure("j1", t1, "boom", status)
    rec = store.get_job("j1")
    assert (rec.status, rec.result, rec.result_token, rec.token) == (JobState.SUCCEEDED, "first", t1, t2)
    assert rec.last_error is None and (raw(store, "j1") or {}).get("expires_at") is not None


def test_write_for_unknown_job_or_future_token_is_store_error(store: DynamoJobStore) -> None:
    with pytest.raises(StoreError):
        store.write_result("never", 1, "x")
    assert raw(store, "never") is None
    store.grant("j1", "q", "w")
    with pytest.raises(StoreError):
        store.write_result("j1", 7, "x")
    assert store.get_job("j1").status is JobState.LEASED


@pytest.mark.parametrize("status", ["queued", "failed", "dead", "cancelled"])
def test_record_failure_is_fenced_and_idempotent(store: DynamoJobStore, status: str, clock: Clock) -> None:
    a = store.grant("j1", "q", "A")
    store.record_failure("j1", a, "boom", status)
    store.record_failure("j1", a, "boom", status)  # retry of a write that landed
    rec = store.get_job("j1")
    assert (rec.status, rec.last_error) == (status, "boom")
    assert (rec.finished_at_ms is not None) == (status != "queued")
    # A final verdict is left only through a redrive (issue 13, bug 4).
    gen = store.redrive("j1") if status in ("failed", "dead") else 0
    b = store.grant("j1", "q", "B", gen) if status in ("queued", "failed", "dead") else None
    if b is not None:
        with pytest.raises(StaleToken) as info:
            store.record_failure("j1", a, "late", "dead")
        assert (info.value.mine, info.value.current) == (a, b)
    else:
        with pytest.raises(JobCancelled):
            store.grant("j1", "q", "B")


def test_record_failure_rejects_bad_status_and_truncates_errors(store: DynamoJobStore) -> None:
    t = store.grant("j1", "q", "A")
    for bad in ("leased", "succeeded", "nope", ""):
        with pytest.raises(InvalidInput):
            store.record_failure("j1", t, "x", bad)
    store.record_failure("j1", t, "e" * 100_000, "queued")
    assert len(store.get_job("j1").last_error or "") < 5_000


def test_release_gives_the_attempt_back_and_is_fenced(store: DynamoJobStore) -> None:
    a = store.grant("j1", "q", "A")
    store.release("j1", a)
    store.release("j1", a)  # idempotent retry: attempts given back once
    rec = store.get_job("j1")
    assert (rec.status, rec.attempts) == (JobState.QUEUED, 0)
    b = store.grant("j1", "q", "B")
    with pytest.raises(StaleToken):
        store.release("j1", a)
    store.release("j1", b)
    with pytest.raises(StoreError):  # released: the token is still the newest but holds no lease
        store.write_result("j1", b, 1)


def test_record_accepted_and_mark_queued(store: DynamoJobStore) -> None:
    spec = JobSpec(job_id="j1", queue="q", payload={"x": 1}, enqueued_at_ms=5)
    store.record_accepted(spec)
    store.record_accepted(spec)  # gateway retry
    with pytest.raises(JobExists):
        store.record_accepted(JobSpec(job_id="j1", queue="other"))
    rec = store.get_job("j1")
    assert (rec.status, rec.created_at_ms, rec.token, rec.attempts) == (JobState.ACCEPTED, 5, 0, 0)
    store.grant("j2", "q", "w")  # a fast worker got j2 before the relay marked it
    store.mark_queued([("j1", "q", 0), ("j2", "q", 0), ("j3", "q", 0)])
    assert store.get_job("j1").status is JobState.QUEUED
    assert store.get_job("j2").status is JobState.LEASED
    assert store.get_job("j3").status is JobState.QUEUED  # created if absent
    store.record_accepted(JobSpec(job_id="j3", queue="q"))  # late gateway write changes nothing
    assert store.get_job("j3").status is JobState.QUEUED


def test_mark_queued_validates_everything_before_writing(store: DynamoJobStore) -> None:
    with pytest.raises(InvalidInput):
        store.mark_queued([("ok", "q", 0), ("bad id", "q", 0)])
    assert raw(store, "ok") is None


def test_a_redriven_job_is_final_but_not_done_with_for_the_relay(store: DynamoJobStore) -> None:
    """relay_view: a failed or dead job redriven since it last ran will run again, so the relay
    pushes its records (with the generation) and recovery keeps them pending; once it ran under
    that generation and ended again it is done with (docs/redis-loss.md, "Redriven jobs")."""
    for job_id, verdict in (("f", "failed"), ("d", "dead"), ("s", None)):
        t = store.grant(job_id, "q", "w")
        if verdict is None:
            store.write_result(job_id, t, "ok")
        else:
            store.record_failure(job_id, t, "no", verdict)
    assert store.relay_view(["f", "d", "s", "absent"]) == ({"f", "d", "s"}, {})
    gen_f, gen_d = store.redrive("f"), store.redrive("d")
    assert store.relay_view(["f", "d", "s"]) == ({"s"}, {"f": gen_f, "d": gen_d})
    assert store.final_job_ids(["f", "d", "s"]) == {"f", "d", "s"}  # the items still say so
    t = store.grant("f", "q", "w2", gen_f)  # its run under the redrive: not final, not done with
    assert store.relay_view(["f"]) == (set(), {"f": gen_f})
    store.record_failure("f", t, "no again", "failed")  # ended again: done with, until a new redrive
    assert store.relay_view(["f", "d"]) == ({"f"}, {"f": gen_f, "d": gen_d})


def test_a_grant_of_an_older_generation_than_the_item_ran_under_is_stale(store: DynamoJobStore) -> None:
    """run_gen never goes down: a lease taken before a redrive that has run since is stale. Lowered,
    it made a redriven job that then ended unrun look redriven again (the job model's
    stale-grant-lowers-run-gen replay)."""
    t = store.grant("j1", "q", "A")
    store.record_failure("j1", t, "no", "failed")
    gen = store.redrive("j1")
    t = store.grant("j1", "q", "B", gen)
    store.record_failure("j1", t, "again later", "queued")  # B's retry: open, run_gen = gen
    for stale in (0, gen - 1):
        with pytest.raises(LeaseLost, match="stale"):
            store.grant("j1", "q", "C", stale)  # C leased it before the redrive, and froze
    record = store.get_job("j1")
    assert (record.status, record.token) == (JobState.QUEUED, t)
    assert store.grant("j1", "q", "D", gen) == t + 1  # the redriven copy is granted as before


def test_final_job_ids_chunks_and_dedupes(store: DynamoJobStore) -> None:
    ids = [f"j{i}" for i in range(230)]
    for i, job_id in enumerate(ids[:40]):
        t = store.grant(job_id, "q", "w")
        if i % 2 == 0:
            store.write_result(job_id, t, i)
        elif i % 4 == 1:
            store.record_failure(job_id, t, "e", "dead")
    store.record_accepted(JobSpec(job_id="j100", queue="q"))
    expected = {f"j{i}" for i in range(40) if i % 2 == 0 or i % 4 == 1}
    assert store.final_job_ids(ids + ids[:150]) == expected


class Unprocessing:
    """Wraps a client: the first ``n`` batch gets leave every other key (or all) unprocessed."""

    def __init__(self, client: Any, n: int, everything: bool = False) -> None:
        self._client, self.n, self.calls, self.everything = client, n, 0, everything

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def batch_get_item(self, RequestItems: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        if self.calls > self.n:
            return self._client.batch_get_item(RequestItems=RequestItems)  # type: ignore[no-any-return]
        (table, req), = RequestItems.items()
        keep, left = req["Keys"][::2], req["Keys"][1::2]
        if self.everything:
            return {"Responses": {table: []}, "UnprocessedKeys": {table: req}}
        response = self._client.batch_get_item(RequestItems={table: {**req, "Keys": keep}})
        response["UnprocessedKeys"] = {table: {**req, "Keys": left}} if left else {}
        return response  # type: ignore[no-any-return]


def test_final_job_ids_follows_unprocessed_keys(aws: tuple[Any, Any], store: DynamoJobStore) -> None:
    table = store.table
    for i in range(10):
        store.write_result(f"j{i}", store.grant(f"j{i}", "q", "w"), i)
    flaky = Unprocessing(aws[0], 2)
    naps: list[float] = []
    other = DynamoJobStore(flaky, table, sleep=naps.append)  # type: ignore[arg-type]
    assert other.final_job_ids(f"j{i}" for i in range(10)) == {f"j{i}" for i in range(10)}
    assert flaky.calls == 3  # 10 keys: 5 left, then 2, then none
    assert len(naps) == 2 and naps[1] > naps[0]  # backed off before asking for the rest
    stuck = DynamoJobStore(Unprocessing(aws[0], 10**6, everything=True), table,  # type: ignore[arg-type]
                           sleep=naps.append)
    with pytest.raises(BackendUnavailable):
        stuck.final_job_ids(["j1", "j2"])


def test_request_cancel_by_status(store: DynamoJobStore) -> None:
    store.record_accepted(JobSpec(job_id="acc", queue="q"))
    assert store.request_cancel("acc").status is JobState.CANCELLED
    with pytest.raises(AlreadyFinished):
        store.request_cancel("acc")
    with pytest.raises(JobCancelled):
        store.grant("acc", "q", "w")
    t = store.grant("run", "q", "w")
    rec = store.request_cancel("run")
    assert rec.status is JobState.LEASED and rec.cancel_requested
    # The holder stops and records it; a later cancel is then refused as finished.
    store.record_failure("run", t, "cancelled by request", "cancelled")
    with pytest.raises(AlreadyFinished):
        store.request_cancel("run")
    with pytest.raises(JobNotFound):
        store.request_cancel("missing")


def test_grant_honours_a_cancel_request_whose_holder_vanished(store: DynamoJobStore) -> None:
    t = store.grant("j1", "q", "A")
    store.request_cancel("j1")
    with pytest.raises(JobCancelled):
        store.grant("j1", "q", "B")  # A's lease expired without A stopping the job
    assert store.get_job("j1").status is JobState.CANCELLED
    with pytest.raises(JobCancelled):
        store.write_result("j1", t, "late")


def test_a_result_written_despite_a_cancel_request_stays_succeeded(store: DynamoJobStore) -> None:
    t = store.grant("j1", "q", "A")
    store.request_cancel("j1")
    store.write_result("j1", t, "done anyway")  # A finished before its heartbeat saw the request
    with pytest.raises(JobCancelled):
        store.grant("j1", "q", "B")  # redelivered after a crash before ack: not run again
    rec = store.get_job("j1")
    assert (rec.status, rec.result, rec.token) == (JobState.SUCCEEDED, "done anyway", t)


def test_get_job_missing_and_expired(store: DynamoJobStore, clock: Clock) -> None:
    with pytest.raises(JobNotFound):
        store.get_job("nope")
    store.write_result("j1", store.grant("j1", "q", "w"), 1)
    clock.ms += 3 * 86_400_000  # past retention; TTL has not deleted it yet
    with pytest.raises(JobNotFound):
        store.get_job("j1")


def test_large_result_goes_to_s3_under_the_token(aws: tuple[Any, Any], store: DynamoJobStore) -> None:
    big = {"blob": "x" * 5_000}
    t = store.grant("j1", "q", "w")
    assert store.write_result("j1", t, big) is WriteOutcome.WRITTEN
    assert store.write_result("j1", t, big) is WriteOutcome.ALREADY_WRITTEN
    item = raw(store, "j1") or {}
    digest = item["result_digest"]["S"]
    assert "result" not in item and item["result_ref"]["S"] == f"s3://{BUCKET}/results/_/j1/{t}/{digest}.json"
    assert store.get_job("j1").result == big
    assert store.get_job("j1", load_result=False).result is None
    t2 = store.grant("j1", "q", "w")
    store.write_result("j1", t2, "small")  # back inline: the pointer goes
    rec = store.get_job("j1")
    assert (rec.result, rec.result_ref) == ("small", None)


def test_large_result_without_bucket_is_invalid_not_a_crash_loop(aws: tuple[Any, Any], table: str) -> None:
    store = DynamoJobStore(aws[0], table, large_result_bytes=100)
    t = store.grant("j1", "q", "w")
    with pytest.raises(InvalidInput):
        store.write_result("j1", t, "y" * 200)
    assert store.get_job("j1").status is JobState.LEASED


def test_unfenced_write_lets_the_stale_writer_win(store: DynamoJobStore) -> None:
    a = store.grant("j1", "q", "A")
    b = store.grant("j1", "q", "B")
    store.write_result_unfenced("j1", b, "B")
    store.write_result_unfenced("j1", a, "A")  # the bug, on purpose
    rec = store.get_job("j1")
    assert (rec.result, rec.result_token) == ("A", a)


BAD_IDS = ["", "x" * 129, "a\x00b", "a\nb", "a\rb", "-lead", "a b", "a:b", "{q}", "é", None, 5]
BAD_TOKENS = [0, -1, True, False, 1.0, "1", None, 2**0.5]


@pytest.mark.parametrize("job_id", BAD_IDS)
def test_bad_job_ids_write_nothing(store: DynamoJobStore, job_id: Any) -> None:
    calls = [lambda: store.grant(job_id, "q", "w"), lambda: store.write_result(job_id, 1, 1),
             lambda: store.record_failure(job_id, 1, "e", "dead"), lambda: store.release(job_id, 1),
             lambda: store.request_cancel(job_id), lambda: store.get_job(job_id),
             lambda: store.final_job_ids([job_id]), lambda: store.mark_queued([(job_id, "q", 0)]),
             lambda: store.write_result_unfenced(job_id, 1, 1)]
    for call in calls:
        with pytest.raises(InvalidInput):
            call()
    assert store._db.scan(TableName=store.table)["Items"] == []


@pytest.mark.parametrize("token", BAD_TOKENS)
def test_bad_tokens_write_nothing(store: DynamoJobStore, token: Any) -> None:
    good = store.grant("j1", "q", "w")
    before = raw(store, "j1")
    for call in (lambda: store.write_result("j1", token, 1), lambda: store.release("j1", token),
                 lambda: store.record_failure("j1", token, "e", "dead"),
                 lambda: store.write_result_unfenced("j1", token, 1)):
        with pytest.raises(InvalidInput):
            call()
    assert raw(store, "j1") == before and good == 1


@pytest.mark.parametrize("result", [{1, 2}, object(), b"bytes", float("nan"), float("inf"), {"k": 1j}])
def test_unserialisable_results_write_nothing(aws: tuple[Any, Any], store: DynamoJobStore,
                                              result: Any) -> None:
    t = store.grant("j1", "q", "w")
    before = raw(store, "j1")
    with pytest.raises(InvalidInput):
        store.write_result("j1", t, result)
    assert raw(store, "j1") == before
    assert aws[1].list_objects_v2(Bucket=BUCKET).get("KeyCount", 0) == 0


def test_deeply_nested_result_is_invalid_not_recursion_error(store: DynamoJobStore) -> None:
    t = store.grant("j1", "q", "w")
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(InvalidInput):
        store.write_result("j1", t, deep)


def test_bad_owner_and_queue_rejected(store: DynamoJobStore) -> None:
    for owner in ("", None, "x" * 300):
        with pytest.raises(InvalidInput):
            store.grant("j1", "q", owner)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        store.grant("j1", "Bad{q}", "w")
    assert raw(store, "j1") is None


def _ended(job_id: str, state: JobState, err: str | None = None) -> SettleEntry:
    return SettleEntry(job_id=job_id, queue="q", status=state, ended_at_ms=1, last_error=err)


def test_settle_ended_records_what_redis_ended_unless_the_item_is_final(store: DynamoJobStore) -> None:
    store.grant("died", "q", "A")  # its holder crashed on the last attempt; the lease expired
    assert store.settle_ended(_ended("died", JobState.DEAD, "lease expired on attempt 3")) is Settled.WRITTEN
    rec = store.get_job("died")
    assert (rec.status, rec.last_error) == (JobState.DEAD, "lease expired on attempt 3")
    assert rec.finished_at_ms is not None and (raw(store, "died") or {}).get("expires_at") is not None
    assert store.settle_ended(_ended("died", JobState.DEAD)) is Settled.MOVED_ON  # a repeat is harmless

    t = store.grant("done", "q", "A")
    store.write_result("done", t, "ok")
    assert store.settle_ended(_ended("done", JobState.DEAD)) is Settled.FINAL  # a result always wins
    assert store.get_job("done").status is JobState.SUCCEEDED

    store.grant("flagged", "q", "A")
    store.request_cancel("flagged")  # leased: flagged, then the holder died
    assert store.settle_ended(_ended("flagged", JobState.CANCELLED)) is Settled.WRITTEN
    assert store.get_job("flagged").status is JobState.CANCELLED

    # No item at all (the relay's mark_queued never landed): created, with its queue.
    assert store.settle_ended(_ended("ghost", JobState.DEAD)) is Settled.WRITTEN
    rec = store.get_job("ghost")
    assert (rec.status, rec.queue, rec.token, rec.last_error) == (
        JobState.DEAD, "q", 0, "the lease expired on the last attempt")


def test_a_settle_read_before_a_redrive_does_not_land_after_it(store: DynamoJobStore) -> None:
    """Issue 13 bug 2, the case the job model found left on the fixed code: a job never granted
    (item ``queued``) lapses on its last attempt and is reaped dead; the relay reads its settle
    entry (generation 0) and pauses; an operator redrives it (generation 1 minted, the job back
    in Redis, not granted yet); the relay's write must not end the waiting job ``dead``."""
    store.mark_queued([("waits", "q", 1)])
    assert store.redrive("waits") == 1
    assert store.settle_ended(_ended("waits", JobState.DEAD)) is Settled.MOVED_ON
    rec = store.get_job("waits")
    assert rec.status is JobState.QUEUED and (raw(store, "waits") or {}).get("expires_at") is None
    # The entry of the redriven generation still settles it.
    assert store.settle_ended(SettleEntry(job_id="waits", queue="q", status=JobState.DEAD, ended_at_ms=1,
                                       redrive_gen=1)) is Settled.WRITTEN
    assert store.get_job("waits").status is JobState.DEAD


def test_settle_ended_refuses_other_states_and_bad_ids(store: DynamoJobStore) -> None:
    with pytest.raises(InvalidInput):
        store.settle_ended(_ended("j1", JobState.SUCCEEDED))
    with pytest.raises(InvalidInput):
        store.settle_ended(SettleEntry(job_id="bad id", queue="q", status=JobState.DEAD, ended_at_ms=1))
    assert raw(store, "j1") is None


def test_a_settled_dead_job_can_run_again_after_a_redrive(store: DynamoJobStore) -> None:
    store.grant("j1", "q", "A")
    store.settle_ended(_ended("j1", JobState.DEAD))
    t = store.grant("j1", "q", "B", store.redrive("j1"))  # redriven by an operator
    assert store.write_result("j1", t, "second life") is WriteOutcome.WRITTEN
    assert store.get_job("j1").status is JobState.SUCCEEDED


def test_cancel_unrecorded_creates_a_cancelled_item_or_cancels_the_existing(store: DynamoJobStore) -> None:
    rec = store.cancel_unrecorded("new1", "q", "not acknowledged by Kafka")
    assert (rec.status, rec.queue, rec.last_error) == (JobState.CANCELLED, "q", "not acknowledged by Kafka")
    assert store.get_job("new1").status is JobState.CANCELLED
    with pytest.raises(JobCancelled):
        store.grant("new1", "q", "A")  # the relay or a worker that meets it later never runs it
    with pytest.raises(AlreadyFinished):
        store.cancel_unrecorded("new1", "q", "again")

    store.mark_queued([("queued1", "q", 0)])
    assert store.cancel_unrecorded("queued1", "q", "user").status is JobState.CANCELLED
    store.grant("leased1", "q", "A")
    rec = store.cancel_unrecorded("leased1", "q", "user")
    assert (rec.status, rec.cancel_requested) == (JobState.LEASED, True)
    with pytest.raises(InvalidInput):
        store.cancel_unrecorded("x1", "Bad Queue", "user")
    with pytest.raises(InvalidInput):
        store.cancel_unrecorded("x1", "q", "")
    assert raw(store, "x1") is None


def test_the_first_item_of_a_job_keeps_its_acceptance_time(store: DynamoJobStore, clock: Clock) -> None:
    """The gateway writes no item: GET shows the acceptance time from the id until the relay
    (or a cancel) creates one, and that item must say the same, not the writer's clock."""
    accepted = clock.ms - 60_000
    store.mark_queued([("j1", "q", accepted), ("j2", "q", 0)])
    assert store.get_job("j1").created_at_ms == accepted
    assert store.get_job("j2").created_at_ms == clock.ms  # unknown: now
    assert store.cancel_unrecorded("j3", "q", "user", accepted).created_at_ms == accepted
    assert store.get_job("j3").created_at_ms == accepted
    with pytest.raises(InvalidInput):
        store.mark_queued([("j4", "q", -1)])
    with pytest.raises(InvalidInput):
        store.cancel_unrecorded("j4", "q", "user", True)  # type: ignore[arg-type]
    assert raw(store, "j4") is None


def test_each_fenced_write_recognises_its_own_landed_retry_and_nothing_else(store: DynamoJobStore) -> None:
    """One ``_fenced_update``: a retry is success only when the item shows my token and what my
    write set; the same token with another result or error is refused (issue 16)."""
    t = store.grant("r", "q", "w")
    store.release("r", t)
    store.release("r", t)  # landed: queued under my token
    assert store.get_job("r").status is JobState.QUEUED
    t = store.grant("f", "q", "w")
    store.record_failure("f", t, "x" * 5000, "failed")
    store.record_failure("f", t, "x" * 5000, "failed")  # landed: the same (truncated) error
    assert store.get_job("f").last_error == "x" * 3999 + "\u2026"
    with pytest.raises(StoreError):
        store.record_failure("f", t, "another error", "failed")
    with pytest.raises(StoreError):
        store.release("f", t)  # failed, not queued: not my release
    t = store.grant("w", "q", "w")
    assert store.write_result("w", t, 1) is WriteOutcome.WRITTEN
    assert store.write_result("w", t, 1) is WriteOutcome.ALREADY_WRITTEN
    with pytest.raises(StoreError):
        store.write_result("w", t, 2)


def test_the_s3_client_is_built_on_the_first_large_result_only(
        aws: tuple[Any, Any], table: str, metrics: CountingMetrics, clock: Clock) -> None:
    # Cold start (issue 14): a container whose results fit the item never builds an S3 client.
    built: list[Any] = []

    def build() -> Any:
        built.append(aws[1])
        return aws[1]

    store = DynamoJobStore(aws[0], table, results=S3ResultSink(None, BUCKET, build_client=build),
                           large_result_bytes=1000, retention_days=2, metrics=metrics, now_ms=clock)
    store.write_result("j1", store.grant("j1", "q", "w"), "small")
    assert built == []
    store.write_result("j2", store.grant("j2", "q", "w"), {"blob": "x" * 5_000})
    assert store.get_job("j2").result == {"blob": "x" * 5_000}
    assert built == [aws[1]]
    with pytest.raises(StoreError):
        S3ResultSink(None, BUCKET)
