"""The price book: prices.toml read once and checked, each price with its source and the date it was read.

Reading the file is the cost model's only I/O; everything else in ``sluice_dev.cost`` is arithmetic
on a ``PriceBook``. A price without a source or a date, a negative or non-finite figure, or tiers that
do not end with an open tier is refused here, so the model never computes with one.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import date
from functools import cache
from pathlib import Path
from typing import Any

from sluice.core.errors import ConfigError

PRICES_FILE = Path(__file__).with_name("prices.toml")


@dataclass(frozen=True)
class Tier:
    millions: float | None  # the tier's width in millions of units a month; None: everything above
    usd: float  # per million units


@dataclass(frozen=True)
class Price:
    key: str
    service: str
    dimension: str
    unit: str
    source: str
    read: date
    usd: float | None = None  # per ``unit``; None for a tiered price
    tiers: tuple[Tier, ...] = ()

    @property
    def flat(self) -> float:
        """The one figure of an untiered price (a tiered one is refused: use ``for_millions``)."""
        if self.usd is None:
            raise ConfigError(f"price {self.key} is tiered: it has no single figure")
        return self.usd

    def for_millions(self, millions: float) -> float:
        """USD for ``millions`` units in a month, through the tiers (or at the flat price)."""
        if self.usd is not None:
            return millions * self.usd
        total, left = 0.0, millions
        for tier in self.tiers:
            take = left if tier.millions is None else min(left, tier.millions)
            total += take * tier.usd
            left -= take
            if left <= 0:
                break
        return total

    def split(self, millions: float) -> list[tuple[float, float]]:
        """(millions, usd per million) for each tier ``millions`` reaches: the arithmetic shown."""
        if self.usd is not None:
            return [(millions, self.usd)]
        out: list[tuple[float, float]] = []
        left = millions
        for tier in self.tiers:
            take = left if tier.millions is None else min(left, tier.millions)
            if take > 0 or not out:
                out.append((take, tier.usd))
            left -= take
            if left <= 0:
                break
        return out


@dataclass(frozen=True)
class PriceBook:
    region: str
    hours_per_month: float
    prices: Mapping[str, Price]

    def __getitem__(self, key: str) -> Price:
        try:
            return self.prices[key]
        except KeyError:
            raise ConfigError(f"{PRICES_FILE.name} has no price {key!r}") from None

    def usd(self, key: str) -> float:
        return self[key].flat


def _figure(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ConfigError(f"price {key}: {value!r} is not a finite, non-negative number of USD")
    return float(value)


def _price(key: str, raw: Mapping[str, Any]) -> Price:
    for field in ("service", "dimension", "unit", "source", "read"):
        if field not in raw:
            raise ConfigError(f"price {key} has no {field}: every price names its source and the date read")
    if not str(raw["source"]).startswith("https://"):
        raise ConfigError(f"price {key}: its source {raw['source']!r} is not an https:// address")
    read = raw["read"]
    if isinstance(read, str):
        try:
            read = date.fromisoformat(read)
        except ValueError:
            raise ConfigError(f"price {key}: read {raw['read']!r} is not a date (YYYY-MM-DD)") from None
    if not isinstance(read, date):
        raise ConfigError(f"price {key}: read {raw['read']!r} is not a date (YYYY-MM-DD)")
    if ("usd" in raw) == ("tiers" in raw):
        raise ConfigError(f"price {key}: give either usd or tiers")
    price = Price(key, str(raw["service"]), str(raw["dimension"]), str(raw["unit"]), str(raw["source"]), read)
    if "usd" in raw:
        return replace(price, usd=_figure(key, raw["usd"]))
    tiers = tuple(Tier(None if "millions" not in t else _figure(key, t["millions"]), _figure(key, t["usd"]))
                  for t in raw["tiers"])
    if not tiers or tiers[-1].millions is not None or any(t.millions is None for t in tiers[:-1]):
        raise ConfigError(f"price {key}: its tiers must end with one open tier (no millions)")
    return replace(price, tiers=tiers)


def parse(document: Mapping[str, Any]) -> PriceBook:
    """A price book from the parsed TOML document (pure)."""
    meta = document.get("meta", {})
    hours = _figure("meta.hours_per_month", meta.get("hours_per_month", 730))
    prices = {key: _price(key, raw) for key, raw in document.get("prices", {}).items()}
    return PriceBook(str(meta.get("region", "us-east-1")), hours, prices)


@cache
def load(path: Path = PRICES_FILE) -> PriceBook:
    with path.open("rb") as f:
        return parse(tomllib.load(f))
