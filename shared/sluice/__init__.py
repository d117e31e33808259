"""Sluice: an at-least-once job queue for AWS whose storage refuses stale writers."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sluice.client import Client as Client  # re-exported, not in __all__: star-imports skip it
    from sluice.client_async import AsyncClient as AsyncClient  # the same
    from sluice.core.errors import (
        AlreadyFinished,
        JobCancelled,
        JobNotFound,
        LeaseLost,
        SluiceError,
        StaleToken,
    )
    from sluice.core.models import Job, JobSpec, JobState
    from sluice.core.policy import RetryPolicy
    from sluice.worker.registry import Worker
    from sluice.worker.runtime import Fail, JobContext, Retry

__all__ = [
    "AlreadyFinished",
    "Fail",
    "Job",
    "JobCancelled",
    "JobContext",
    "JobNotFound",
    "JobSpec",
    "JobState",
    "LeaseLost",
    "Retry",
    "RetryPolicy",
    "SluiceError",
    "StaleToken",
    "Worker",
]
from sluice.core.version import __version__ as __version__

# Where each public name lives. Imported on first use (PEP 562), not with the package: every
# function imports ``sluice.<something>``, which runs this file first, and the relay and the
# gateway need neither the worker runtime nor the HTTP client (cold start, issue 14).
_HOMES = {
    "AlreadyFinished": "sluice.core.errors", "JobCancelled": "sluice.core.errors",
    "JobNotFound": "sluice.core.errors", "LeaseLost": "sluice.core.errors",
    "SluiceError": "sluice.core.errors", "StaleToken": "sluice.core.errors",
    "Job": "sluice.core.models", "JobSpec": "sluice.core.models", "JobState": "sluice.core.models",
    "Fail": "sluice.worker.runtime", "JobContext": "sluice.worker.runtime", "Retry": "sluice.worker.runtime",
    "Worker": "sluice.worker.registry", "Client": "sluice.client", "RetryPolicy": "sluice.core.policy",
    "AsyncClient": "sluice.client_async",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'sluice' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # once: later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
