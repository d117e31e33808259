"""Sluice: an at-least-once job queue for AWS whose storage refuses stale writers."""

from typing import Any

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


def __getattr__(name: str) -> Any:
    # sluice.Client is imported on first use: worker Lambdas never load the HTTP client.
    if name == "Client":
        from sluice.client import Client

        return Client
    raise AttributeError(f"module 'sluice' has no attribute {name!r}")
