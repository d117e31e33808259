"""The gateway against the real adapters: Tansu (Kafka), the moto server (DynamoDB), redis-server.

Requests are the API Gateway REST proxy event fixtures (tests/events: hand-built in the documented
REST proxy shape, not captured from a deployment) or built the same way, and
go through ``Gateway`` over ``build_api`` (the composition root's adapters), or over
real HTTP through the local adapter and ``sluice.Client``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from sluice.backends.dynamodb.idempotency import DynamoKeyStore
from sluice.backends.kafka.auth import client_config
from sluice.backends.kafka.producer import KafkaJobLog
from sluice.client import Client
from sluice.core import seal
from sluice.core.bus import EventBus
from sluice.core.config import Settings
from sluice.core.errors import AlreadyFinished, BackendUnavailable
from sluice.core.lazy import resolve
from sluice.core.models import JobSpec
from sluice.entry import root as wiring
from sluice.entry.gateway import Gateway, build_api
from sluice.gateway.api import Api, Backends, IdMinting
from sluice_dev.local import servers
from sluice_dev.local.api_server import LocalGateway
from tests.backends.test_gateway_stack import job_items, kafka_records, stack_settings

pytestmark = pytest.mark.integration
EVENTS = Path(__file__).parent.parent / "events"


@pytest.fixture(scope="module")
def settings(tansu: servers.Server, moto_server: servers.Server,
             redis_server: servers.Server) -> Iterator[Settings]:
    s = stack_settings(tansu, moto_server, redis_server)
    yield s
    wiring.reset()


@pytest.fixture(scope="module")
def api(settings: Settings) -> Api:
    return build_api(settings)


@pytest.fixture
def gateway(api: Api) -> Gateway:
    return Gateway(api)


def recorded(name: str, **changes: Any) -> dict[str, Any]:
    event: dict[str, Any] = json.loads((EVENTS / name).read_text())
    event.update(changes)
    return event


def post(queue: str, body: Any, key: str | None = None, path_suffix: str = "") -> dict[str, Any]:
    event = recorded("apigw_enqueue.json", path=f"/v1/queues/{queue}/jobs{path_suffix}",
                     pathParameters={"queue": queue}, body=json.dumps(body))
    event["headers"] = {k: v for k, v in event["headers"].items() if k != "Idempotency-Key"}
    if key is not None:
        event["headers"]["Idempotency-Key"] = key
    event["multiValueHeaders"] = {k: [v] for k, v in event["headers"].items()}
    return event


Handler = Callable[[dict[str, Any], Any], dict[str, Any]]


def call(gateway: Handler, event: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
    response = gateway(event, None)
    headers = {k.lower(): v[-1] for k, v in (response.get("multiValueHeaders") or {}).items()}
    headers |= {k.lower(): v for k, v in (response.get("headers") or {}).items()}
    return response["statusCode"], headers, json.loads(response["body"]) if response.get("body") else None


def get(path: str) -> dict[str, Any]:
    return recorded("apigw_get_job.json", path=path)


def test_recorded_enqueue_reaches_kafka_and_the_jobs_table(gateway: Gateway, settings: Settings) -> None:
    code, headers, body = call(gateway, recorded("apigw_enqueue.json"))
    assert code == 202 and headers["location"] == f"/live/v1/jobs/{body['job_id']}"  # the recorded stage
    records = dict(kafka_records(settings))
    value = records[body["job_id"]]  # keyed by job id
    spec = JobSpec.model_validate(value)  # the record is a JobSpec, as the relay reads it
    assert (value["schema_version"], spec.queue, spec.priority, spec.lease_ms) == (2, "emails", 5, 60_000)
    assert seal.verify_spec(spec, [gateway.api.job_id_key])  # sealed (issue 27)
    code, _, status = call(gateway, get(f"/v1/jobs/{body['job_id']}"))
    assert (code, status["status"], status["attempts"]) == (200, "accepted", 0)
    assert status["created_at_ms"] == spec.enqueued_at_ms


def test_the_acceptance_time_survives_the_relay_recording_it(gateway: Gateway, settings: Settings) -> None:
    """GET shows the acceptance time from the id until the relay's mark_queued creates the
    first item; that item must carry the same time, not the relay's clock."""
    code, _, body = call(gateway, post("stamps", {"payload": 1}))
    assert code == 202
    spec = JobSpec.model_validate(dict(kafka_records(settings))[body["job_id"]])
    accepted = call(gateway, get(f"/v1/jobs/{body['job_id']}"))[2]
    assert (accepted["status"], accepted["created_at_ms"]) == ("accepted", spec.enqueued_at_ms)
    time.sleep(0.05)
    gateway.api.store.mark_queued([(spec.job_id, spec.queue, spec.enqueued_at_ms)])
    queued = call(gateway, get(f"/v1/jobs/{body['job_id']}"))[2]
    assert (queued["status"], queued["created_at_ms"]) == ("queued", spec.enqueued_at_ms)
    assert queued["updated_at_ms"] > queued["created_at_ms"]


