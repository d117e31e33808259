"""The composition root's AWS clients (cold start, issue 14)."""

from __future__ import annotations

import pytest

from sluice import wiring
from sluice.config import Settings


def test_boto_clients_share_the_process_session_and_its_models(monkeypatch: pytest.MonkeyPatch) -> None:
    # A fresh botocore session per client loads the endpoint data and each service model again:
    # the relay builds two DynamoDB clients (store, recovery) and would pay for it twice.
    import boto3

    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    s = Settings(aws_region="us-east-1")
    first, second = wiring.boto_client("dynamodb", s), wiring.boto_client("dynamodb", s)
    assert boto3.DEFAULT_SESSION is not None
    assert first._loader is second._loader
    assert boto3.client("dynamodb", region_name="us-east-1")._loader is first._loader
