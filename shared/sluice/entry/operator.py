"""The operator function (template.yaml ``OperatorFunction``, ``functions/operator/app.py``): operator
calls only: API Gateway proxy events for ``/v1/admin/...``, schedule CRUD included.

Every other shape is refused (``sluice.entry.gateway.Gateway``); the calls themselves are
``sluice.entry.gateway_operator``'s. Its resource policy admits only its caller (docs/security.md).
"""

from __future__ import annotations

from sluice.entry.gateway import Gateway, Handler
from sluice.entry.gateway import lambda_function as _build


def lambda_function() -> tuple[Gateway, Handler]:
    """The function's Gateway and Lambda handler; called once per container, at init."""
    return _build(kind="operator")