def test_batch_is_in_kafka_and_readable_at_once(gateway: Gateway, settings: Settings) -> None:
    jobs = [{"payload": {"n": i}, "priority": i % 10} for i in range(25)]
    code, _, body = call(gateway, post("batchq", {"jobs": jobs}, path_suffix="/batch"))
    assert code == 202
    ids = [j["job_id"] for j in body["jobs"]]
    records = dict(kafka_records(settings))
    assert [records[i]["payload"]["n"] for i in ids] == list(range(25))
    assert not set(ids) & set(job_items(settings))  # no status write on the happy path
    for job_id in ids[:3]:
        code, _, status = call(gateway, get(f"/v1/jobs/{job_id}"))
        assert (code, status["status"], status["queue"]) == (200, "accepted", "batchq")


def test_forged_wrong_queue_and_expired_ids_are_404(gateway: Gateway, api: Api, settings: Settings) -> None:
    _, _, body = call(gateway, recorded("apigw_enqueue.json"))
    stamp, queue, mac = body["job_id"].split(".")
    forged = f"{stamp}.{queue}.{'0' * 16 if mac != '0' * 16 else '1' * 16}"
    for job_id in (forged, f"{stamp}.batchq.{mac}"):
        code, _, doc = call(gateway, get(f"/v1/jobs/{job_id}"))
        assert (code, doc["code"]) == (404, "NOT_FOUND")
    later = Api(Backends(api.log, api.store, api.queue, events=EventBus()),
                IdMinting(api.job_id_key, horizon_ms=api.id_horizon_ms),
                clock=lambda: int(time.time() * 1000) + api.id_horizon_ms + 1000)
    assert call(Gateway(later), get(f"/v1/jobs/{body['job_id']}"))[0] == 404
    assert call(gateway, get(f"/v1/jobs/{body['job_id']}"))[0] == 200


def test_cancel_before_the_relay_leaves_a_tombstone_the_relay_skips(
        gateway: Gateway, api: Api, settings: Settings, redis_url: str, unique: str) -> None:
    import redis as redis_lib

    from sluice.backends.redis.keys import QueueKeys
    from tests.backends.relay_proc import build

    queue = f"tomb{unique}"[:60].lower()
    ids = [call(gateway, post(queue, {"payload": i}))[2]["job_id"] for i in range(3)]
    code, _, body = call(gateway, recorded("apigw_cancel_job.json", path=f"/v1/jobs/{ids[0]}"))
    assert (code, body) == (202, {"job_id": ids[0], "status": "cancelled"})
    code, _, status = call(gateway, get(f"/v1/jobs/{ids[0]}"))
    assert (code, status["status"], status["queue"]) == (200, "cancelled", queue)
    assert job_items(settings)[ids[0]] == "cancelled"
    # The relay reads the topic from the start: it must drop every final job in it, ours included.
    final = api.store.final_job_ids([k for k, _ in kafka_records(settings)])
    assert ids[0] in final
    relay, source = build(redis_url, settings.kafka_bootstrap, settings.kafka_topic, f"g-{unique}",
                          store=api.store)
    ready = QueueKeys(queue).ready
    client = redis_lib.Redis.from_url(redis_url, decode_responses=True)
    try:
        deadline = time.monotonic() + 20
        while client.zcard(ready) < 2 or relay.report.final_dropped < len(final):
            assert time.monotonic() < deadline, "the relay did not get there in time"
            relay.step()
    finally:
        relay.stop()  # drains the background status writes
        source.close()
    assert sorted(client.zrange(ready, 0, -1)) == sorted(ids[1:])  # the cancelled job never reached Redis
    statuses = [call(gateway, get(f"/v1/jobs/{j}"))[2]["status"] for j in ids]
    assert statuses == ["cancelled", "queued", "queued"]
    assert call(gateway, recorded("apigw_cancel_job.json", path=f"/v1/jobs/{ids[0]}"))[0] == 409


