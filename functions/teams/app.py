"""The team map function: the relay's team map, read from SSM outside the VPC (sluice.entry.teams)."""

from sluice.entry.teams import handler as handler
