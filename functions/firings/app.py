"""The firings function: EventBridge Scheduler's firings only (sluice.entry.gateway_scheduler)."""

from sluice.entry.gateway_scheduler import lambda_function

gateway, handler = lambda_function()  # at init, once per container; adapters built on first use