def test_hostile_input_writes_nothing_anywhere(gateway: Gateway, settings: Settings) -> None:
    before_kafka, before_items = len(kafka_records(settings)), len(job_items(settings))
    hostile = [
        ("not json", None), ('{"payload": ' + "[" * 65 + "]" * 65 + "}", None), ('{"payload": NaN}', None),
        ('{"payload": 1, "payload": 2}', None), ('{"payload": 1, "job_id": "x"}', None),
        ('{"payload": ' + "9" * 39 + "}", None), ('{"payload": "' + "x" * 300_000 + '"}', None),
        ('{"jobs": [{"payload": 1}, {"payload": 2, "priority": 10}]}', "/batch"),
    ]
    for raw, suffix in hostile:
        event = post("hostile", None, path_suffix=suffix or "")
        event["body"] = raw
        assert call(gateway, event)[0] in (400, 413)
    event = post("bad:queue", {"payload": 1})
    assert call(gateway, event)[0] == 400
    assert (len(kafka_records(settings)), len(job_items(settings))) == (before_kafka, before_items)


def test_idempotency_on_dynamodb(gateway: Gateway, settings: Settings) -> None:
    first = call(gateway, post("idem", {"payload": {"order": 1}}, key="order-1"))
    again = call(gateway, post("idem", {"payload": {"order": 1}}, key="order-1"))
    other = call(gateway, post("idem", {"payload": {"order": 2}}, key="order-1"))
    assert (first[0], again[0], other[0]) == (202, 200, 422)
    assert again[2] == first[2] and again[1]["idempotent-replayed"] == "true"
    assert other[1]["content-type"] == "application/problem+json"
    # The repeat appended the same record again (the relay and Redis keep one job per id); the 422 nothing.
    keyed = [(k, v) for k, v in kafka_records(settings) if (v["idempotency_key"] or "").endswith("|order-1")]
    assert [k for k, _ in keyed] == [first[2]["job_id"]] * 2 and keyed[0][1] == keyed[1][1]


class HeldLog:
    """The real Kafka log, with a gate before the append so two requests truly overlap."""

    def __init__(self, inner: KafkaJobLog) -> None:
        self.inner, self.entered, self.release = inner, threading.Event(), threading.Event()

    def append(self, specs: Sequence[JobSpec]) -> None:
        self.entered.set()
        assert self.release.wait(10)
        self.inner.append(specs)


def test_two_identical_requests_at_once_make_one_job(api: Api, settings: Settings) -> None:
    held = HeldLog(api.log)  # type: ignore[arg-type]
    slow_api = Api(Backends(held, api.store, api.queue, events=EventBus()), IdMinting(api.job_id_key),
                   idempotency=api.idempotency)
    first_container, second_container = Gateway(slow_api), Gateway(slow_api)
    results: list[tuple[int, dict[str, str], Any]] = []
    thread = threading.Thread(target=lambda: results.append(
        call(first_container, post("idem", {"payload": "once"}, key="same-moment"))))
    thread.start()
    assert held.entered.wait(10)
    # The second claims the first's record and answers its job (it waits on the same gate to append).
    second: list[tuple[int, dict[str, str], Any]] = []
    other = threading.Thread(target=lambda: second.append(
        call(second_container, post("idem", {"payload": "once"}, key="same-moment"))))
    other.start()
    wait_for(lambda: _claimed(api))
    held.release.set()
    thread.join(10)
    other.join(10)
    [(code, _, accepted)] = results
    [(again_code, _, again)] = second
    assert (code, again_code, again) == (202, 200, accepted)
    code, _, replay = call(second_container, post("idem", {"payload": "once"}, key="same-moment"))
    assert (code, replay) == (200, accepted)
    keyed = {k for k, v in kafka_records(settings) if (v["idempotency_key"] or "").endswith("|same-moment")}
    assert keyed == {accepted["job_id"]}


