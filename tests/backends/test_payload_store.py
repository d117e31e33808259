"""The payload store's S3 adapter on the moto server, over real HTTP (issue 28, item 4).

``S3PayloadStore`` puts and gets by the job's own key and translates botocore's errors; the
bucket the local stack makes is encrypted and expires payloads past the job life bound; and a
large payload goes from the gateway's pipeline through S3 to a handler intact.
"""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.config import Config

from sluice.backends.aws.payloads import S3PayloadStore, create_payloads_bucket, expiry_days
from sluice.core import payloads
from sluice.core.bus import EventBus
from sluice.core.errors import BackendUnavailable, PayloadUnavailable
from sluice.core.limits import DAY_MS, JOB_LIFE_MS
from sluice.core.wire import EnqueueRequest
from sluice.gateway.api import Api, Backends, IdMinting, Intake
from sluice_dev.fakes import FakeLog, FakeQueue, FakeStore, kit

pytestmark = pytest.mark.timeout(60)
KEY = b"backends-test-job-id-key-0123456789"


def s3(url: str, **config: Any) -> Any:
    return boto3.client("s3", region_name="us-east-1", endpoint_url=url, config=Config(**config))


@pytest.fixture
def bucket(moto_url: str, unique: str) -> str:
    name = f"payloads-{unique}"
    create_payloads_bucket(s3(moto_url), name)
    create_payloads_bucket(s3(moto_url), name)  # idempotent
    return name


def test_the_bucket_is_encrypted_and_expires_payloads_past_the_job_life_bound(moto_url: str,
                                                                               bucket: str) -> None:
    client = s3(moto_url)
    (rule,) = client.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    assert rule["Filter"]["Prefix"] == "payloads/" and rule["Status"] == "Enabled"
    assert rule["Expiration"]["Days"] * DAY_MS > JOB_LIFE_MS and expiry_days(14) == 15
    sse = client.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"][0]
    assert sse["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"


def test_put_get_and_a_missing_object(moto_url: str, bucket: str) -> None:
    store = S3PayloadStore(s3(moto_url), bucket)
    key = payloads.payload_key("q", "j1")
    store.put(key, b'{"a":1}')
    assert store.get(key) == b'{"a":1}'
    with pytest.raises(PayloadUnavailable, match="missing"):
        store.get(payloads.payload_key("q", "nope"))


def test_an_unreachable_s3_is_backend_unavailable() -> None:
    dead = s3("http://127.0.0.1:9", connect_timeout=0.2, read_timeout=0.2, retries={"max_attempts": 0})
    store = S3PayloadStore(dead, "b")
    with pytest.raises(BackendUnavailable):
        store.put("payloads/q/j", b"1")
    with pytest.raises(BackendUnavailable):
        store.get("payloads/q/j")


def test_a_large_payload_through_real_s3_reaches_its_handler_intact(moto_url: str, bucket: str) -> None:
    store, log = S3PayloadStore(s3(moto_url), bucket), FakeLog()
    api = Api(Backends(log, FakeStore(), FakeQueue(), events=EventBus()), IdMinting(KEY),  # type: ignore[arg-type]
              intake=Intake(payloads=store, inline_max_bytes=16 * 1024))
    big = {"rows": [{"i": i, "text": "é" * 40} for i in range(2000)]}  # about 200 KB, not ASCII
    job_id = api.enqueue("reports", EnqueueRequest(payload=big)).body.job_id  # type: ignore[union-attr]
    (record,) = log.records
    assert record.payload["key"] == f"payloads/reports/{job_id}"
    head = s3(moto_url).head_object(Bucket=bucket, Key=record.payload["key"])
    assert head["ContentLength"] == record.payload["bytes"] > 200_000

    k = kit()
    seen: list[Any] = []
    k.app.register("reports", lambda job, ctx: seen.append(job.payload))
    k.queue.enqueue(record)
    k.worker().bind(payloads=store).drain(["reports"], 1)
    assert seen == [big]
