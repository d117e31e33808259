"""The relay on a real Tansu broker and a real redis-server: volume, poison, rate, watermarks."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from sluice.backends.redis.keys import QueueKeys
from tests.backends.relay_proc import (
    build,
    committed,
    create_topic,
    job_records,
    produce,
    ready_ids,
    relayed_offsets,
)
from tests.loading import module_from_file

pytestmark = pytest.mark.integration
PARTITIONS = 4


@pytest.fixture
def topic(tansu: Any, unique: str) -> str:
    name = f"jobs-{unique}"
    create_topic(tansu.extra["bootstrap"], name, PARTITIONS)
    return name


def step_until(relay: Any, done: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "relay did not get there in time"
        relay.step()


@pytest.mark.timeout(60)

def relay_lambda_env(monkeypatch: pytest.MonkeyPatch, bs: str, topic: str, redis_url: str, moto_url: str,
                     unique: str, key: str) -> None:
    """The relay Lambda's environment over these servers (its dead-letter topic and jobs table made)."""
    from sluice.backends.dynamodb import tables
    from sluice.core.config import Settings
    from sluice.entry import relay as relay_entry
    from sluice.entry import root as wiring

    create_topic(bs, f"{topic}.dlq", 1)
    env = {"SLUICE_REDIS_URL": redis_url, "SLUICE_KAFKA_BOOTSTRAP": bs, "SLUICE_KAFKA_TOPIC": topic,
           "SLUICE_KAFKA_DEAD_LETTER_TOPIC": f"{topic}.dlq", "SLUICE_KAFKA_CONSUMER_GROUP": f"g-{unique}",
           "SLUICE_AWS_ENDPOINT_URL": moto_url, "SLUICE_JOBS_TABLE": f"jobs-{unique}",
           "SLUICE_RELAY_STOP_BEFORE_MS": "5000", "SLUICE_JOB_ID_SECRET": key}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    wiring.reset()
    relay_entry._source.cache_clear()
    tables.create_jobs_table(wiring.boto_client("dynamodb", Settings.from_env()), f"jobs-{unique}")


def relay_app() -> Any:
    """functions/relay/app.py, loaded as Lambda loads it (a fresh module each time)."""
    return module_from_file(Path(__file__).resolve().parents[2] / "functions/relay/app.py", "relay_app")

def test_ten_thousand_jobs_each_in_redis_exactly_once(tansu: Any, topic: str, redis_url: str,
                                                      redis_client: Any, unique: str) -> None:
    bs = tansu.extra["bootstrap"]
    records = job_records("j", 10_000)
    ends = produce(bs, topic, records)
    relay, source = build(redis_url, bs, topic, f"g-{unique}")
    try:
        step_until(relay, lambda: redis_client.zcard(QueueKeys("q").ready) >= 10_000, 40)
        relay.step()
    finally:
        relay.stop()
        source.close()
    ids = ready_ids(redis_client)
    assert len(ids) == 10_000 and set(ids) == {key.decode() for key, _, _ in records}
    assert relay.report.pushed == 10_000 and relay.report.skipped == 0
    assert sum(ends.values()) == 10_000
    assert committed(bs, topic, f"g-{unique}", PARTITIONS) == ends
    assert relayed_offsets(redis_client, topic, PARTITIONS) == {p: e - 1 for p, e in ends.items()}


def test_poison_records_go_to_the_dead_letter_topic_and_the_partition_keeps_flowing(
        tansu: Any, topic: str, redis_url: str, redis_client: Any, unique: str) -> None:
    bs, group = tansu.extra["bootstrap"], f"g-{unique}"
    good = job_records("ok", 6, partitions=1)
    poison: list[tuple[bytes | None, bytes | None, int | None]] = [
        (b"junk", b"\xff\xfe{not json", 0),
        (b"v3", json.dumps({"schema_version": 3, "job_id": "v3", "queue": "q"}).encode(), 0),
        (b"bad", json.dumps({"job_id": "bad", "queue": "Bad Queue!"}).encode(), 0),
        (b"tombstone", None, 0),
    ]
    produce(bs, topic, good[:3] + poison + good[3:])
    relay, source = build(redis_url, bs, topic, group)
    try:
        step_until(relay, lambda: redis_client.zcard(QueueKeys("q").ready) >= 6, 20)
        relay.step()
    finally:
        relay.stop()
        source.close()
    assert sorted(ready_ids(redis_client)) == sorted(key.decode() for key, _, _ in good)
    assert committed(bs, topic, group, PARTITIONS)[0] == 10  # past the poison, not stuck on it
    letters = consume_all(bs, f"{topic}.dlq", 4)
    reasons = {int(h["sluice-source-offset"]): h["sluice-reason"].decode() for _, h in letters}
    assert sorted(reasons) == [3, 4, 5, 6]
    assert reasons[3].startswith("undecodable")
    assert reasons[4] == "unknown schema_version 3"  # 1 and 2 (sealed, issue 27) are known
    assert reasons[5].startswith("invalid job spec") and "queue" in reasons[5]
    assert reasons[6].startswith("undecodable")
    assert letters[0][0] == b"\xff\xfe{not json"  # the record as it was, for a later look
    assert all(h["sluice-source-topic"] == topic.encode() for _, h in letters)


