"""DynamoJobStore over real HTTP against the moto server: retries, large results, bad input."""

from __future__ import annotations

import hashlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from botocore.config import Config

from sluice.backends.dynamodb import tables
from sluice.backends.dynamodb.jobs import DynamoJobStore
from sluice.backends.dynamodb.results import S3ResultSink
from sluice.core.config import Settings
from sluice.core.errors import BackendUnavailable, InvalidInput, JobNotFound, LeaseLost, StaleToken
from sluice.core.models import JobSpec, JobState, WriteOutcome, dump_json

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


class CountingMetrics:
    def __init__(self) -> None:
        self.names: list[str] = []

    def count(self, name: str, value: float = 1, **dimensions: str) -> None:
        self.names.append(name)


@dataclass
class Env:
    settings: Settings
    store: DynamoJobStore
    db: Any
    s3: Any
    metrics: CountingMetrics

    def client_via(self, endpoint: str, **config: Any) -> Any:
        return boto3.client("dynamodb", region_name="us-east-1", endpoint_url=endpoint,
                            config=Config(**config))

    def items(self) -> list[dict[str, Any]]:
        return list(self.db.scan(TableName=self.settings.jobs_table, ConsistentRead=True)["Items"])

    def objects(self) -> list[str]:
        response = self.s3.list_objects_v2(Bucket=self.settings.results_bucket)
        return [o["Key"] for o in response.get("Contents", [])]


def make_env(moto_url: str, unique: str, **overrides: Any) -> Env:
    settings = Settings(aws_endpoint_url=moto_url, jobs_table=f"jobs-{unique}",
                        idempotency_table=f"idem-{unique}", results_bucket=f"results-{unique}", **overrides)
    tables.ensure_all(settings)
    tables.ensure_all(settings)  # idempotent: a second run changes nothing and raises nothing
    metrics = CountingMetrics()
    store = DynamoJobStore.from_settings(settings, metrics=metrics)
    common = {"region_name": "us-east-1", "endpoint_url": moto_url}
    return Env(settings, store, boto3.client("dynamodb", **common), boto3.client("s3", **common), metrics)


@pytest.fixture
def env(moto_url: str, unique: str) -> Env:
    return make_env(moto_url, unique)


def test_tables_have_the_documented_layout(env: Env) -> None:
    jobs = env.db.describe_table(TableName=env.settings.jobs_table)["Table"]
    idem = env.db.describe_table(TableName=env.settings.idempotency_table)["Table"]
    assert jobs["KeySchema"] == [{"AttributeName": "job_id", "KeyType": "HASH"}]
    assert idem["KeySchema"] == [{"AttributeName": "id", "KeyType": "HASH"}]
    ttl = env.db.describe_time_to_live(TableName=env.settings.idempotency_table)["TimeToLiveDescription"]
    assert ttl["AttributeName"] == "expiration"
    ttl = env.db.describe_time_to_live(TableName=env.settings.jobs_table)["TimeToLiveDescription"]
    assert ttl["AttributeName"] == "expires_at"
    rules = env.s3.get_bucket_lifecycle_configuration(Bucket=env.settings.results_bucket)["Rules"]
    assert rules[0]["Expiration"]["Days"] == env.settings.retention_days + 1


def lease_fields(env: Env, job_id: str) -> tuple[int, str, int]:
    item = env.db.get_item(TableName=env.settings.jobs_table, Key={"job_id": {"S": job_id}},
                           ConsistentRead=True)["Item"]
    return int(item["token"]["N"]), item["lease_owner"]["S"], int(item["lease_token"]["N"])


