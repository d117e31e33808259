"""boto3 clients built from Settings, on the process's default session (cold start).

The composition root (``sluice.entry.root``) builds the container's clients with this; the
adapters that build a client of their own when handed none use it too, so no adapter needs
the composition root.
"""

from __future__ import annotations

from typing import Any, Self

from sluice.core.config import Settings


def boto_client(service: str, s: Settings, *, endpoint_url: str | None = None, **options: Any) -> Any:
    """A new client of ``service`` for ``s`` (``options``: boto3's, e.g. ``config``)."""
    import boto3

    # The process's default session, which boto3.client (the store, the dispatcher) uses too: a
    # fresh Session per client would load botocore's endpoint data and each service model again,
    # 100 ms and more of a cold start per client. boto3.client is overloaded per literal service
    # name; go through the session's untyped factory so one helper serves every service.
    if boto3.DEFAULT_SESSION is None:
        boto3.setup_default_session()
    factory: Any = boto3.DEFAULT_SESSION.client  # type: ignore[union-attr]
    return factory(service, region_name=s.aws_region, endpoint_url=endpoint_url or s.aws_endpoint_url,
                   **options)


def lambda_client(s: Settings, *, read_timeout: float | None = None) -> Any:
    """Lambda's client for ``s``: its own endpoint where one is set (the local Lambda service), else
    the AWS one; ``read_timeout``: short connects and two standard retries (an invoke's caller)."""
    options: dict[str, Any] = {}
    if read_timeout is not None:
        from botocore.config import Config

        options["config"] = Config(connect_timeout=2, read_timeout=read_timeout,
                                   retries={"max_attempts": 2, "mode": "standard"})
    return boto_client("lambda", s, endpoint_url=s.lambda_endpoint_url, **options)


class OnLambda:
    """An adapter over Lambda's API: handed a client, or built from Settings (``lambda_client``)."""

    def __init__(self, client: Any) -> None:
        self.client = client

    @classmethod
    def from_settings(cls, s: Settings) -> Self:
        return cls(lambda_client(s))


def create_bucket(client: Any, bucket: str, region: str) -> None:
    """``bucket`` in ``region`` unless it exists already (the local stack and tests make the stack's
    buckets: ``dynamodb.tables``, ``aws.payloads``); StoreError otherwise."""
    from botocore.exceptions import ClientError

    from sluice.core.errors import StoreError

    kwargs: dict[str, Any] = {"Bucket": bucket}
    if region != "us-east-1":
        kwargs["CreateBucketConfiguration"] = {"LocationConstraint": region}
    try:
        client.create_bucket(**kwargs)
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            raise StoreError(f"create_bucket {bucket}: {code}", aws_code=code) from exc
