"""The local moto server's timestamps converted once per value (``sluice_dev.local.mototime``)."""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws
from moto.core.serialize import TimestampSerializer

from sluice_dev.local import mototime

pytestmark = pytest.mark.timeout(60)
CURRENT = TimestampSerializer._convert_timestamp_to_str  # installed by conftest.py
STOCK = getattr(CURRENT, "__wrapped__", CURRENT)


@pytest.fixture
def installed() -> Iterator[None]:
    TimestampSerializer._convert_timestamp_to_str = STOCK  # type: ignore[method-assign]
    mototime.install()
    try:
        yield
    finally:
        TimestampSerializer._convert_timestamp_to_str = CURRENT  # type: ignore[method-assign]


@pytest.mark.parametrize("value", ["2026-12-06T18:00:01.250Z", "2026-12-06T18:00:01Z", 1_765_000_000,
                                   datetime.datetime(2026, 12, 6, 18, 0, 1, tzinfo=datetime.UTC)])
@pytest.mark.parametrize("fmt", ["iso8601", "rfc822", "unixtimestamp", "iso8601_zeroed"])
def test_each_value_converts_as_motos_own_does_every_time(installed: None, value: object, fmt: str) -> None:
    mototime.install()  # idempotent: not wrapped twice
    serializer = TimestampSerializer(fmt)
    stock = STOCK(serializer, value, fmt)  # type: ignore[arg-type]
    assert serializer._convert_timestamp_to_str(value, fmt) == stock  # type: ignore[arg-type]
    assert serializer._convert_timestamp_to_str(value, fmt) == stock  # type: ignore[arg-type]  # cached


def test_an_s3_listing_shows_each_objects_own_time(installed: None) -> None:
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="sluice-times")
        s3.put_object(Bucket="sluice-times", Key="k1", Body=b"1")
        first = s3.list_objects_v2(Bucket="sluice-times")["Contents"][0]["LastModified"]
        time.sleep(1.1)  # S3's times are to the second
        s3.put_object(Bucket="sluice-times", Key="k2", Body=b"2")
        listed = {o["Key"]: o["LastModified"] for o in s3.list_objects_v2(Bucket="sluice-times")["Contents"]}
    assert listed["k1"] == first and listed["k2"] > first
