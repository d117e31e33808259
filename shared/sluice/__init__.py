"""Sluice: an at-least-once job queue for AWS whose storage refuses stale writers."""

from sluice.errors import (
    AlreadyFinished,
    JobCancelled,
    JobNotFound,
    LeaseLost,
    SluiceError,
    StaleToken,
)
from sluice.models import Job, JobSpec, JobState

__all__ = [
    "AlreadyFinished",
    "Job",
    "JobCancelled",
    "JobNotFound",
    "JobSpec",
    "JobState",
    "LeaseLost",
    "SluiceError",
    "StaleToken",
]
__version__ = "0.1.0"
