"""The worker function's Lambda handler, as a team's own worker function uses it from the layer.

``Handler: sluice.entry.worker_function.handler`` (infra/worker.yaml): the team's code
directory holds only its handlers module (``SLUICE_HANDLERS_MODULE``). Sluice's own worker
(``functions/worker/app.py``) does the same. Two kinds of event arrive:

- a dispatch (``models.DispatchEvent``) from the relay or the scheduled safety net: drain;
- a ``Custom::SluiceRoutes`` request from CloudFormation: register or remove this function's
  routes (``runtime.routes_resource``).
"""

from __future__ import annotations

from sluice.entry.worker import handler as handler
from sluice.entry.worker import prepare

# At init, once per container: load the handlers module and refuse any handler whose timeout
# cannot fit this function's Timeout (HandlerDoesNotFit names it), rather than lease nothing.
prepare()
