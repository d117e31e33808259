"""Sluice's registrar: the default worker's routes and declared schedules (sluice.entry.registrar)."""

from sluice.entry.registrar import handler as handler
