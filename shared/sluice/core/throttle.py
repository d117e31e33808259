"""Per-caller limits at the gateway (issue 27, item 5): whose bucket a request takes from, and how much.

Every caller, an IAM principal or an API key, gets two token buckets: requests (``rate_per_s``,
``burst``) and body bytes (``bytes_per_s``, ``byte_burst``). A request takes one request token and
its body's bytes, from both or from neither. The state lives in Redis so that every gateway
container shares it (``backends/redis/lua/throttle.lua`` does this arithmetic atomically); the
functions here are the same arithmetic, pure, and what the gateway falls back to, per container,
when Redis cannot be reached (``sluice.gateway.throttle``).

No clock is read here: callers pass ``now_ms``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sluice.core import policy
from sluice.core.errors import ConfigError

if TYPE_CHECKING:
    from sluice.core.config import Settings

API_KEY_PREFIX = "apikey:"  # a CallerLimits entry for an API key: apikey:<key id>=...
ANONYMOUS = "anonymous"  # a request with neither (the local server without its header)


@dataclass(frozen=True, slots=True)
class CallerLimit:
    """One caller's limits; a rate of 0 turns that bucket off."""

    rate_per_s: float = 0.0
    burst: int = 0
    bytes_per_s: int = 0
    byte_burst: int = 0

    def __post_init__(self) -> None:
        if not (self.rate_per_s >= 0 and self.bytes_per_s >= 0 and self.burst >= 0 and self.byte_burst >= 0):
            raise ConfigError(f"caller limits must not be negative: {self}")
        if math.isinf(self.rate_per_s) or math.isnan(self.rate_per_s):
            raise ConfigError(f"a caller rate must be a finite number: {self}")

    @property
    def off(self) -> bool:
        return self.rate_per_s <= 0 and self.bytes_per_s <= 0

    @property
    def request_capacity(self) -> float:
        return float(max(1, self.burst))

    @property
    def byte_capacity(self) -> float:
        return float(max(1, self.byte_burst))

    def cost(self, size: int) -> float:
        """The byte tokens a body of ``size`` bytes takes: at most a full bucket, so a body larger
        than the burst still passes once the bucket is full, and drains it."""
        return float(min(max(0, size), self.byte_capacity)) if self.bytes_per_s > 0 else 0.0

    def full_after_ms(self) -> int:
        """How long an untouched pair of buckets takes to fill from empty (the key's TTL in Redis)."""
        ms = 0.0
        if self.rate_per_s > 0:
            ms = self.request_capacity * 1000 / self.rate_per_s
        if self.bytes_per_s > 0:
            ms = max(ms, self.byte_capacity * 1000 / self.bytes_per_s)
        return math.ceil(ms)


@dataclass(frozen=True, slots=True)
class Buckets:
    requests: float
    bytes: float
    updated_ms: int


@dataclass(frozen=True, slots=True)
class Verdict:
    allowed: bool
    retry_after_ms: int = 0  # when the bucket that refused will hold enough (0 when allowed)

    @property
    def retry_after_s(self) -> int:
        """Retry-After's whole seconds, at least 1."""
        return max(1, math.ceil(self.retry_after_ms / 1000))


def take(state: Buckets | None, now_ms: int, limit: CallerLimit, size: int) -> tuple[Verdict, Buckets | None]:
    """One request of ``size`` body bytes against ``state`` (None: never seen, so full).

    Returns the verdict and the state to keep: refused, the state is unchanged (nothing is
    taken, nothing written); allowed, one request and the body's bytes are taken. A clock that
    went backwards refills nothing.
    """
    if limit.off:
        return Verdict(True), state
    if state is None:
        state = Buckets(limit.request_capacity, limit.byte_capacity, now_ms)
    elapsed = max(0, now_ms - state.updated_ms)
    requests, bytes_ = state.requests, state.bytes
    if limit.rate_per_s > 0:
        requests = min(limit.request_capacity, requests + elapsed * limit.rate_per_s / 1000)
    if limit.bytes_per_s > 0:
        bytes_ = min(limit.byte_capacity, bytes_ + elapsed * limit.bytes_per_s / 1000)
    cost = limit.cost(size)
    wait = 0
    if limit.rate_per_s > 0 and requests < 1:
        wait = max(wait, math.ceil((1 - requests) * 1000 / limit.rate_per_s))
    if limit.bytes_per_s > 0 and bytes_ < cost:
        wait = max(wait, math.ceil((cost - bytes_) * 1000 / limit.bytes_per_s))
    if wait > 0:
        return Verdict(False, wait), state
    return Verdict(True), Buckets(requests - (1 if limit.rate_per_s > 0 else 0), bytes_ - cost, now_ms)