def consume_all(bootstrap: str, topic: str, expected: int) -> list[tuple[bytes, dict[str, bytes]]]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    try:
        consumer.assign([TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))])
        out: list[tuple[bytes, dict[str, bytes]]] = []
        deadline = time.monotonic() + 10
        while len(out) < expected and time.monotonic() < deadline:
            for records in consumer.poll(200).values():
                out += [(r.value, dict(r.headers)) for r in records]
        return sorted(out, key=lambda x: int(x[1]["sluice-source-offset"]))
    finally:
        consumer.close()


def test_jobs_final_in_the_store_are_dropped_and_the_rest_marked_queued(
        tansu: Any, topic: str, redis_url: str, redis_client: Any, moto_url: str, unique: str) -> None:
    from sluice.backends.dynamodb import tables
    from sluice.backends.dynamodb.jobs import DynamoJobStore
    from sluice.core.config import Settings
    from sluice.core.models import JobSpec, JobState

    bs, group = tansu.extra["bootstrap"], f"g-{unique}"
    cfg = Settings(aws_endpoint_url=moto_url, jobs_table=f"jobs-{unique}")
    store = DynamoJobStore.from_settings(cfg)
    tables.create_jobs_table(store._db, cfg.jobs_table)
    records = job_records("s", 20)
    for _, value, _ in records:
        store.record_accepted(JobSpec.model_validate_json(value))
    cancelled = {"s-3", "s-11"}
    for job_id in cancelled:
        assert store.request_cancel(job_id).status == JobState.CANCELLED
    produce(bs, topic, records)
    relay, source = build(redis_url, bs, topic, group, store=store)
    try:
        step_until(relay, lambda: relay.report.pushed + relay.report.final_dropped >= 20, 20)
    finally:
        relay.stop()  # drains the background status writes
        source.close()
    assert set(ready_ids(redis_client)) == {key.decode() for key, _, _ in records} - cancelled
    assert relay.report.final_dropped == 2
    statuses = {key.decode(): store.get_job(key.decode()).status for key, _, _ in records}
    assert {j for j, s in statuses.items() if s == JobState.CANCELLED} == cancelled
    assert {j for j, s in statuses.items() if s == JobState.QUEUED} == set(statuses) - cancelled


class LambdaContext:
    function_name = "sluice-relay"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:sluice-relay"
    aws_request_id = "c6af9ac6-7b61-11e6-9a41-93e812345678"

    def __init__(self, budget_ms: int) -> None:
        self.deadline = time.monotonic() + budget_ms / 1000

    def get_remaining_time_in_millis(self) -> int:
        return int((self.deadline - time.monotonic()) * 1000)


