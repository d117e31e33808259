"""The local moto server ends at once on SIGTERM: every stack's stop waits for two of them."""

from __future__ import annotations

import time
from pathlib import Path

import boto3
import pytest

from sluice_dev.local import servers

pytestmark = pytest.mark.timeout(60)


def test_a_sigterm_ends_the_moto_server_at_once_with_status_0(tmp_path: Path) -> None:
    """It tore its interpreter down first (moto's thousands of modules): 0.45-0.7 s a stop on a
    loaded machine, now a few ms. The best of three, so one slow wake-up under load fails nothing."""
    took = []
    for i in range(3):
        server = servers.start_moto(log_path=tmp_path / f"moto{i}.log")
        client = boto3.client("s3", endpoint_url=server.extra["url"], region_name="us-east-1",
                              aws_access_key_id="x", aws_secret_access_key="x")
        client.create_bucket(Bucket=f"bucket-{i}")  # a server that has served (its backends loaded)
        started = time.monotonic()
        server.stop()
        took.append(time.monotonic() - started)
        assert server.proc.returncode == 0
    assert min(took) < 0.2, took