def identity(principal: str, api_key_id: str = "") -> str:
    """Whose bucket a request takes from: the IAM principal, the sessions of a role counting as
    the role (``arn:<p>:iam::<account>:role/<name>``), so a caller cannot dodge its limit by naming
    a new session per request; else ``apikey:<id>``; else ``anonymous``."""
    if principal:
        parts = principal.split(":", 5)
        if len(parts) == 6 and parts[2] == "sts" and parts[5].startswith("assumed-role/"):
            role = parts[5].split("/")[1] if parts[5].count("/") >= 2 else ""
            if role:
                return f"arn:{parts[1]}:iam::{parts[4]}:role/{role}"
        return principal
    return f"{API_KEY_PREFIX}{api_key_id}" if api_key_id else ANONYMOUS


@dataclass(frozen=True)
class CallerLimits:
    """The deployment's limit for every caller, and the callers (teams) that have their own."""

    default: CallerLimit = CallerLimit()
    overrides: Mapping[str, CallerLimit] = field(default_factory=dict)

    @property
    def off(self) -> bool:
        return self.default.off and all(limit.off for limit in self.overrides.values())

    def for_caller(self, principal: str, api_key_id: str = "") -> CallerLimit:
        """An override naming the principal (an IAM role entry covers its sessions, as the operator
        list does: ``policy.is_operator``) or the API key; else the default."""
        if principal:
            for entry, limit in self.overrides.items():
                if not entry.startswith(API_KEY_PREFIX) and policy.is_operator(principal, [entry]):
                    return limit
        elif api_key_id:
            return self.overrides.get(f"{API_KEY_PREFIX}{api_key_id}", self.default)
        return self.default

    @classmethod
    def from_settings(cls, s: Settings) -> CallerLimits:
        """The deployment's limits (``caller_*``; ConfigError for a malformed ``caller_limits``)."""
        return cls.parse(CallerLimit(s.caller_rate_per_s, s.caller_burst, s.caller_bytes_per_s,
                                     s.caller_byte_burst), s.caller_limits)

    @classmethod
    def parse(cls, default: CallerLimit, text: str) -> CallerLimits:
        """``text``: comma-separated ``<principal>=<rate>/<burst>[/<bytes per s>[/<byte burst>]]``
        entries (``CallerLimits``); omitted byte limits are the default's. ConfigError when malformed."""
        overrides: dict[str, CallerLimit] = {}
        for raw in text.split(","):
            entry = raw.strip()
            if not entry:
                continue
            who, eq, spec = entry.rpartition("=")
            parts = spec.split("/")
            if not eq or not who or not 2 <= len(parts) <= 4:
                raise ConfigError(f"CallerLimits entry {entry!r} is not <principal>=<rate>/<burst>"
                                  "[/<bytes per second>[/<byte burst>]]")
            try:
                rate, burst = float(parts[0]), int(parts[1])
                bps = int(parts[2]) if len(parts) > 2 else default.bytes_per_s
                byte_burst = int(parts[3]) if len(parts) > 3 else default.byte_burst
            except ValueError as exc:
                raise ConfigError(f"CallerLimits entry {entry!r}: {exc}") from exc
            overrides[who.strip()] = CallerLimit(rate, burst, bps, byte_burst)
        return cls(default, overrides)