@pytest.mark.timeout(60)
def test_the_relay_lambda_relays_until_shortly_before_its_timeout(
        tansu: Any, topic: str, redis_url: str, redis_client: Any, moto_url: str, unique: str,
        monkeypatch: pytest.MonkeyPatch, event_json: Any) -> None:

    from sluice.backends.dynamodb import tables
    from sluice.core.config import Settings
    from sluice.entry import relay as relay_entry
    from sluice.entry import root as wiring

    bs = tansu.extra["bootstrap"]
    env = {"SLUICE_REDIS_URL": redis_url, "SLUICE_KAFKA_BOOTSTRAP": bs, "SLUICE_KAFKA_TOPIC": topic,
           "SLUICE_KAFKA_CONSUMER_GROUP": f"g-{unique}", "SLUICE_AWS_ENDPOINT_URL": moto_url,
           "SLUICE_JOBS_TABLE": f"jobs-{unique}", "SLUICE_RELAY_STOP_BEFORE_MS": "5000"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    wiring.reset()
    relay_entry._source.cache_clear()
    tables.create_jobs_table(wiring.boto_client("dynamodb", Settings.from_env()), f"jobs-{unique}")
    records = job_records("l", 50)  # the moto server marks ~100 items/s queued: keep the drain short
    produce(bs, topic, records)
    app = relay_app()
    started = time.monotonic()
    try:
        result = app.handler(event_json("scheduled_relay.json"), LambdaContext(budget_ms=7_000))
    finally:
        relay_entry._source(Settings.from_env()).close()
        relay_entry._source.cache_clear()
        wiring.reset()
    took = time.monotonic() - started
    # relays ~2 s (7 s of budget minus the 5 s it keeps for the hand-over), then commits, releases
    # and drains status writes (at most 2 s): it must return before the function would time out
    assert 1.5 <= took < 7.0
    assert result["pushed"] == 50 and result["partitions_owned"] == [0, 1, 2, 3]
    assert result["lag"] == 0  # measured against Kafka's end offsets as it stopped
    assert set(ready_ids(redis_client)) == {key.decode() for key, _, _ in records}
    live = redis_client.zcount(QueueKeys("sluice-relay").leased, time.time() * 1000, "+inf")
    assert live == 0  # every partition handed back for the next invocation


def test_after_a_push_the_relay_starts_workers_sized_from_the_backlog(
        tansu: Any, topic: str, redis_url: str, redis_client: Any, unique: str, tmp_path: Path) -> None:
    import sys

    from sluice.backends.aws.dispatch import LocalProcessDispatcher
    from sluice.backends.redis.engine import RedisQueue
    from sluice.core.models import DispatchEvent

    bs = tansu.extra["bootstrap"]
    RedisQueue.from_url(redis_url).set_config("q", max_in_flight=20)
    produce(bs, topic, job_records("d", 300))
    write = "import sys, pathlib, os; pathlib.Path(sys.argv[1], str(os.getpid())).write_text(sys.argv[2])"
    dispatcher = LocalProcessDispatcher([sys.executable, "-c", write, str(tmp_path), "{event}"],
                                        max_processes=10)
    relay, source = build(redis_url, bs, topic, f"g-{unique}", dispatcher=dispatcher, worker_batch=5,
                          dispatch_interval_s=60)  # one dispatch round, however slow the machine
    try:
        step_until(relay, lambda: relay.report.pushed >= 300 and relay.report.dispatched > 0, 20)
        deadline = time.monotonic() + 20
        while dispatcher.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        relay.stop()
        source.close()
        dispatcher.close()
    events = [DispatchEvent.model_validate_json(p.read_text()) for p in tmp_path.iterdir()]
    # 300 ready, at most 20 in flight, 5 per worker: 4 workers, all told to drain "q"
    assert len(events) == relay.report.dispatched == 4
    assert all(e.queues == ["q"] and e.batch == 5 and e.source == "relay" for e in events)


@pytest.mark.timeout(60)
def test_the_relay_lambda_dead_letters_records_no_gateway_minted(
        tansu: Any, topic: str, redis_url: str, redis_client: Any, moto_url: str, unique: str,
        monkeypatch: pytest.MonkeyPatch, event_json: Any) -> None:
    """Issue 19, item 9: anyone who can write to Kafka cannot enqueue (an unauthenticated cluster)."""

    from sluice.core import ids, seal
    from sluice.core.config import Settings
    from sluice.core.models import JobSpec
    from sluice.entry import relay as relay_entry
    from sluice.entry import root as wiring

    key = f"the-deployment-job-id-key-{unique}"
    bs = tansu.extra["bootstrap"]
    relay_lambda_env(monkeypatch, bs, topic, redis_url, moto_url, unique, key)
    now = int(time.time() * 1000)
    minted = [ids.mint(now, "q", key.encode()) for _ in range(3)]
    forged = [f"plain-{unique}", ids.mint(now, "q", b"another-deployments-key-000"),
              ids.mint(now, "elsewhere", key.encode())]
    # sealed as a gateway seals them (issue 27), the forged ones by their writer, who lacks our key
    records = [(j.encode(), seal.seal_spec(JobSpec(job_id=j, queue="q", payload=None, enqueued_at_ms=now),
                                           key.encode() if j in minted else b"not-this-deployments-key"
                                           ).model_dump_json().encode(), 0)
               for j in [minted[0], *forged, *minted[1:]]]
    produce(bs, topic, records)
    app = relay_app()
    try:
        # 7 s of relaying: the dead-letter producer starts cold.
        result = app.handler(event_json("scheduled_relay.json"), LambdaContext(budget_ms=12_000))
    finally:
        relay_entry._source(Settings.from_env()).close()
        relay_entry._source.cache_clear()
        wiring.reset()
    assert result["pushed"] == 3 and result["dead_lettered"] == 3, result
    assert set(ready_ids(redis_client)) == set(minted)
    letters = consume_all(bs, f"{topic}.dlq", 3)
    assert sorted(h["sluice-reason"].decode().split(":")[0] for _, h in letters) == ["unminted"] * 3
    assert committed(bs, topic, f"g-{unique}", PARTITIONS)[0] == 6  # past them, not stuck


@pytest.mark.timeout(60)
def test_the_relay_lambda_refuses_records_altered_after_the_gateway_sealed_them(
        tansu: Any, topic: str, redis_url: str, redis_client: Any, moto_url: str, unique: str,
        monkeypatch: pytest.MonkeyPatch, event_json: Any) -> None:
    """Issue 27, item 4: a record with a valid id but another payload, priority, attempts or run-at
    than the gateway sealed (or an unsealed or expired one) is never pushed: its job ends visibly dead
    with the reason in the jobs table (what GET /v1/jobs/<id> reads), and the record goes to the
    dead-letter topic. A tampered copy of a job already queued leaves that job alone."""

    from sluice.core import ids, limits, seal
    from sluice.core.config import Settings
    from sluice.core.models import JobSpec
    from sluice.entry import relay as relay_entry
    from sluice.entry import root as wiring

    key = f"the-deployment-job-id-key-{unique}".encode()
    bs = tansu.extra["bootstrap"]
    relay_lambda_env(monkeypatch, bs, topic, redis_url, moto_url, unique, key.decode())
    now = int(time.time() * 1000)

    def sealed(**fields: Any) -> JobSpec:
        return seal.seal_spec(JobSpec(job_id=ids.mint(now, "q", key), queue="q", payload={"to": "ada"},
                                      enqueued_at_ms=now, **fields), key)

    good = sealed()
    refused = {
        "payload": sealed().model_copy(update={"payload": {"to": "mallory"}}),
        "priority": sealed().model_copy(update={"priority": 9}),
        "attempts": sealed().model_copy(update={"max_attempts": 100}),
        "run_at": sealed(run_at_ms=now + 60_000).model_copy(update={"run_at_ms": 0}),
        "unsealed": JobSpec(job_id=ids.mint(now, "q", key), queue="q", payload=1, enqueued_at_ms=now),
        "expired": seal.seal_spec(JobSpec(job_id=ids.mint(now, "q", key), queue="q", payload=1,
                                          enqueued_at_ms=now - limits.JOB_LIFE_MS), key),
    }
    queued = sealed()  # pushed and recorded before; then a copy of it, altered, comes through Kafka
    copy = queued.model_copy(update={"priority": 9})
    # a genuine record replayed past the life bound (a Redis loss): its queued item ends, with why
    replayed = seal.seal_spec(JobSpec(job_id=ids.mint(now, "q", key), queue="q", payload=2,
                                      enqueued_at_ms=now - limits.JOB_LIFE_MS), key)
    wiring.store(Settings.from_env()).mark_queued([(queued.job_id, "q", now), (replayed.job_id, "q", now)])
    records = [(s.job_id.encode(), s.model_dump_json().encode(), 0)
               for s in [good, *refused.values(), copy, replayed]]
    produce(bs, topic, records)
    app = relay_app()
    try:
        result = app.handler(event_json("scheduled_relay.json"), LambdaContext(budget_ms=12_000))
        store = wiring.store(Settings.from_env())
        items = {name: store.get_job(s.job_id) for name, s in refused.items()}
        left, ended = store.get_job(queued.job_id), store.get_job(replayed.job_id)
    finally:
        relay_entry._source(Settings.from_env()).close()
        relay_entry._source.cache_clear()
        wiring.reset()
    assert result["pushed"] == 1 and result["dead_lettered"] == len(refused) + 2, result
    assert left.status == "queued" and left.last_error is None
    assert ended.status == "dead" and "expired" in str(ended.last_error)
    assert set(ready_ids(redis_client)) == {good.job_id}
    for name, record in items.items():
        assert record.status == "dead", name
        assert record.last_error is not None and record.last_error.startswith("refused by the relay: "), name
    assert all("seal" in str(items[n].last_error) for n in ("payload", "priority", "attempts", "run_at"))
    assert "unsealed" in str(items["unsealed"].last_error) and "expired" in str(items["expired"].last_error)
    letters = consume_all(bs, f"{topic}.dlq", len(refused) + 2)
    assert len(letters) == len(refused) + 2
    assert committed(bs, topic, f"g-{unique}", PARTITIONS)[0] == len(records)  # past them, not stuck
