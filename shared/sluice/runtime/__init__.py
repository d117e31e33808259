"""Deprecated alias of ``sluice.worker.runtime`` (the worker runtime's home before the layers).

Handlers written against the published paths import ``Fail``, ``Retry`` and ``JobContext``
from here, and teams' copies of ``infra/worker.yaml`` name
``sluice.runtime.worker_function.handler``; both keep working (tests/unit/test_aliases.py).
New code imports from ``sluice`` (``sluice.Fail``, ``sluice.JobContext``) or
``sluice.worker.runtime``. docs/design.md, "Deprecated paths", says when these go.
"""

from sluice.worker.runtime import Fail, HandlerSpec, JobContext, Outcome, Retry, WorkerOptions

__all__ = ["Fail", "HandlerSpec", "JobContext", "Outcome", "Retry", "WorkerOptions"]
