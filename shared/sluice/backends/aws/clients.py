"""boto3 clients built from Settings, on the process's default session (cold start).

The composition root (``sluice.entry.root``) builds the container's clients with this; the
adapters that build a client of their own when handed none use it too, so no adapter needs
the composition root.
"""

from __future__ import annotations

from typing import Any

from sluice.core.config import Settings


def boto_client(service: str, s: Settings, **options: Any) -> Any:
    """A new client of ``service`` for ``s`` (``options``: boto3's, e.g. ``config``)."""
    import boto3

    # The process's default session, which boto3.client (the store, the dispatcher) uses too: a
    # fresh Session per client would load botocore's endpoint data and each service model again,
    # 100 ms and more of a cold start per client. boto3.client is overloaded per literal service
    # name; go through the session's untyped factory so one helper serves every service.
    if boto3.DEFAULT_SESSION is None:
        boto3.setup_default_session()
    factory: Any = boto3.DEFAULT_SESSION.client  # type: ignore[union-attr]
    return factory(service, region_name=s.aws_region, endpoint_url=s.aws_endpoint_url, **options)
