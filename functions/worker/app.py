"""Worker Lambda: drain the queues a dispatch event names, within this invocation's time.

Invoked asynchronously by the relay's dispatch and every minute by the scheduled
safety-net rule (constant Input, same shape). Returns the drain summary. A CloudFormation
``Custom::SluiceRoutes`` request registers this function's routes (sluice.entry.routes_resource).
"""

from __future__ import annotations

from typing import Any

from sluice.entry import routes_resource
from sluice.entry.worker import LambdaContextLike, handle_dispatch, prepare

# At init, once per container: load the handlers module and refuse any handler whose timeout
# cannot fit this function's Timeout (HandlerDoesNotFit names it), rather than lease nothing.
prepare()


def handler(event: dict[str, Any], context: LambdaContextLike) -> dict[str, Any]:
    if routes_resource.is_custom_resource(event):  # DefaultWorkerRoutes: this function's own routes
        return routes_resource.handle(event, context)
    return handle_dispatch(event, context)