def test_a_grant_is_fenced_on_the_redis_lease_token(env: Env) -> None:
    """The job model's grant-after-long-pause: the item keeps the lease token of its latest grant,
    and a grant from an older lease is refused with LeaseLost, the item untouched."""
    store = env.store
    t1 = store.grant("j1", "q", "w-new", lease_token=5)
    assert lease_fields(env, "j1") == (t1, "w-new", 5)
    with pytest.raises(LeaseLost, match="granted to a newer lease") as refused:
        store.grant("j1", "q", "w-paused", lease_token=3)
    assert (refused.value.details["lease_token"], refused.value.details["granted_lease_token"]) == (3, 5)
    assert lease_fields(env, "j1") == (t1, "w-new", 5)
    # Equal: the same lease asking again (botocore retrying a grant whose answer was lost).
    assert store.grant("j1", "q", "w-new", lease_token=5) == t1 + 1
    # An older lease's grant that landed first is superseded by the newer one's.
    assert store.grant("j1", "q", "w-next", lease_token=9) == t1 + 2
    assert lease_fields(env, "j1") == (t1 + 2, "w-next", 9)
    # No lease token (callers holding no Redis lease): neither checked nor recorded.
    assert store.grant("j1", "q", "tool") == t1 + 3
    assert lease_fields(env, "j1") == (t1 + 3, "tool", 9)
    for bad in (0, -1, True, "9", 2**53):
        with pytest.raises(InvalidInput, match="lease token"):
            store.grant("j1", "q", "w", lease_token=bad)  # type: ignore[arg-type]
    assert lease_fields(env, "j1") == (t1 + 3, "tool", 9)


def test_a_grant_that_creates_the_item_stores_the_id_s_acceptance_time(env: Env) -> None:
    """Issue 33 (cheaper per job): the relay writes no ``queued`` item for a keyed id, so its grant
    creates the item, with the acceptance time of the id's ULID (what GET showed before the grant),
    not the grant's; never later than now, and now for an id without a ULID. An existing item keeps
    its own."""
    from sluice.core import ids

    def created(job_id: str) -> int:
        return env.store.get_job(job_id).created_at_ms

    accepted = int(time.time() * 1000) - 60_000
    keyed = ids.mint(accepted, "q", b"k" * 32)
    env.store.grant(keyed, "q", "w", lease_token=1)
    assert created(keyed) == accepted
    future = ids.mint(int(time.time() * 1000) + 3_600_000, "q", b"k" * 32)
    before = int(time.time() * 1000)
    env.store.grant(future, "q", "w", lease_token=1)
    assert before - 5_000 <= created(future) <= int(time.time() * 1000)
    env.store.grant("plain-1", "q", "w", lease_token=1)
    assert before - 5_000 <= created("plain-1") <= int(time.time() * 1000)
    marked = ids.mint(accepted, "q", b"k" * 32)
    env.store.mark_queued([(marked, "q", accepted - 5)])
    env.store.grant(marked, "q", "w", lease_token=1)
    assert created(marked) == accepted - 5


def test_an_older_lease_is_refused_whatever_the_status(env: Env) -> None:
    """Refused as stale before any other reason: a succeeded job's re-run (the second update of a
    grant) and a failed job alike; the newer lease is the one that deals with the job."""
    store = env.store
    store.write_result("ok", store.grant("ok", "q", "w", lease_token=10), 1)
    with pytest.raises(LeaseLost, match="granted to a newer lease"):
        store.grant("ok", "q", "w-old", lease_token=4)
    rerun = store.grant("ok", "q", "w-rerun", lease_token=11)  # a re-run: the status stays
    assert store.get_job("ok").status == JobState.SUCCEEDED
    assert lease_fields(env, "ok") == (rerun, "w-rerun", 11)
    store.record_failure("no", store.grant("no", "q", "w", lease_token=10), "bad", "failed")
    with pytest.raises(LeaseLost, match="granted to a newer lease"):
        store.grant("no", "q", "w-old", lease_token=4)
    gen = store.redrive("no")  # the redrive generation rules hold with the lease fence
    with pytest.raises(LeaseLost, match="granted to a newer lease"):
        store.grant("no", "q", "w-old", gen, lease_token=9)
    assert store.get_job("no").status == JobState.FAILED
    token = store.grant("no", "q", "w-redriven", gen, lease_token=12)
    assert store.get_job("no").status == JobState.LEASED
    assert lease_fields(env, "no") == (token, "w-redriven", 12)


def test_lifecycle_over_http(env: Env) -> None:
    store = env.store
    store.record_accepted(JobSpec(job_id="j1", queue="q", payload=1))
    store.mark_queued([("j1", "q", 0)])
    t1 = store.grant("j1", "q", "w1")
    store.record_failure("j1", t1, "boom", "queued")
    t2 = store.grant("j1", "q", "w2")
    assert store.write_result("j1", t2, {"ok": True}) is WriteOutcome.WRITTEN
    rec = store.get_job("j1")
    assert (rec.status, rec.attempts, rec.token, rec.result, rec.last_error) == (
        JobState.SUCCEEDED, 2, t2, {"ok": True}, "boom")
    with pytest.raises(StaleToken):
        store.write_result("j1", t1, {"ok": False})
    assert env.metrics.names == ["FencedWriteRejected"]
    with pytest.raises(JobNotFound):
        store.get_job("nope")


