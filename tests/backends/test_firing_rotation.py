"""One schedule firing, delivered twice across a key rotation, is one job (issue 29, item 4), on
Tansu, the moto server (the jobs and schedules tables, Secrets Manager) and redis-server.

EventBridge Scheduler delivers at least once, and a retry may reach a firings container that read
the job id key after it rotated. The firing's id comes from the schedule and its scheduled time
alone (``schedules.firing_id``, keyless, issue 27), so both deliveries append the same id, each
record sealed with the key its container holds; the relay, holding both keys, pushes one job.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.backends.relay_proc import ready_ids
from tests.backends.test_relay import LambdaContext, relay_app, relay_lambda_env, topic  # noqa: F401

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


def test_a_firing_redelivered_after_a_key_rotation_is_one_job(
        tansu: Any, topic: str, redis_url: str, redis_client: Any, moto_url: str, unique: str,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch, event_json: Any) -> None:
    import boto3

    from sluice.backends.dynamodb import tables
    from sluice.backends.dynamodb.schedules import DynamoScheduleStore
    from sluice.core import schedules, seal
    from sluice.core.config import Settings
    from sluice.core.models import JobSpec
    from sluice.entry import gateway_scheduler
    from sluice.entry import relay as relay_entry
    from sluice.entry import root as wiring
    from sluice.entry.gateway import build_api
    from sluice.gateway.schedules import Schedules
    from tests.backends.test_gateway_stack import kafka_records

    bs = tansu.extra["bootstrap"]
    relay_lambda_env(monkeypatch, bs, topic, redis_url, moto_url, unique, "unused")
    sm = boto3.client("secretsmanager", region_name="us-east-1", endpoint_url=moto_url)
    first, second = f"job-id-key-before-{unique}", f"job-id-key-after-{unique}"
    arn = sm.create_secret(Name=f"sluice-job-id-{unique}", SecretString=first)["ARN"]
    monkeypatch.delenv("SLUICE_JOB_ID_SECRET")
    monkeypatch.setenv("SLUICE_JOB_ID_SECRET_ARN", arn)
    monkeypatch.setenv("SLUICE_SCHEDULES_TABLE", f"schedules-{unique}")
    wiring.reset()
    s = Settings.from_env()
    tables.create_schedules_table(wiring.boto_client("dynamodb", s), s.schedules_table)
    minute = int(time.time() * 1000) // 60_000 * 60_000
    store = DynamoScheduleStore(wiring.boto_client("dynamodb", s), s.schedules_table)
    store.create(schedules.Schedule.create("tick", "rate(1 minute)", "q", {"n": 1}, minute - 600_000))
    event = schedules.firing_event("q", "tick", schedules.iso(minute))

    def deliver() -> dict[str, Any]:  # a firings container: its own Api, the keys as it reads them now
        api = build_api(Settings.from_env())
        return gateway_scheduler.handle(lambda: Schedules(api, store, None), dict(event))

    try:
        before = deliver()
        sm.put_secret_value(SecretId=arn, SecretString=second)  # the rotation: AWSPREVIOUS is the first
        wiring.reset()
        after = deliver()  # Scheduler's retry reaches a container started after the rotation
        assert before["statusCode"] == after["statusCode"] == 202
        assert before["job_id"] == after["job_id"] == schedules.firing_id("tick", "q", minute)
        records = [value for key, value in kafka_records(s) if key == before["job_id"]]
        assert len(records) == 2
        specs = [JobSpec.model_validate(value) for value in records]  # each sealed by its container's key
        assert seal.verify_spec(specs[0], [first.encode()])
        assert not seal.verify_spec(specs[0], [second.encode()])
        assert seal.verify_spec(specs[1], [second.encode()])
        result = relay_app().handler(event_json("scheduled_relay.json"), LambdaContext(budget_ms=12_000))
        job = wiring.store(Settings.from_env()).get_job(before["job_id"])
    finally:
        relay_entry._source(Settings.from_env()).close()
        relay_entry._source.cache_clear()
        wiring.reset()
    assert result["dead_lettered"] == 0, result
    assert ready_ids(redis_client) == [before["job_id"]]  # one job
    assert job.status == "queued" and job.queue == "q"
