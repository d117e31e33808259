"""A registrar function: a team's (``<stack>-registrar-<team>``, infra/team.yaml), or Sluice's own
for its default worker (``<stack>-registrar``, template.yaml's ``RegistrarFunction``, issue 31).

``Custom::SluiceRoutes`` requests from the team's stack (infra/worker.yaml's ``TeamRoutes``, whose
``ServiceToken`` is this function) register or remove the team's routes and the schedules its code
declares (``sluice.registrar``; the schedules table and Scheduler when ``SLUICE_SCHEDULES_TABLE``
and the firings function are configured).
Who may invoke it is decided by its resource policy (the team's deploy roles only), not by the
event; what it may register is decided by its configuration (``SLUICE_REGISTRAR_TEAM``,
``SLUICE_REGISTRAR_QUEUES``, ``SLUICE_STACK_NAME``), the team map's entry for its team. Sluice's own
registrar is configured with the default worker's name (``SLUICE_WORKER_FUNCTION_NAME``) and no team:
it answers template.yaml's ``DefaultWorkerRegistration`` (``Registrar.default``).

A refusal answers CloudFormation ``FAILED`` with the reason, so the deploy fails and says why.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sluice.entry.routes_resource import is_custom_resource, put

if TYPE_CHECKING:
    from sluice.core.config import Settings
    from sluice.registrar.register import Registrar

log = logging.getLogger(__name__)


def build(s: Settings) -> Registrar:
    from sluice.backends.aws.team_map import LambdaWorkerDescriber
    from sluice.backends.dynamodb.routes import DynamoRouteStore
    from sluice.core.errors import ConfigError
    from sluice.entry import root as wiring
    from sluice.registrar.register import Registrar

    if s.registrar_team and s.worker_function_name:  # one or the other: never a team's map widened
        raise ConfigError("a registrar is a team's (SLUICE_REGISTRAR_TEAM) or the default worker's "
                          "(SLUICE_WORKER_FUNCTION_NAME), not both")
    store = DynamoRouteStore.from_settings(s, client=wiring.dynamodb(s))
    describer = LambdaWorkerDescriber.from_settings(s)
    if s.worker_function_name:
        return Registrar.default(s.worker_function_name, store, describer, wiring.code_schedules(s))
    return Registrar.of(s.stack_name, s.registrar_team, s.registrar_queues, store, describer,
                        wiring.code_schedules(s))


def respond(event: Mapping[str, Any], registrar: Registrar, send: Any,
            local_endpoint: str | None = None) -> dict[str, Any]:
    """Apply the request and PUT the answer to its ResponseURL (only CloudFormation's)."""
    from sluice.registrar.register import FAILED_PREFIX, response_url_ok

    url = str(event.get("ResponseURL") or "")
    if not response_url_ok(url, local_endpoint):
        log.error("registrar of %s: refused a request whose ResponseURL is not CloudFormation's: %.200s",
                  registrar.whose, url)
        return {"Status": "FAILED", "Reason": "ResponseURL is not CloudFormation's; nothing was done"}
    status, reason = "SUCCESS", ""
    data: dict[str, str] = {}
    physical = str(event.get("PhysicalResourceId") or f"{FAILED_PREFIX}{event.get('RequestId', '')}")
    try:
        physical, data = registrar.apply(event)
    except Exception as exc:  # a refusal or a backend error must still reach CloudFormation
        status, reason = "FAILED", f"{type(exc).__name__}: {exc}"
        log.error("registrar of %s: %s refused: %s", registrar.whose, event.get("RequestType"), reason)
    body = {"Status": status, "Reason": (reason or "see the registrar's log")[:900],
            "PhysicalResourceId": physical[:1000], "StackId": event.get("StackId"),
            "RequestId": event.get("RequestId"), "LogicalResourceId": event.get("LogicalResourceId"),
            "Data": data}
    send(url, json.dumps(body).encode())
    return body


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    from sluice.entry import root as wiring

    s = wiring.settings()
    if not is_custom_resource(event):
        return {"Status": "FAILED", "Reason": "a registrar answers Custom::SluiceRoutes requests only"}
    local = s.aws_endpoint_url if s.lambda_endpoint_url else None  # sluice dev: its S3 is moto's
    return respond(event, build(s), put, local)
