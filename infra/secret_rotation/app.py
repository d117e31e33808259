"""Secrets Manager rotation for Sluice's secrets: the Redis users' passwords and the job id key.

Secrets Manager calls ``handler`` four times per rotation (``createSecret``, ``setSecret``,
``testSecret``, ``finishSecret``) with the secret's ARN and the new version's token. New
values are 64 letters and digits (ElastiCache passwords allow only a few punctuation
characters), generated here with ``secrets`` so the role needs no ``GetRandomPassword`` (an
action without resources).

- **Job id key** (a bare SecretString): nothing to set. The gateway and the relay verify with
  AWSCURRENT and AWSPREVIOUS (``sluice.core.ids`` key ids), so moving the stage is the whole rotation.
  A rotation drops AWSPREVIOUS, so ``createSecret`` refuses one while the current key is younger
  than a job's life (``KEY_MIN_AGE_DAYS``): ids minted under the previous key may still be in flight,
  and the relay would dead-letter their records as unminted (a second ``rotate-secret`` by hand; a
  chaos run that rotated 8 times in 10 minutes lost most of its jobs that way). A leaked key is
  replaced at once with ``put-secret-value``, knowing that cost. The new key's key id (one
  character of 32, derived from the key) is drawn until it is neither the current nor the previous
  key's (``fresh_key``): a shared key id made ids of two keys name one key id.
- **A Redis user's password** (ElastiCache RBAC, one user per function and per team;
  ``{"username", "user_id", "password"}``, a ``user_id`` under ``REDIS_USER_ID_PREFIX``):
  ``setSecret`` gives the user two passwords, the current one and the pending one
  (ElastiCache users hold up to two), and waits for the user to be active again before
  ``finishSecret`` moves AWSCURRENT. The next rotation replaces the older of the two, so at
  most two are ever live. Connections open with the old password stay authenticated; a new
  connection that meets WRONGPASS re-reads the secret and retries once
  (``sluice.backends.redis.auth``). ``testSecret`` cannot AUTH from here (this function runs
  outside the VPC, where the ElastiCache and Secrets Manager APIs are; Redis is not), so it
  checks that the user reports the change complete.

This function cannot run in the local stack (moto has no ElastiCache users); its wiring is
checked by tests/infra/test_template_security.py, and docs/deploy.md says how to watch a real
rotation.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import string
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

ALPHABET = string.ascii_letters + string.digits
LENGTH = 64
WAIT_S = 280  # ElastiCache applies a user change in a few minutes; three waits fit in 900 s
KEY_MIN_AGE_DAYS = 14  # sluice.core.limits.JOB_LIFE_MS in days (no layer here: a test checks they agree)
CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # sluice.core.ids's key id alphabet (a test checks)
MAX_KEY_DRAWS = 64  # sluice.core.ids.MAX_KEY_DRAWS


def handler(event: dict[str, Any], context: Any) -> None:
    import boto3

    arn, token, step = event["SecretId"], event["ClientRequestToken"], event["Step"]
    sm = boto3.client("secretsmanager")
    versions = sm.describe_secret(SecretId=arn).get("VersionIdsToStages", {})
    if token not in versions:
        raise ValueError(f"version {token} is not a version of {arn}")
    if "AWSCURRENT" in versions[token]:
        return  # already rotated: Secrets Manager retries steps
    current = sm.get_secret_value(SecretId=arn, VersionStage="AWSCURRENT")["SecretString"]
    user = redis_user(current)
    if step == "createSecret":
        if user is None:
            _check_key_age(sm, arn)
        _create(sm, arn, token, current)
    elif step == "setSecret" and user is not None:
        _set_redis_user(sm, arn, token, user, current)
    elif step == "testSecret" and user is not None:
        _wait_active(boto3.client("elasticache"), user)
    elif step == "finishSecret":
        current_version = next(v for v, stages in versions.items() if "AWSCURRENT" in stages)
        sm.update_secret_version_stage(SecretId=arn, VersionStage="AWSCURRENT", MoveToVersionId=token,
                                       RemoveFromVersionId=current_version)


def redis_user(secret: str) -> str | None:
    """The ElastiCache user id a secret belongs to (one of this stack's users, or a team's); None
    for a bare job id key. ValueError for a user of another stack: never rotated into a bare key."""
    if not secret.startswith("{"):
        return None
    user_id = json.loads(secret).get("user_id")
    prefix = os.environ.get("REDIS_USER_ID_PREFIX", "")
    if not prefix or not isinstance(user_id, str) or not user_id.startswith(prefix + "-"):
        raise ValueError(f"the secret names Redis user {user_id!r}, not one of {prefix}-*")
    return user_id


def new_value(current: str, previous: str | None = None) -> str:
    """The pending version: a new password (and the same user) or a new bare key, whose key id is
    neither the current key's nor the previous one's (``fresh_key``)."""
    if redis_user(current) is None:
        return fresh_key([k for k in (current, previous) if k is not None], _password)
    return json.dumps({**json.loads(current), "password": _password()})


def _password() -> str:
    return "".join(secrets.choice(ALPHABET) for _ in range(LENGTH))


def key_id(key: str) -> str:
    """``sluice.core.ids.key_id`` of a bare key as the functions read it (its UTF-8 bytes); no layer
    here, so a test checks they agree."""
    return CROCKFORD[hashlib.sha256(b"sluice job id key id\x00" + key.encode("utf-8")).digest()[0] & 31]


def fresh_key(held: list[str], draw: Callable[[], str]) -> str:
    """``sluice.core.ids.fresh_key``: a drawn key whose key id no held key has. A new key shares the
    current key's one-character key id one time in 32, and ids of both then name one key id."""
    taken = {key_id(k) for k in held}
    for _ in range(MAX_KEY_DRAWS):
        key = draw()
        if key_id(key) not in taken:
            return key
    raise RuntimeError(f"no job id key with a key id other than {sorted(taken)} in {MAX_KEY_DRAWS} draws")


