"""RedisQueue.from_settings: plain URL, and the ElastiCache AUTH token from Secrets Manager."""

from __future__ import annotations

import json

import boto3
import pytest

from sluice.config import Settings
from sluice.errors import BackendUnavailable
from sluice.redis.engine import RedisQueue, redis_auth_token
from tests.integration.test_engine_support import spec

pytestmark = pytest.mark.integration


def test_from_settings_uses_the_redis_url(redis_url: str) -> None:
    rq = RedisQueue.from_settings(Settings(redis_url=redis_url))
    try:
        assert rq.enqueue(spec("a")) is True
        assert [j.job_id for j in rq.lease("q", 1, 1_000)] == ["a"]
    finally:
        rq.close()


@pytest.mark.parametrize(("stored", "expected"), [('{"password": "pw-1"}', "pw-1"), ("pw-2", "pw-2"),
                                                  ('{"token": "pw-3"}', "pw-3")])
def test_auth_token_comes_from_secrets_manager(moto_url: str, unique: str, stored: str,
                                               expected: str) -> None:
    settings = Settings(aws_endpoint_url=moto_url)
    sm = boto3.client("secretsmanager", region_name=settings.aws_region, endpoint_url=moto_url)
    arn = sm.create_secret(Name=f"redis-auth-{unique}", SecretString=stored)["ARN"]
    assert redis_auth_token(arn, settings) == expected


def test_missing_or_empty_secret_is_backend_unavailable(moto_url: str, unique: str) -> None:
    settings = Settings(aws_endpoint_url=moto_url)
    sm = boto3.client("secretsmanager", region_name=settings.aws_region, endpoint_url=moto_url)
    empty = sm.create_secret(Name=f"empty-{unique}", SecretString=json.dumps({"user": "x"}))["ARN"]
    with pytest.raises(BackendUnavailable):
        redis_auth_token(empty, settings)
    with pytest.raises(BackendUnavailable):
        redis_auth_token(f"arn:aws:secretsmanager:us-east-1:123456789012:secret:nope-{unique}", settings)
