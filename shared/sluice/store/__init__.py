"""Deprecated alias package: ``sluice.store.fenced`` is ``sluice.backends.dynamodb.fenced``."""