def _check_key_age(sm: Any, arn: str) -> None:
    """ValueError while a job id key's previous key may still verify ids in flight (module docs)."""
    versions = sm.list_secret_versions(SecretId=arn)["Versions"]
    if not any("AWSPREVIOUS" in v.get("VersionStages", []) for v in versions):
        return  # the first rotation: no id of an older key is in flight
    created = next(v["CreatedDate"] for v in versions if "AWSCURRENT" in v.get("VersionStages", []))
    age_days = (datetime.now(UTC) - created).total_seconds() / 86_400
    if age_days < KEY_MIN_AGE_DAYS:
        raise ValueError(f"refused: the job id key is {age_days:.1f} days old; rotating it before "
                         f"{KEY_MIN_AGE_DAYS} days drops the previous key while ids it minted may be in "
                         "flight (their records would be dead-lettered as unminted)")


def _create(sm: Any, arn: str, token: str, current: str) -> None:
    try:
        sm.get_secret_value(SecretId=arn, VersionId=token, VersionStage="AWSPENDING")
    except sm.exceptions.ResourceNotFoundException:
        previous = _previous(sm, arn) if redis_user(current) is None else None
        sm.put_secret_value(SecretId=arn, ClientRequestToken=token, SecretString=new_value(current, previous),
                            VersionStages=["AWSPENDING"])


def _previous(sm: Any, arn: str) -> str | None:
    try:
        return str(sm.get_secret_value(SecretId=arn, VersionStage="AWSPREVIOUS")["SecretString"])
    except sm.exceptions.ResourceNotFoundException:
        return None  # the first rotation


def _set_redis_user(sm: Any, arn: str, token: str, user: str, current: str) -> None:
    import boto3

    ec = boto3.client("elasticache")
    pending = sm.get_secret_value(SecretId=arn, VersionId=token, VersionStage="AWSPENDING")["SecretString"]
    _wait_active(ec, user)
    # Both stay valid until the next rotation replaces the older one: functions re-read on WRONGPASS.
    ec.modify_user(UserId=user, Passwords=[json.loads(current)["password"], json.loads(pending)["password"]])
    _wait_active(ec, user)


def _wait_active(ec: Any, user: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while True:
        (found,) = ec.describe_users(UserId=user)["Users"]
        if found["Status"] == "active":
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"ElastiCache user {user} still {found['Status']} after {WAIT_S} s")
        time.sleep(10)