def test_mark_queued_and_final_job_ids_in_bulk(env: Env) -> None:
    store = env.store
    ids = [f"bulk-{i}" for i in range(120)]  # more than one BatchGetItem chunk
    store.mark_queued([(j, "q", 0) for j in ids])  # concurrent conditional updates
    assert [i["status"]["S"] for i in env.items()] == ["queued"] * 120
    for j in ids[:15]:
        store.write_result(j, store.grant(j, "q", "w"), j)
    store.grant(ids[15], "q", "w")
    store.record_failure(ids[110], store.grant(ids[110], "q", "w"), "e", "dead")
    assert store.final_job_ids([*ids, "unknown", *ids[:5]]) == set(ids[:15]) | {ids[110]}


def test_mark_queued_tolerates_failures(env: Env, moto_url: str) -> None:
    store = DynamoJobStore(env.db, "no-such-table")
    store.mark_queued([("a", "q", 0), ("b", "q", 0)])  # logged, not raised: status lags, nothing breaks
    assert env.items() == []


# Generous against a loaded machine: only the armed request may ever exceed the timeout.
READ_TIMEOUT = 1.0
HOLD = READ_TIMEOUT + 0.5


class SlowProxy:
    """A TCP proxy to the moto server that, when armed, forwards one matching request,
    lets it land, and then holds the response past the client's read timeout:
    exactly a write that timed out on the client but happened on the server."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.armed: bytes | None = None
        self.delay = 0.0
        self.landed = 0
        self.closing = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def arm(self, target: bytes, delay: float) -> None:
        self.armed, self.delay = target, delay

    def close(self) -> None:
        self.closing = True
        self.listener.close()

    def _accept(self) -> None:
        while not self.closing:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            buffer = b""
            while True:
                while b"\r\n\r\n" not in buffer:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                head, _, rest = buffer.partition(b"\r\n\r\n")
                length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                while len(rest) < length:
                    rest += conn.recv(65536)
                body, buffer = rest[:length], rest[length:]
                lines = [ln for ln in head.split(b"\r\n") if not ln.lower().startswith(b"connection:")]
                request = b"\r\n".join([*lines, b"Connection: close"]) + b"\r\n\r\n" + body
                response = self._forward(request)
                if self.armed is not None and self.armed in head:
                    self.armed = None
                    self.landed += 1
                    time.sleep(self.delay)  # the client gives up meanwhile
                    return
                conn.sendall(response)
                return  # upstream said close; so do we

    def _forward(self, request: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", self.upstream_port)) as up:
            up.sendall(request)
            chunks = []
            while chunk := up.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks)


@pytest.fixture
def proxy(moto_url: str) -> Iterator[SlowProxy]:
    p = SlowProxy(int(moto_url.rsplit(":", 1)[1]))
    yield p
    p.close()


def held_write(env: Env, proxy: SlowProxy, attempts: int) -> tuple[DynamoJobStore, int]:
    """A store whose calls go through ``proxy`` (botocore making ``attempts`` in all), and a token for
    job j1 granted directly: only the result write under test goes via the proxy, which holds it."""
    client = env.client_via(proxy.url, read_timeout=READ_TIMEOUT, connect_timeout=2,
                            retries={"mode": "standard", "total_max_attempts": attempts})
    token = env.store.grant("j1", "q", "w")
    proxy.arm(b"DynamoDB_20120810.UpdateItem", delay=HOLD)
    return DynamoJobStore(client, env.settings.jobs_table), token


def test_write_that_timed_out_but_landed_is_already_written(env: Env, proxy: SlowProxy) -> None:
    """botocore's own retry after a read timeout: the store reports success, not a conflict."""
    store, token = held_write(env, proxy, attempts=3)
    assert store.write_result("j1", token, {"v": 1}) is WriteOutcome.ALREADY_WRITTEN
    assert proxy.landed == 1
    rec = env.store.get_job("j1")
    assert (rec.status, rec.result, rec.result_token) == (JobState.SUCCEEDED, {"v": 1}, token)


