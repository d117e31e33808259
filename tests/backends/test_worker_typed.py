"""A typed queue through the worker Lambda on a real redis-server and the moto server (issue 15).

The handlers module is ``sluice_dev.examples`` (its ``thumbnails`` queue, ``model=Thumbnail``), loaded
by ``functions/worker/app.py`` as in a deployment. The jobs go straight into the engine, as jobs
accepted before a schema was published at the gateway would be: the worker is the last line.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from sluice.core.models import MAX_ERROR_CHARS, JobSpec, JobState
from sluice_dev.examples import expected_result
from sluice_dev.fakes import FakeLambdaContext
from sluice_dev.local.servers import Server
from tests.backends.worker_lambda_support import lambda_stack, load_function
from tests.backends.worker_procs import Stack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

QUEUE = "thumbnails"


@pytest.fixture
def stack(redis_url: str, moto_server: Server, unique: str,
          monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    with lambda_stack(redis_url, moto_server.extra["url"], unique, monkeypatch,
                      handlers_module="sluice_dev.examples", SLUICE_DEFAULT_LEASE_SECONDS="5",
                      SLUICE_FUNCTION_TIMEOUT_S="300") as s:  # as the template passes its default Timeout
        yield s


def dynamo_item(stack: Stack, job_id: str) -> dict[str, Any]:
    """The job's item as DynamoDB holds it, read without the store adapter."""
    client = boto3.client("dynamodb", endpoint_url=stack.cfg["moto_url"], region_name="us-east-1")
    item: dict[str, Any] = client.get_item(TableName=stack.cfg["table"], Key={"job_id": {"S": job_id}},
                                           ConsistentRead=True)["Item"]
    return item


def dispatch(budget_ms: int = 300_000) -> dict[str, Any]:
    out: dict[str, Any] = load_function().handler({"queues": [QUEUE], "batch": 10, "source": "relay"},
                                                  FakeLambdaContext(budget_ms))
    return out


def test_a_bad_payload_ends_failed_after_exactly_one_attempt_with_its_reason_in_dynamodb(
        stack: Stack, unique: str) -> None:
    bad, good, huge = f"bad-{unique}", f"good-{unique}", f"huge-{unique}"
    for job_id, payload in ((bad, {"width": 0, "format": "gif"}),
                            (good, {"url": "s3://photos/cat.jpg", "width": 64}),
                            (huge, {"url": "s3://p/a.jpg", "width": 1, **{f"x{i}": i for i in range(400)}})):
        assert stack.queue.enqueue(JobSpec(job_id=job_id, queue=QUEUE, payload=payload, max_attempts=5))

    out = dispatch()
    assert out["leased"] == 3 and out["failed"] == 2 and out["succeeded"] == 1 and out["retried"] == 0, out

    rec = stack.store.get_job(bad)
    assert rec.status == JobState.FAILED and rec.attempts == 1
    item = dynamo_item(stack, bad)
    assert item["status"]["S"] == "failed" and item["attempts"]["N"] == "1"
    assert item["last_error"]["S"] == (
        "payload does not match Thumbnail (3 validation errors): url: Field required; "
        "width: Input should be greater than 0; format: Input should be 'png' or 'webp'")
    # 400 unknown fields: one error each, cut to the one bound every stored error has
    assert len(dynamo_item(stack, huge)["last_error"]["S"]) == MAX_ERROR_CHARS
    good_result = stack.store.get_job(good).result
    assert good_result == expected_result(QUEUE, {"url": "s3://photos/cat.jpg", "width": 64})
    assert good_result["format"] == "png"  # the model's default, filled in for the handler

    # never retried: permanent in Redis, and the next dispatch finds nothing to run
    dead = {d.job_id for d in stack.queue.dead_letters(QUEUE)}
    assert {bad, huge} <= dead
    stats = stack.queue.stats(QUEUE)
    assert stats.ready == stats.delayed == stats.leased == 0
    assert dispatch()["leased"] == 0
    assert stack.store.get_job(bad).attempts == 1
