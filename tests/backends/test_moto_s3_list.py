"""The local moto server answers S3 ListObjectsV2 without moto's serializer (``motos3list``).

Tansu on S3 lists every object of a partition at each fetch, one object per produced batch. moto's
serializer took about 0.4 ms a listed key: once a partition held a thousand or two one-job batches,
a list outlasted the relay's ``fetch_max_wait_ms`` (100), Tansu answered every fetch empty, and the
relay read nothing (a 10,000-job chaos run pushed next to nothing after its first three minutes).
"""

from __future__ import annotations

import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest

from sluice_dev.local import servers

pytestmark = pytest.mark.timeout(120)

NAMES = ["p/a b", "p/x&y<z>", "p/é", "p/0001", "p/0002", "p/0003", "q/other"]


def _s3(url: str) -> Any:
    return boto3.client("s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id="x",
                        aws_secret_access_key="x")


@pytest.fixture
def bucket(moto_url: str) -> str:
    name = f"list-{uuid.uuid4().hex[:8]}"
    s3 = _s3(moto_url)
    s3.create_bucket(Bucket=name)
    for i, key in enumerate(NAMES):
        s3.put_object(Bucket=name, Key=key, Body=b"x" * (i + 1))
    return name


def test_a_listing_gives_every_key_with_its_size_and_etag_page_by_page(moto_url: str, bucket: str) -> None:
    s3 = _s3(moto_url)
    keys, sizes, pages = [], {}, 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="p/",
                                                             PaginationConfig={"PageSize": 2}):
        pages += 1
        for item in page.get("Contents", []):
            keys.append(item["Key"])
            sizes[item["Key"]] = (item["Size"], item["ETag"])
    assert keys == sorted(k for k in NAMES if k.startswith("p/")) and pages == 3
    for key in keys:
        head = s3.head_object(Bucket=bucket, Key=key)
        assert sizes[key] == (head["ContentLength"], head["ETag"])
    after = s3.list_objects_v2(Bucket=bucket, Prefix="p/", StartAfter="p/0002")
    assert [i["Key"] for i in after["Contents"]] == ["p/0003", "p/a b", "p/x&y<z>", "p/é"]
    assert after["StartAfter"] == "p/0002" and after["KeyCount"] == 4 and not after["IsTruncated"]


def test_a_plain_request_as_tansu_sends_it_gets_names_unencoded(moto_url: str, bucket: str) -> None:
    with urllib.request.urlopen(f"{moto_url}/{bucket}?list-type=2&prefix=p/x", timeout=10) as answer:
        body = answer.read().decode()
    assert "<Key>p/x&amp;y&lt;z&gt;</Key>" in body and "<KeyCount>1</KeyCount>" in body
    assert "EncodingType" not in body


def test_a_listing_with_a_delimiter_is_still_moto_s_own(moto_url: str, bucket: str) -> None:
    got = _s3(moto_url).list_objects_v2(Bucket=bucket, Delimiter="/")
    assert sorted(p["Prefix"] for p in got["CommonPrefixes"]) == ["p/", "q/"]


def test_the_relay_s_fetches_read_a_partition_of_many_one_record_batches_after_a_broker_restart(
        moto_server: servers.Server, tmp_path: Path) -> None:
    """1,200 batches of one record (as the gateway produces them), the broker restarted (its reads
    then come from S3), and a consumer with the relay's ``fetch_max_wait_ms`` reads them all. Before,
    each fetch's list outlasted the wait and this consumer read none in a minute."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    from sluice.core.config import Settings

    url, bucket, n = moto_server.extra["url"], f"tansu-{uuid.uuid4().hex[:8]}", 1_200
    servers.ensure_bucket(url, bucket)
    broker = servers.start_tansu(s3_endpoint=url, bucket=bucket, log_path=tmp_path / "tansu.log")
    try:
        bootstrap = broker.extra["bootstrap"]
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        admin.create_topics([NewTopic("jobs", 1, 1)])
        admin.close()
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0, batch_size=1)
        for _ in range(n):
            producer.send("jobs", b"x" * 300, partition=0)
        producer.flush()
        producer.close()
        broker.stop()
        broker = servers.start_tansu(broker.port, s3_endpoint=url, bucket=bucket,
                                     log_path=tmp_path / "tansu-again.log")
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                 fetch_max_wait_ms=Settings().relay_fetch_max_wait_ms)
        part = TopicPartition("jobs", 0)
        consumer.assign([part])
        consumer.seek(part, 0)
        offsets: set[int] = set()
        deadline = time.monotonic() + 60
        while len(offsets) < n and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                offsets.update(r.offset for r in records)
        consumer.close()
        assert len(offsets) == n, f"{len(offsets)} of {n} records read in a minute"
    finally:
        broker.stop()
