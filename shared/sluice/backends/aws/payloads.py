"""``ports.PayloadStore`` over the payloads bucket (S3): large payloads, by the job's own key.

The gateway's pipeline puts an object before the record that points at it goes to Kafka; the
worker gets it before the handler runs (``sluice.core.payloads``). The bucket (template.yaml
``PayloadsBucket``) encrypts at rest, refuses plain HTTP and expires objects after the job life
bound, so the objects of records never appended (a put whose append then failed) go too.
botocore's errors become Sluice's here: a missing object is PayloadUnavailable (the job fails with
that reason), throttling and connection errors BackendUnavailable, the rest StoreError.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Final

from botocore.exceptions import BotoCoreError, ClientError

from sluice.backends.aws.clients import create_bucket
from sluice.core import limits, payloads
from sluice.core.errors import BackendUnavailable, PayloadUnavailable, StoreError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

_MISSING: Final = frozenset({"NoSuchKey", "404", "NotFound"})
_RETRYABLE: Final = frozenset({"SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "503",
                               "500", "Throttling", "ThrottlingException"})


@contextmanager
def _translated(operation: str, key: str) -> Iterator[None]:
    try:
        yield
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        where = f"{operation} {key}: {code}"
        if code in _MISSING:
            raise PayloadUnavailable(f"the payload object {key} is missing (expired, or never written)",
                                     key=key) from exc
        if code in _RETRYABLE:
            raise BackendUnavailable(where, operation=operation, aws_code=code) from exc
        raise StoreError(where, operation=operation, aws_code=code) from exc
    except BotoCoreError as exc:  # connection refused, timed out: may or may not have landed
        raise BackendUnavailable(f"{operation} {key}: {type(exc).__name__}: {exc}",
                                 operation=operation) from exc


class S3PayloadStore:
    """Objects ``payloads/<queue>/<job_id>`` in ``bucket``: nothing else is read or written."""

    def __init__(self, client: S3Client, bucket: str) -> None:
        self.client, self.bucket = client, bucket

    def put(self, key: str, body: bytes) -> None:
        with _translated("s3.put_object", key):
            self.client.put_object(Bucket=self.bucket, Key=key, Body=body, ContentType="application/json")

    def get(self, key: str) -> bytes:
        with _translated("s3.get_object", key):
            return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()


def expiry_days(retention_days: int) -> int:
    """Days an object lives: a day past both the job life bound and a finished job's item (the
    template's ``ResultExpiry`` mapping, RetentionDays + 1, with RetentionDays at least 14)."""
    return max(retention_days, limits.JOB_LIFE_MS // limits.DAY_MS) + 1


def create_payloads_bucket(client: S3Client, bucket: str, region: str = "us-east-1",
                           retention_days: int = 14) -> None:
    """The payloads bucket as the template makes it, for the local stack and tests: encrypted at rest
    (SSE-S3), objects under ``payloads/`` expiring after ``expiry_days``. Idempotent."""
    create_bucket(client, bucket, region)
    with _translated("s3.put_bucket_encryption", bucket):
        client.put_bucket_encryption(Bucket=bucket, ServerSideEncryptionConfiguration={"Rules": [
            {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}, "BucketKeyEnabled": True}]})
    with _translated("s3.put_bucket_lifecycle_configuration", bucket):
        client.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": [{
            "ID": "expire-payloads-after-the-job-life-bound", "Status": "Enabled",
            "Filter": {"Prefix": f"{payloads.PREFIX}/"}, "Expiration": {"Days": expiry_days(retention_days)},
        }]})
