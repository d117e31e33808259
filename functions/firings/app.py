"""The firings function: EventBridge Scheduler's firings only (sluice.entry.firings)."""

from sluice.entry.firings import lambda_function

gateway, handler = lambda_function()  # at init, once per container; adapters built on first use
