"""RedisQueue.from_settings: plain URL, and the ElastiCache AUTH token from Secrets Manager."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest
import redis

from sluice.backends.redis.connection import redis_auth_token
from sluice.backends.redis.engine import RedisQueue
from sluice.core.config import Settings
from sluice.core.errors import BackendUnavailable
from sluice_dev.local import servers
from tests.backends.test_engine_support import spec

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


def test_a_rotated_auth_token_is_read_again_after_wrongpass(moto_url: str, unique: str,
                                                            tmp_path: Path) -> None:
    """Issue 19, item 8: the token changes in Secrets Manager and Redis; the queue keeps working."""
    server = servers.start_redis(workdir=tmp_path / "redis")
    admin = redis.Redis.from_url(server.extra["url"], decode_responses=True)
    rq = None
    try:
        settings = Settings(aws_endpoint_url=moto_url, redis_url=server.extra["url"])
        sm = boto3.client("secretsmanager", region_name=settings.aws_region, endpoint_url=moto_url)
        arn = sm.create_secret(Name=f"redis-rot-{unique}", SecretString="first-token")["ARN"]
        admin.config_set("requirepass", "first-token")
        admin = redis.Redis.from_url(server.extra["url"], password="first-token", decode_responses=True)
        rq = RedisQueue.from_settings(settings.model_copy(update={"redis_auth_secret_arn": arn}))
        assert rq.enqueue(spec("a")) is True
        # Rotation: Secrets Manager first, then Redis; every open connection is dropped.
        sm.put_secret_value(SecretId=arn, SecretString="second-token")
        admin.config_set("requirepass", "second-token")
        admin = redis.Redis.from_url(server.extra["url"], password="second-token", decode_responses=True)
        admin.client_kill_filter(_type="normal", skipme=True)
        assert [j.job_id for j in rq.lease("q", 1, 1_000)] == ["a"]  # WRONGPASS, re-read, retried
        # A token nobody can read again stays refused, as BackendUnavailable.
        admin.config_set("requirepass", "third-token-not-in-the-secret")
        admin = redis.Redis.from_url(server.extra["url"], password="third-token-not-in-the-secret")
        admin.client_kill_filter(_type="normal", skipme=True)
        with pytest.raises(BackendUnavailable, match="AUTH"):
            rq.stats("q")
    finally:
        if rq is not None:
            rq.close()
        server.stop()
