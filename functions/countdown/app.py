"""Countdown Lambda: the jobs table's stream -> each child's countdown (sluice.entry.countdown)."""

from sluice.entry.countdown import handler as handler
