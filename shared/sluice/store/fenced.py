"""Deprecated alias of ``sluice.backends.dynamodb.fenced``, the path handlers published before
the layers (tests/unit/test_aliases.py)."""

from sluice.backends.dynamodb.fenced import Fence, FencedTable, classify, fencing_headers

__all__ = ["Fence", "FencedTable", "classify", "fencing_headers"]
