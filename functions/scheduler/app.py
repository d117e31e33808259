"""The scheduler function: the operator's Scheduler calls, outside the VPC (sluice.entry.scheduler)."""

from sluice.entry.scheduler import handler as handler
