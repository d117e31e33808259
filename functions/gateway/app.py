"""The gateway function: API and operator requests, internal invokes, firings (sluice.entry.gateway)."""

from sluice.entry.gateway import lambda_function

gateway, handler = lambda_function()  # at init, once per container; adapters built on first use