def test_write_timeout_surfaces_as_retryable_and_the_retry_is_recognised(env: Env, proxy: SlowProxy) -> None:
    """No botocore retries: the caller sees BackendUnavailable and retries the same write itself."""
    store, token = held_write(env, proxy, attempts=1)
    with pytest.raises(BackendUnavailable):
        store.write_result("j1", token, [1, 2, 3])
    assert env.store.get_job("j1").status is JobState.SUCCEEDED  # it did land
    assert store.write_result("j1", token, [1, 2, 3]) is WriteOutcome.ALREADY_WRITTEN
    # A release that timed out and landed is recognised too, not turned into a conflict.
    t2 = env.store.grant("j2", "q", "w")
    proxy.arm(b"DynamoDB_20120810.UpdateItem", delay=HOLD)
    with pytest.raises(BackendUnavailable):
        store.release("j2", t2)
    store.release("j2", t2)
    assert env.store.get_job("j2").attempts == 0  # given back exactly once


def test_large_result_round_trips_through_s3(env: Env) -> None:
    """Default threshold (300 KB); 450 KB would not even fit in a DynamoDB item."""
    store = env.store
    big = {"rows": ["r" * 100 + str(i) for i in range(4_300)]}
    token = store.grant("big", "q", "w")
    assert store.write_result("big", token, big) is WriteOutcome.WRITTEN
    assert store.write_result("big", token, big) is WriteOutcome.ALREADY_WRITTEN
    digest = hashlib.sha256(dump_json(big).encode()).hexdigest()
    assert env.objects() == [f"results/_/big/{token}/{digest}.json"]
    rec = store.get_job("big")
    assert rec.result == big and rec.result_ref == f"s3://{env.settings.results_bucket}/{env.objects()[0]}"
    # A stale writer's large upload (even with the same token) lands under a key of its
    # own and changes nothing the item points to.
    newer = store.grant("big", "q", "w2")
    with pytest.raises(StaleToken):
        store.write_result("big", token, {"rows": ["stale" * 80_000]})
    assert len(env.objects()) == 2
    assert store.get_job("big").result == big and newer > token


def test_result_just_under_threshold_stays_inline(moto_url: str, unique: str) -> None:
    env = make_env(moto_url, unique, large_result_bytes=2_000)
    sink = S3ResultSink(env.s3, env.settings.results_bucket)
    store = DynamoJobStore(env.db, env.settings.jobs_table, results=sink, large_result_bytes=2_000)
    exact = "x" * (2_000 - 2)  # JSON adds the two quotes: exactly at the limit
    store.write_result("a", store.grant("a", "q", "w"), exact)
    store.write_result("b", store.grant("b", "q", "w"), exact + "y")
    assert [k.rsplit("/", 1)[0] for k in env.objects()] == ["results/_/b/1"]
    assert store.get_job("a").result == exact and store.get_job("b").result == exact + "y"


def test_bad_input_is_typed_and_writes_nothing(env: Env) -> None:
    store = env.store
    bad_ids: list[Any] = ["", "x" * 129, "bad\x00id", "bad\nid", "tab\tid", "del\x7f", None, 3]
    for job_id in bad_ids:
        calls = (lambda j: store.grant(j, "q", "w"), lambda j: store.write_result(j, 1, 1),
                 lambda j: store.record_failure(j, 1, "e", "dead"), lambda j: store.release(j, 1),
                 lambda j: store.request_cancel(j), lambda j: store.mark_queued([(j, "q", 0)]))
        for call in calls:
            with pytest.raises(InvalidInput):
                call(job_id)
    assert env.items() == []

    token = store.grant("j1", "q", "w")
    before = env.items()
    for bad_token in (0, -1, -(2**63), True, 1.5, "1", None, [1]):
        for fenced_call in (lambda t: store.write_result("j1", t, 1),
                            lambda t: store.record_failure("j1", t, "e", "failed"),
                            lambda t: store.release("j1", t)):
            with pytest.raises(InvalidInput):
                fenced_call(bad_token)
    for bad_result in (object(), {1, 2}, float("nan"), {"x": float("-inf")}, b"raw", {"k": (1j)}):
        with pytest.raises(InvalidInput):
            store.write_result("j1", token, bad_result)
    assert env.items() == before and env.objects() == []
