"""gc-pause on a running stack's servers (issue 32's closing review: the console's scenario page inside
``sluice dev``): a redis-server and a moto server that already hold a real queue, a real jobs table
and a real bucket stand in for the stack's. The run uses scratch names of its own, starts no server,
leaves every key, table and bucket it did not make as it found them, and removes its own."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
import redis

from sluice.backends.redis.engine import RedisQueue
from sluice.core.models import JobSpec
from sluice_dev.chaos import scenarios
from sluice_dev.local.servers import DUMMY_AWS_ENV

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def aws(moto_url: str, service: str) -> Any:
    return boto3.client(service, endpoint_url=moto_url, region_name="us-east-1",
                        aws_access_key_id=DUMMY_AWS_ENV.get("AWS_ACCESS_KEY_ID", "x"),
                        aws_secret_access_key=DUMMY_AWS_ENV.get("AWS_SECRET_ACCESS_KEY", "x"))


def everything(client: redis.Redis, moto_url: str) -> tuple[dict[str, Any], list[str], list[str]]:
    """The Redis keys with their values, the tables and the buckets."""
    keys: dict[str, Any] = {}
    for key in client.scan_iter("*"):
        kind = client.type(key)
        keys[key] = (client.hgetall(key) if kind == "hash" else client.zrange(key, 0, -1, withscores=True)
                     if kind == "zset" else client.smembers(key) if kind == "set" else client.get(key)
                     if kind == "string" else client.lrange(key, 0, -1))
    tables = aws(moto_url, "dynamodb").list_tables()["TableNames"]
    buckets = [b["Name"] for b in aws(moto_url, "s3").list_buckets()["Buckets"]]
    return keys, sorted(tables), sorted(buckets)


def test_a_run_on_a_borrowed_stack_touches_only_its_scratch_names_and_removes_them(
        redis_url: str, redis_client: redis.Redis, moto_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # What the "stack" holds already: a queue named like the scenario's own, with a job in it (and in
    # the registry), a jobs table and a results bucket.
    real = RedisQueue.from_url(redis_url)
    real.enqueue(JobSpec(job_id="real-1", queue=scenarios.QUEUE, payload={"keep": True}))
    redis_client.sadd("sluice:queues", scenarios.QUEUE)
    aws(moto_url, "dynamodb").create_table(
        TableName="sluice-jobs", BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "job_id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "job_id", "KeyType": "HASH"}])
    aws(moto_url, "s3").create_bucket(Bucket="sluice-results")
    before = everything(redis_client, moto_url)

    started: list[Any] = []
    monkeypatch.setattr("sluice_dev.local.servers.start_redis", lambda *a, **k: started.append(a))
    monkeypatch.setattr("sluice_dev.local.motoserver.start", lambda *a, **k: started.append(a))
    seen: dict[str, Any] = {}
    real_servers = scenarios._servers

    def watching(on: scenarios.Borrowed | None = None) -> Any:
        cm = real_servers(on)
        env = cm.__enter__()
        seen.update(queue=env.queue_name, table=env.table, bucket=env.bucket,
                    tables=everything(redis_client, moto_url)[1])

        class Wrapped:
            def __enter__(self) -> Any:
                return env

            def __exit__(self, *exc: Any) -> Any:
                return cm.__exit__(*exc)

        return Wrapped()

    monkeypatch.setattr(scenarios, "_servers", watching)
    result = scenarios.gc_pause(scenarios.Params(freeze_for_s=12, fencing=True, time_scale=0.3),
                                on=scenarios.Borrowed(redis_url, moto_url)).as_dict()

    assert started == []  # no server of its own
    assert seen["queue"].startswith(scenarios.SCRATCH) and seen["queue"] != scenarios.QUEUE
    assert seen["table"].startswith(scenarios.SCRATCH) and seen["bucket"].startswith(scenarios.SCRATCH)
    assert seen["table"] in seen["tables"]  # made on the borrowed moto server ...
    assert result["final_writer"] == "B" and result["stale_write_accepted"] is False  # the story, for real
    kinds = [s["kind"] for s in result["steps"]]
    assert kinds.count("grant") == 2 and "write" in kinds
    assert everything(redis_client, moto_url) == before  # ... and everything of its own removed after
