"""Secrets Manager, read the one way every adapter needs: a SecretString, errors translated."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.core.errors import BackendUnavailable

if TYPE_CHECKING:
    from sluice.core.config import Settings


def secret_string(arn: str, settings: Settings, what: str, stage: str = "AWSCURRENT") -> str:
    """The SecretString of ``arn`` at ``stage``; BackendUnavailable (naming ``what``) if unreadable."""
    value = _read(arn, settings, what, stage, missing_ok=False)
    assert value is not None  # missing_ok=False raises instead
    return value


def previous_secret_string(arn: str, settings: Settings, what: str) -> str | None:
    """The SecretString of ``arn``'s AWSPREVIOUS version, None before its first rotation."""
    return _read(arn, settings, what, "AWSPREVIOUS", missing_ok=True)


def _read(arn: str, settings: Settings, what: str, stage: str, *, missing_ok: bool) -> str | None:
    import boto3
    import botocore.exceptions

    client = boto3.client("secretsmanager", region_name=settings.aws_region,
                          endpoint_url=settings.aws_endpoint_url)
    try:
        return str(client.get_secret_value(SecretId=arn, VersionStage=stage)["SecretString"])
    except botocore.exceptions.ClientError as exc:
        if missing_ok and exc.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
            return None
        raise BackendUnavailable(f"cannot read the {what}: {exc}") from exc
    except botocore.exceptions.BotoCoreError as exc:
        raise BackendUnavailable(f"cannot read the {what}: {exc}") from exc
