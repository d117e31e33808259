"""The internal function: children, continuations and releases only (sluice.entry.gateway_internal)."""

from sluice.entry.gateway_internal import lambda_function

gateway, handler = lambda_function()  # at init, once per container; adapters built on first use
