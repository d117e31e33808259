"""The internal function: children, continuations and releases only (sluice.entry.internal)."""

from sluice.entry.internal import lambda_function

gateway, handler = lambda_function()  # at init, once per container; adapters built on first use
