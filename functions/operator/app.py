"""The operator function: /v1/admin/... requests only (sluice.entry.operator)."""

from sluice.entry.operator import lambda_function

gateway, handler = lambda_function()  # at init, once per container; adapters built on first use
