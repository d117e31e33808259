"""The operator function: /v1/admin/... requests only (sluice.entry.gateway_operator)."""

from sluice.entry.gateway_operator import lambda_function

gateway, handler = lambda_function()  # at init, once per container; adapters built on first use
