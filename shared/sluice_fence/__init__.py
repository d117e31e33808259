"""Fencing for services: WSGI and ASGI middleware that refuse a Sluice job's stale holder.

A Sluice handler's HTTP calls through ``ctx.http`` carry the job id and the attempt's fencing
token (``sluice.core.fencing``). A service wraps its app in this package's middleware, and every
write it fences is admitted only while its token is not older than the newest the service has
seen for the job; an older one, from a holder whose lease was taken over, is refused with 409,
durably (one conditional write in Redis or DynamoDB), across every process of the service::

    from sluice_fence import Fence, FenceWSGI, RedisFenceStore

    app = FenceWSGI(app, Fence(RedisFenceStore.from_url("redis://fences:6379/0"), namespace="billing"))

Not in the Lambda layer: ``shared/build_layer.py`` copies ``sluice`` alone. It imports only
``sluice.core`` of Sluice (pure), and its store's client (redis-py, or botocore) when built.
docs/worker.md, "Fencing for services", is the service team's page.
"""

from sluice_fence.asgi import FenceASGI
from sluice_fence.dynamodb_store import DynamoFenceStore
from sluice_fence.redis_store import RedisFenceStore
from sluice_fence.verifier import ENVIRON_KEY, Admitted, Advance, Decision, Fence, FenceStore
from sluice_fence.wsgi import FenceWSGI

__all__ = ["ENVIRON_KEY", "Admitted", "Advance", "Decision", "DynamoFenceStore", "Fence", "FenceASGI",
           "FenceStore", "FenceWSGI", "RedisFenceStore"]