def wait_for(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _claimed(api: Api) -> bool:
    store = resolve(api.idempotency)
    assert isinstance(store, DynamoKeyStore)
    found = store.client.scan(TableName=store.table_name)["Items"]
    return any(i.get("claimed") == {"BOOL": True} for i in found)


def test_kafka_unavailable_is_503_and_nothing_is_left_accepted(api: Api, settings: Settings) -> None:
    dead = KafkaJobLog({"bootstrap_servers": [f"127.0.0.1:{servers.free_port()}"]}, settings.kafka_topic,
                       delivery_timeout_ms=1500, request_timeout_ms=500, max_block_ms=500)
    down = Gateway(Api(Backends(dead, api.store, api.queue, events=EventBus()), IdMinting(api.job_id_key),
                       idempotency=api.idempotency))
    before = set(job_items(settings))
    code, headers, doc = call(down, post("down", {"payload": 1}, key="while-down"))
    assert (code, headers["retry-after"], doc["code"]) == (503, "1", "UNAVAILABLE")
    assert "job_id" not in doc
    in_kafka = {k for k, _ in kafka_records(settings)}
    accepted = {j for j, status in job_items(settings).items() if status == "accepted"}
    assert accepted <= in_kafka  # no job is reported accepted that Kafka did not acknowledge
    # The unacknowledged job is withdrawn: a cancelled tombstone the relay and workers honour.
    [(tombstone, status)] = [(j, s) for j, s in job_items(settings).items() if j not in before]
    assert status == "cancelled" and tombstone not in in_kafka
    assert call(Gateway(api), get(f"/v1/jobs/{tombstone}"))[2]["status"] == "cancelled"
    # The failed request released its key: once Kafka is back the same request goes through.
    code, _, body = call(Gateway(api), post("down", {"payload": 1}, key="while-down"))
    assert code == 202 and body["job_id"] in {k for k, _ in kafka_records(settings)}


@pytest.mark.timeout(60)
def test_broker_dies_under_a_connected_producer(api: Api, settings: Settings, tmp_path: Path) -> None:
    broker = servers.start_tansu(log_path=tmp_path / "tansu.log")
    try:
        local = settings.model_copy(update={"kafka_bootstrap": broker.extra["bootstrap"]})
        from sluice.backends.kafka.producer import ensure_topics

        ensure_topics(local)
        log = KafkaJobLog(client_config(local), local.kafka_topic, delivery_timeout_ms=2000,
                          request_timeout_ms=1000, max_block_ms=1000)
        gw = Gateway(Api(Backends(log, api.store, api.queue, events=EventBus()), IdMinting(api.job_id_key)))
        code, _, first = call(gw, post("dying", {"payload": 1}))
        assert code == 202
        before = set(job_items(settings))
        broker.kill()
        started = time.monotonic()
        code, headers, _ = call(gw, post("dying", {"payload": 2}))
        assert (code, headers["retry-after"]) == (503, "1")
        assert time.monotonic() - started < 10
        # The unacknowledged job was withdrawn: a cancelled tombstone, so it can never run.
        assert [s for j, s in job_items(settings).items() if j not in before] == ["cancelled"]
        assert first["job_id"] not in before  # acknowledged: no status write, and GET still works
        assert call(Gateway(api), get(f"/v1/jobs/{first['job_id']}"))[2]["status"] == "accepted"
    finally:
        broker.stop()


def test_cancel_and_stats_over_the_real_engine_and_store(gateway: Gateway, api: Api) -> None:
    queue = f"cx{int(time.time() * 1000) % 10**9}"
    ids = [call(gateway, post(queue, {"payload": i}))[2]["job_id"] for i in range(3)]
    # Play the relay's part: push into Redis and mark queued.
    for job_id in ids:
        spec = JobSpec(job_id=job_id, queue=queue, payload=None)
        assert api.queue.enqueue(spec)
    api.store.mark_queued([(j, queue, 0) for j in ids])
    code, _, stats = call(gateway, recorded("apigw_get_queue.json", path=f"/v1/queues/{queue}"))
    assert (code, stats["ready"], stats["leased"]) == (200, 3, 0)

    # queued -> cancelled, removed from Redis
    code, _, body = call(gateway, recorded("apigw_cancel_job.json", path=f"/v1/jobs/{ids[0]}"))
    assert (code, body["status"]) == (202, "cancelled")
    # leased -> cancel requested; the worker sees it on its next heartbeat
    [leased] = [j for j in api.queue.lease(queue, 1, 30_000, "w1") if j.job_id in ids[1:]]
    token = api.store.grant(leased.job_id, queue, "w1")
    code, _, body = call(gateway, recorded("apigw_cancel_job.json", path=f"/v1/jobs/{leased.job_id}"))
    assert (code, body["status"]) == (202, "cancel_requested")
    assert api.queue.extend(queue, leased.job_id, leased.lease_token, 30_000).cancel_requested
    # finished -> 409
    remaining = next(j for j in ids[1:] if j != leased.job_id)
    [job] = api.queue.lease(queue, 1, 30_000, "w2")
    token = api.store.grant(remaining, queue, "w2")
    api.store.write_result(remaining, token, {"ok": True})
    api.queue.ack(queue, job.job_id, job.lease_token)
    code, _, body = call(gateway, recorded("apigw_cancel_job.json", path=f"/v1/jobs/{remaining}"))
    assert (code, body["code"]) == (409, "ALREADY_FINISHED")
    code, _, stats = call(gateway, recorded("apigw_get_queue.json", path=f"/v1/queues/{queue}"))
    assert (stats["ready"], stats["leased"]) == (0, 1)
    api.queue.set_config(queue, rate_per_s=50.0, burst=10, paused=True)
    _, _, stats = call(gateway, recorded("apigw_get_queue.json", path=f"/v1/queues/{queue}"))
    assert (stats["rate_per_s"], stats["burst"], stats["paused"]) == (50.0, 10, True)


def test_client_over_http_through_the_local_adapter(api: Api) -> None:
    with LocalGateway([Gateway(api), Gateway(api)]) as server:
        client = Client(server.url)
        accepted = client.enqueue("http", {"hello": "wörld"}, priority=2, idempotency_key="http-1")
        assert client.enqueue("http", {"hello": "wörld"}, priority=2, idempotency_key="http-1") == accepted
        assert client.status(accepted.job_id).status == "accepted"
        batch = client.enqueue_batch("http", [{"payload": i} for i in range(3)])
        assert len({j.job_id for j in batch.jobs}) == 3
        assert client.cancel(accepted.job_id).status == "cancelled"
        assert client.wait(accepted.job_id, timeout_s=5).status == "cancelled"
        with pytest.raises(AlreadyFinished):
            client.cancel(accepted.job_id)
        assert client.queue_stats("http").queue == "http"


def test_client_gives_up_with_backend_unavailable_when_nothing_listens() -> None:
    client = Client(f"http://127.0.0.1:{servers.free_port()}", max_attempts=2, sleep=lambda s: None)
    with pytest.raises(BackendUnavailable):
        client.enqueue("q", 1)


def test_idempotency_records_are_written_once_in_the_tables_layout(api: Api, settings: Settings) -> None:
    assert isinstance(resolve(api.idempotency), DynamoKeyStore)
    import boto3

    db = boto3.client("dynamodb", endpoint_url=settings.aws_endpoint_url, region_name=settings.aws_region)
    before = len(db.scan(TableName=settings.idempotency_table)["Items"])
    code, _, _ = call(Gateway(api), post("idem", {"payload": "wru"}, key="one-write"))
    items = db.scan(TableName=settings.idempotency_table)["Items"]
    assert code == 202 and len(items) == before + 1
    assert items and all(i["id"]["S"].startswith("sluice-gateway-v1#") for i in items)
    assert {i["status"]["S"] for i in items} == {"INPROGRESS"} and {i["v"]["N"] for i in items} == {"2"}


def test_the_job_id_secret_comes_from_secrets_manager(settings: Settings, unique: str) -> None:
    import boto3

    sm = boto3.client("secretsmanager", region_name=settings.aws_region,
                      endpoint_url=settings.aws_endpoint_url)
    arn = sm.create_secret(Name=f"sluice-job-id-{unique}",
                           SecretString=f"from-secrets-manager-{unique}")["ARN"]
    from_arn = settings.model_copy(update={"job_id_secret": None, "job_id_secret_arn": arn})
    assert build_api(from_arn).job_id_key == f"from-secrets-manager-{unique}".encode()
    missing = from_arn.model_copy(update={"job_id_secret_arn": arn + "-gone"})
    with pytest.raises(BackendUnavailable, match="job id secret"):
        wiring.job_id_key(missing)


def test_a_rotated_job_id_secret_gives_the_current_and_the_previous_key(settings: Settings,
                                                                       unique: str) -> None:
    import boto3

    sm = boto3.client("secretsmanager", region_name=settings.aws_region,
                      endpoint_url=settings.aws_endpoint_url)
    arn = sm.create_secret(Name=f"sluice-job-id-rot-{unique}", SecretString=f"first-key-{unique}")["ARN"]
    from_arn = settings.model_copy(update={"job_id_secret": None, "job_id_secret_arn": arn})
    assert wiring.refresh_job_id_keys(from_arn) == (f"first-key-{unique}".encode(), ())  # never rotated
    sm.put_secret_value(SecretId=arn, SecretString=f"second-key-{unique}")  # AWSCURRENT moves on
    current, previous = wiring.refresh_job_id_keys(from_arn)
    assert (current, previous) == (f"second-key-{unique}".encode(), (f"first-key-{unique}".encode(),))
    api = build_api(from_arn)
    assert (api.job_id_key, api.previous_job_id_keys) == (current, previous)
