"""How the cost model writes numbers: counts, prices and dollar amounts, the same in the doc and the CLI."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal


def count(x: float) -> str:
    """1861500 -> '1,861,500'; 1.5 -> '1.5'; 0.04 -> '0.04' (at most 4 decimals, no trailing zeros)."""
    if float(x).is_integer():
        return f"{int(x):,}"
    text = f"{x:,.4f}".rstrip("0").rstrip(".")
    return text


def usd(x: float) -> str:
    """A unit price as the pricing pages write it: '$0.0000133334', '$0.75', '$3.00', '$0.0015'."""
    text = f"{x:.10f}".rstrip("0")
    whole, _, frac = text.partition(".")
    return f"${whole}.{frac.ljust(2, '0')}"


def money(x: float) -> str:
    """A dollar amount to the cent, halves up as a bill rounds them: '1,636.43', 3.125 -> '3.13'."""
    cents = Decimal(repr(round(x, 9))).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    return f"{cents:,.2f}"


def millions(jobs: float) -> str:
    """A monthly job count as the docs write it: '1 M', '100 M', '1,000 M', '250,000'."""
    if jobs >= 1_000_000 and (jobs / 1_000_000).is_integer():
        return f"{int(jobs / 1_000_000):,} M"
    return count(jobs)
