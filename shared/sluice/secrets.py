"""Secrets Manager, read the one way every adapter needs: a SecretString, errors translated."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.errors import BackendUnavailable

if TYPE_CHECKING:
    from sluice.config import Settings


def secret_string(arn: str, settings: Settings, what: str) -> str:
    """The SecretString of ``arn``; BackendUnavailable (naming ``what``) if it cannot be read."""
    import boto3
    import botocore.exceptions

    client = boto3.client("secretsmanager", region_name=settings.aws_region,
                          endpoint_url=settings.aws_endpoint_url)
    try:
        return str(client.get_secret_value(SecretId=arn)["SecretString"])
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
        raise BackendUnavailable(f"cannot read the {what}: {exc}") from exc
