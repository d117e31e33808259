"""The worker runtime: everything that happens to one leased job, in small pieces.

- ``outcomes``: ``Retry`` / ``Fail`` that handlers raise, and the ``Outcome`` of an attempt
- ``context``: ``JobContext`` handed to handlers, and the shared lease state
- ``heartbeat``: the thread that renews every lease this worker holds
- ``invoke``: runs a handler on its own thread with a hard timeout
- ``aio``: the one event loop per process that ``async def`` handlers are awaited on
- ``execute``: grant -> handler -> verdict for one job
- ``finish``: write + ack, or record the failure + fail/release, in a crash-safe order
- ``budget``: Lambda time budgeting
- ``telemetry``: Powertools metrics and logger, injectable
- ``observers``: the metrics and the lifecycle logs, as subscribers of the worker's events
- ``lambda_entry``: the worker Lambda's one function
"""

from sluice.worker.runtime.context import JobContext
from sluice.worker.runtime.options import HandlerSpec, WorkerOptions
from sluice.worker.runtime.outcomes import Fail, Outcome, Retry

__all__ = ["Fail", "HandlerSpec", "JobContext", "Outcome", "Retry", "WorkerOptions"]
