"""Secrets Manager rotation for Sluice's two secrets: the Redis AUTH token and the job id key.

Secrets Manager calls ``handler`` four times per rotation (``createSecret``, ``setSecret``,
``testSecret``, ``finishSecret``) with the secret's ARN and the new version's token. Both
secrets are a bare SecretString of 64 letters and digits (AUTH tokens allow only a few
punctuation characters), generated here with ``secrets`` so the role needs no
``GetRandomPassword`` (an action without resources).

- **Job id key**: nothing to set. The gateway and the relay verify with AWSCURRENT and
  AWSPREVIOUS (``sluice.core.ids`` key ids), so moving the stage is the whole rotation.
- **Redis AUTH token**: ``setSecret`` adds the new token with ElastiCache's ``ROTATE``
  strategy, which keeps the old one valid too, and waits for the group to be available again
  before ``finishSecret`` moves AWSCURRENT. Connections open with the old token stay
  authenticated; a new connection that meets WRONGPASS re-reads the secret and retries once
  (``sluice.backends.redis.auth``). A group already holding two tokens is first ``SET`` to the current
  one, so at most two tokens are ever live. ``testSecret`` cannot AUTH from here (this function
  runs outside the VPC, where the ElastiCache and Secrets Manager APIs are; Redis is not), so it
  checks that the group reports the token change complete.

This function cannot run in the local stack (moto has no ElastiCache modify/rotation); its
wiring is checked by tests/infra/test_template.py, and docs/deploy.md says how to watch a real
rotation. Environment: ``REDIS_SECRET_ARN`` and ``REPLICATION_GROUP_ID`` name the Redis pair;
any other secret is treated as a job id key.
"""

from __future__ import annotations

import os
import secrets
import string
import time
from typing import Any

ALPHABET = string.ascii_letters + string.digits
LENGTH = 64
WAIT_S = 280  # ElastiCache applies a token change in a few minutes; three waits fit in 900 s


def handler(event: dict[str, Any], context: Any) -> None:
    import boto3

    arn, token, step = event["SecretId"], event["ClientRequestToken"], event["Step"]
    sm = boto3.client("secretsmanager")
    versions = sm.describe_secret(SecretId=arn).get("VersionIdsToStages", {})
    if token not in versions:
        raise ValueError(f"version {token} is not a version of {arn}")
    if "AWSCURRENT" in versions[token]:
        return  # already rotated: Secrets Manager retries steps
    is_redis = arn == os.environ.get("REDIS_SECRET_ARN")
    if step == "createSecret":
        _create(sm, arn, token)
    elif step == "setSecret" and is_redis:
        _set_redis(sm, arn, token)
    elif step == "testSecret" and is_redis:
        _wait_available(boto3.client("elasticache"))
    elif step == "finishSecret":
        current = next(v for v, stages in versions.items() if "AWSCURRENT" in stages)
        sm.update_secret_version_stage(SecretId=arn, VersionStage="AWSCURRENT", MoveToVersionId=token,
                                       RemoveFromVersionId=current)


def _create(sm: Any, arn: str, token: str) -> None:
    try:
        sm.get_secret_value(SecretId=arn, VersionId=token, VersionStage="AWSPENDING")
    except sm.exceptions.ResourceNotFoundException:
        value = "".join(secrets.choice(ALPHABET) for _ in range(LENGTH))
        sm.put_secret_value(SecretId=arn, ClientRequestToken=token, SecretString=value,
                            VersionStages=["AWSPENDING"])


def _set_redis(sm: Any, arn: str, token: str) -> None:
    import boto3

    ec = boto3.client("elasticache")
    group = os.environ["REPLICATION_GROUP_ID"]
    current = sm.get_secret_value(SecretId=arn, VersionStage="AWSCURRENT")["SecretString"]
    pending = sm.get_secret_value(SecretId=arn, VersionId=token, VersionStage="AWSPENDING")["SecretString"]
    _wait_available(ec)
    # Drop any token older than the current one, then add the pending one beside it.
    ec.modify_replication_group(ReplicationGroupId=group, AuthToken=current, AuthTokenUpdateStrategy="SET",
                                ApplyImmediately=True)
    _wait_available(ec)
    ec.modify_replication_group(ReplicationGroupId=group, AuthToken=pending, AuthTokenUpdateStrategy="ROTATE",
                                ApplyImmediately=True)
    _wait_available(ec)


def _wait_available(ec: Any) -> None:
    group = os.environ["REPLICATION_GROUP_ID"]
    deadline = time.monotonic() + WAIT_S
    while True:
        (found,) = ec.describe_replication_groups(ReplicationGroupId=group)["ReplicationGroups"]
        pending = found.get("PendingModifiedValues", {}).get("AuthTokenStatus")
        if found["Status"] == "available" and not pending:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"replication group {group} still {found['Status']} after {WAIT_S} s")
        time.sleep(10)
