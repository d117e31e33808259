"""The local stack's job id key in the moto server's Secrets Manager, where it can rotate.

``sluice dev`` hands its functions the key itself (``SLUICE_JOB_ID_SECRET``). A run that rotates
the key (``sluice chaos``'s ``rotate_job_id_key``) keeps it as a deployment does instead: a secret
whose AWSCURRENT version is the key and whose AWSPREVIOUS version is the key before the last
rotation (``sluice.entry.root.job_id_keys``), named by ``SLUICE_JOB_ID_SECRET_ARN``.
"""

from __future__ import annotations

import contextlib
import secrets
from typing import Any

from sluice.core.config import Settings
from sluice.core.ids import fresh_key

SECRET_NAME = "sluice/local/job-id"


def _client(s: Settings) -> Any:
    import boto3

    return boto3.client("secretsmanager", region_name=s.aws_region, endpoint_url=s.aws_endpoint_url)


def key_in_secrets_manager(s: Settings) -> Settings:
    """``s`` with its job id key (a new one if it has none) moved into a secret on its moto server."""
    key = s.job_id_secret.get_secret_value() if s.job_id_secret is not None else secrets.token_urlsafe(32)
    arn = str(_client(s).create_secret(Name=SECRET_NAME, SecretString=key)["ARN"])
    return s.model_copy(update={"job_id_secret": None, "job_id_secret_arn": arn})


def rotate(s: Settings) -> bytes:
    """Rotate the key as Secrets Manager's rotation does: a new AWSCURRENT version, the old one
    AWSPREVIOUS, the new key's key id neither of theirs (``ids.fresh_key``). Returns the new key."""
    if not s.job_id_secret_arn:
        raise ValueError("the job id key is not in Secrets Manager (DevOptions.job_id_key_secret)")
    client = _client(s)
    key = fresh_key(_held(client, s.job_id_secret_arn), lambda: secrets.token_urlsafe(32).encode("utf-8"))
    client.put_secret_value(SecretId=s.job_id_secret_arn, SecretString=key.decode("utf-8"),
                            VersionStages=["AWSCURRENT"])
    return key


def _held(client: Any, arn: str) -> list[bytes]:
    """The keys that verify now: AWSCURRENT and, after a first rotation, AWSPREVIOUS."""
    held = []
    for stage in ("AWSCURRENT", "AWSPREVIOUS"):
        with contextlib.suppress(client.exceptions.ResourceNotFoundException):
            held.append(client.get_secret_value(SecretId=arn, VersionStage=stage)["SecretString"].encode())
    return held
