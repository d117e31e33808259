"""The gateway function: the public API's requests only (sluice.entry.gateway)."""

from sluice.entry.gateway import lambda_function

gateway, handler = lambda_function()  # at init, once per container; adapters built on first use
