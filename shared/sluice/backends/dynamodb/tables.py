"""Create the store's resources where no CloudFormation runs: tests, the local stack, the demo.

In AWS, template.yaml declares the same resources; keep the two in step.
Every function is idempotent: an existing table or bucket is left as it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from sluice.backends.dynamodb.errors import error_code, translate, translated
from sluice.core.config import Settings

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_s3 import S3Client


def _create_table(client: DynamoDBClient, name: str, key: str, ttl_attribute: str, *,
                  stream: bool = False, sort_key: str | None = None) -> None:
    spec = {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}
    extra: dict[str, Any] = {"StreamSpecification": spec} if stream else {}
    keys = [key] if sort_key is None else [key, sort_key]
    try:
        client.create_table(
            TableName=name,
            KeySchema=[{"AttributeName": k, "KeyType": "RANGE" if i else "HASH"} for i, k in enumerate(keys)],
            AttributeDefinitions=[{"AttributeName": k, "AttributeType": "S"} for k in keys],
            BillingMode="PAY_PER_REQUEST", **extra,
        )
    except ClientError as exc:
        if error_code(exc) != "ResourceInUseException":
            raise translate(exc, f"create_table {name}") from exc
    with translated(f"wait for table {name}"):
        client.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 60})
    try:
        client.update_time_to_live(TableName=name, TimeToLiveSpecification={
            "Enabled": True, "AttributeName": ttl_attribute})
    except ClientError as exc:
        # Enabling TTL twice is an error in DynamoDB; the end state is what we want.
        if "already enabled" not in str(exc).lower() and error_code(exc) != "ValidationException":
            raise translate(exc, f"update_time_to_live {name}") from exc


def create_jobs_table(client: DynamoDBClient, name: str) -> None:
    """Partition key ``job_id``; TTL on ``expires_at`` (set only on final states); a stream of both
    images, which the completion events hang off (docs/events.md)."""
    _create_table(client, name, "job_id", "expires_at", stream=True)


def create_idempotency_table(client: DynamoDBClient, name: str) -> None:
    """The layout Powertools' DynamoDBPersistenceLayer expects: key ``id``, TTL ``expiration``."""
    _create_table(client, name, "id", "expiration")


def create_routes_table(client: DynamoDBClient, name: str) -> None:
    """The routes table (``sluice.backends.dynamodb.routes``): key ``pattern``; nothing expires."""
    _create_table(client, name, "pattern", "expires_at")


def create_queues_table(client: DynamoDBClient, name: str) -> None:
    """The durable registry of queues (``dynamodb.queues``): key ``queue``; nothing expires."""
    _create_table(client, name, "queue", "expires_at")


def create_schedules_table(client: DynamoDBClient, name: str) -> None:
    """The schedules table (``dynamodb.schedules``): key ``queue`` + ``name`` (a schedule's name is
    its queue's, so per-queue IAM scopes it); nothing expires."""
    _create_table(client, name, "queue", "expires_at", sort_key="name")


def create_parked_table(client: DynamoDBClient, name: str) -> None:
    """The parking lot (``dynamodb.parking``): key ``pk`` + ``sk``; TTL ``expires_at``, a backstop past
    the job life bound (the relay's sweep ends such a job first)."""
    _create_table(client, name, "pk", "expires_at", sort_key="sk")


def create_results_bucket(client: S3Client, bucket: str, region: str = "us-east-1",
                          retention_days: int = 14) -> None:
    """The bucket for large results; objects expire with the job retention.

    Expiry also collects the objects of refused (stale) writes, which no item points to.
    """
    from sluice.backends.aws.clients import create_bucket

    create_bucket(client, bucket, region)
    with translated(f"put_bucket_lifecycle_configuration {bucket}"):
        client.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": [{
            "ID": "expire-results", "Status": "Enabled", "Filter": {"Prefix": "results/"},
            # A day beyond the item's TTL, so no live item ever points at a deleted object.
            "Expiration": {"Days": retention_days + 1},
        }]})


def ensure_all(settings: Settings) -> None:
    """Jobs table, idempotency table, results bucket and payloads bucket named in ``settings``."""
    import boto3

    common: dict[str, Any] = {"region_name": settings.aws_region, "endpoint_url": settings.aws_endpoint_url}
    dynamodb = boto3.client("dynamodb", **common)
    create_jobs_table(dynamodb, settings.jobs_table)
    create_idempotency_table(dynamodb, settings.idempotency_table)
    if settings.routes_table:
        create_routes_table(dynamodb, settings.routes_table)
    if settings.schedules_table:
        create_schedules_table(dynamodb, settings.schedules_table)
    if settings.parked_table:
        create_parked_table(dynamodb, settings.parked_table)
    if settings.queues_table:
        create_queues_table(dynamodb, settings.queues_table)
    s3 = boto3.client("s3", **common)
    create_results_bucket(s3, settings.results_bucket, settings.aws_region, settings.retention_days)
    if settings.payloads_bucket:
        from sluice.backends.aws.payloads import create_payloads_bucket

        create_payloads_bucket(s3, settings.payloads_bucket, settings.aws_region, settings.retention_days)
