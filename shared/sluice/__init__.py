"""Sluice: an at-least-once job queue for AWS whose storage refuses stale writers."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sluice.client import Client as Client  # re-exported, not in __all__: star-imports skip it
    from sluice.errors import (
        AlreadyFinished,
        JobCancelled,
        JobNotFound,
        LeaseLost,
        SluiceError,
        StaleToken,
    )
    from sluice.models import Job, JobSpec, JobState
    from sluice.runtime import Fail, JobContext, Retry
    from sluice.worker import Worker

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
    "SluiceError",
    "StaleToken",
    "Worker",
]
__version__ = "0.1.0"

# Where each public name lives. Imported on first use (PEP 562), not with the package: every
# function imports ``sluice.<something>``, which runs this file first, and the relay and the
# gateway need neither the worker runtime nor the HTTP client (cold start, issue 14).
_HOMES = {
    "AlreadyFinished": "sluice.errors", "JobCancelled": "sluice.errors", "JobNotFound": "sluice.errors",
    "LeaseLost": "sluice.errors", "SluiceError": "sluice.errors", "StaleToken": "sluice.errors",
    "Job": "sluice.models", "JobSpec": "sluice.models", "JobState": "sluice.models",
    "Fail": "sluice.runtime", "JobContext": "sluice.runtime", "Retry": "sluice.runtime",
    "Worker": "sluice.worker", "Client": "sluice.client",
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
