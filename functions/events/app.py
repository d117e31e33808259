"""Events Lambda: the jobs table's stream -> EventBridge (sluice.entry.events)."""

from sluice.entry.events import handler as handler
