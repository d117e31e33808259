"""Issue 27, item 5: each caller's own request and byte rate at the gateway (pure arithmetic, the
use case over a fake of the shared buckets, and the gateway answering 429 before it parses a body)."""

from __future__ import annotations

import json

import pytest

from sluice.core.caller import Caller
from sluice.core.errors import BackendUnavailable, CallerThrottled, ConfigError
from sluice.core.throttle import CallerLimit, CallerLimits, identity, take
from sluice.gateway.throttle import Throttle, body_size
from sluice_dev.fakes import FakeCallerThrottle
from tests.unit.test_gateway_fakes import Rig

LIMIT = CallerLimit(rate_per_s=2, burst=3, bytes_per_s=1000, byte_burst=4000)
A = "arn:aws:sts::123456789012:assumed-role/team-a/worker-1"
B = "arn:aws:sts::123456789012:assumed-role/team-b/web"


# -- the arithmetic ---------------------------------------------------------------------------------


def test_a_new_caller_has_its_burst_then_its_rate() -> None:
    state = None
    for _ in range(3):  # the burst
        verdict, state = take(state, 0, LIMIT, 10)
        assert verdict.allowed
    verdict, after = take(state, 0, LIMIT, 10)
    assert not verdict.allowed and verdict.retry_after_ms == 500 and after == state  # nothing taken
    verdict, state = take(state, 499, LIMIT, 10)
    assert not verdict.allowed and verdict.retry_after_ms in (1, 2)  # 1 ms short (floating point: 2)
    verdict, state = take(state, 500, LIMIT, 10)  # 2/s: one token every 500 ms
    assert verdict.allowed and state is not None and state.requests == pytest.approx(0)


def test_bytes_are_a_second_bucket_and_a_body_larger_than_the_burst_drains_it() -> None:
    verdict, state = take(None, 0, LIMIT, 3500)
    assert verdict.allowed and state is not None and state.bytes == pytest.approx(500)
    verdict, same = take(state, 0, LIMIT, 1000)
    assert not verdict.allowed and verdict.retry_after_ms == 500 and same == state
    # A 10 MiB body against a 4000-byte burst: passes once the bucket is full, and empties it.
    verdict, state = take(None, 0, LIMIT, 10 << 20)
    assert verdict.allowed and state is not None and state.bytes == 0
    verdict, _ = take(state, 1000, LIMIT, 10 << 20)
    assert not verdict.allowed and verdict.retry_after_ms == 3000 and verdict.retry_after_s == 3


def test_both_buckets_or_neither_and_off_limits_never_refuse() -> None:
    requests_only = CallerLimit(rate_per_s=1, burst=1)
    verdict, state = take(None, 0, requests_only, 1 << 30)
    assert verdict.allowed and state is not None
    assert not take(state, 0, requests_only, 0)[0].allowed
    off = CallerLimit()
    assert off.off and take(None, 0, off, 1 << 30) == (take(None, 0, off, 0)[0], None)
    # A clock that went backwards refills nothing (and refuses nothing it would not refuse).
    _, state = take(None, 10_000, LIMIT, 0)
    _, state = take(state, 10_000, LIMIT, 0)
    _, state = take(state, 10_000, LIMIT, 0)
    assert not take(state, 5_000, LIMIT, 0)[0].allowed
    assert LIMIT.full_after_ms() == 4000 and requests_only.full_after_ms() == 1000


def test_limits_are_not_negative_or_infinite() -> None:
    for bad in (dict(rate_per_s=-1), dict(burst=-1), dict(bytes_per_s=-1), dict(rate_per_s=float("inf"))):
        with pytest.raises(ConfigError):
            CallerLimit(**bad)  # type: ignore[arg-type]


def test_a_roles_sessions_share_one_bucket_and_api_keys_have_their_own() -> None:
    """A caller cannot dodge its limit by naming a new session per request."""
    role = "arn:aws:iam::123456789012:role/team-a"
    assert identity(A) == identity("arn:aws:sts::123456789012:assumed-role/team-a/other") == role
    assert identity(B) != role
    assert identity("arn:aws:iam::123456789012:user/alice") == "arn:aws:iam::123456789012:user/alice"
    assert identity("arn:aws-cn:sts::123456789012:assumed-role/x/y") == "arn:aws-cn:iam::123456789012:role/x"
    assert identity("", "k3y") == "apikey:k3y" and identity("", "") == "anonymous"


def test_caller_limits_parse_and_match_a_role_entry_to_its_sessions() -> None:
    limits = CallerLimits.parse(LIMIT, " arn:aws:iam::123456789012:role/ops/team-a=50/100/2000000 ,"
                                       "apikey:k3y=1/2, arn:aws:iam::123456789012:user/bob=0.5/1/0/0")
    assert limits.for_caller(A) == CallerLimit(50, 100, 2_000_000, 4000)  # byte burst: the default's
    assert limits.for_caller(B) == LIMIT
    assert limits.for_caller("", "k3y") == CallerLimit(1, 2, 1000, 4000)
    assert limits.for_caller("", "other") == LIMIT
    assert limits.for_caller("arn:aws:iam::123456789012:user/bob") == CallerLimit(0.5, 1, 0, 0)
    assert not limits.off and CallerLimits.parse(CallerLimit(), "").off
    for bad in ("nobody", "arn:x=1", "arn:x=1/2/3/4/5", "arn:x=fast/2", "=1/2", "arn:x=-1/2"):
        with pytest.raises(ConfigError):
            CallerLimits.parse(LIMIT, bad)


# -- the use case -----------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.ms = 1_700_000_000_000

    def __call__(self) -> int:
        return self.ms


def _caller(principal: str = "", key: str = "") -> Caller:
    return Caller.verified(principal, principal or key, operators=(), max_caller_priority=5)


def test_one_caller_over_its_limit_is_refused_while_another_is_not() -> None:
    clock = Clock()
    shared = FakeCallerThrottle(clock)
    t = Throttle(shared, CallerLimits(LIMIT), clock=clock)
    for _ in range(3):
        t.check(_caller(A), 100)
    with pytest.raises(CallerThrottled) as refused:
        t.check(_caller("arn:aws:sts::123456789012:assumed-role/team-a/new-session"), 100)
    assert refused.value.details["retry_after_s"] == 1
    assert refused.value.details["caller"] == "arn:aws:iam::123456789012:role/team-a"
    t.check(_caller(B), 100)  # B's own bucket
    t.check(_caller(key="k3y"), 100)
    assert [who for who, _ in shared.calls][-2:] == ["arn:aws:iam::123456789012:role/team-b", "apikey:k3y"]
    clock.ms += 500
    t.check(_caller(A), 100)


def test_without_redis_each_container_keeps_the_limit_itself_then_tries_redis_again() -> None:
    """Neither fail-closed (a Redis outage must not stop the API) nor fail-open (the limit holds,
    per container): docs/security.md, Per-caller throttle."""
    clock = Clock()
    shared = FakeCallerThrottle(clock)
    shared.fail = BackendUnavailable("redis unavailable")
    t = Throttle(shared, CallerLimits(LIMIT), clock=clock, local_for_ms=5_000)
    for _ in range(3):
        t.check(_caller(A), 0)
    with pytest.raises(CallerThrottled):
        t.check(_caller(A), 0)
    shared.fail = None
    clock.ms += 1_000  # still local: Redis is not asked again at once (a slow Redis costs no timeout each)
    t.check(_caller(A), 0)
    assert shared.calls == []
    clock.ms += 4_000
    t.check(_caller(A), 0)
    assert shared.calls == [("arn:aws:iam::123456789012:role/team-a", 0)]


def test_no_limit_means_no_call() -> None:
    shared = FakeCallerThrottle(Clock())
    t = Throttle(shared, CallerLimits(CallerLimit(), {"apikey:k": CallerLimit()}))
    assert t.off
    for _ in range(100):
        t.check(_caller(A), 1 << 20)
    assert shared.calls == []


def test_the_body_size_is_what_the_caller_sent() -> None:
    assert body_size({"body": None}) == 0 and body_size({}) == 0
    assert body_size({"body": "abcd"}) == 4 and body_size({"body": "é"}) == 2
    assert body_size({"body": "AAAA", "isBase64Encoded": True}) == 3


# -- through the gateway: 429 before the body is parsed, nothing written ------------------------------


def test_the_gateway_answers_429_with_retry_after_and_writes_nothing() -> None:
    rig = Rig()
    clock = Clock()
    shared = FakeCallerThrottle(clock)
    rig.api.throttle = Throttle(shared, CallerLimits(CallerLimit(rate_per_s=1, burst=2)), clock=clock)
    path = "/v1/queues/emails/jobs"
    assert rig.call("POST", path, {"payload": {"n": 1}})[0] == 202
    assert rig.call("POST", path, {"payload": {"n": 2}})[0] == 202
    sent = len(rig.log.records)
    for body in ({"payload": {"n": 3}}, None):
        code, headers, doc = rig.call("POST", path, body, raw="{not json" if body is None else None)
        assert (code, doc["code"], headers["retry-after"]) == (429, "CALLER_THROTTLED", "1")
        assert doc["type"] == "urn:sluice:problem:caller-throttled"
    assert len(rig.log.records) == sent  # nothing reached the log: not even a malformed body was read
    # The fixtures' caller is one role; the next second gives it one more request.
    clock.ms += 1000
    assert rig.call("POST", path, {"payload": {"n": 4}})[0] == 202
    assert json.loads(json.dumps(shared.calls[-1]))[0] == "arn:aws:iam::123456789012:role/web-servers"


def test_a_malformed_caller_limits_fails_the_gateways_cold_start() -> None:
    from pydantic import SecretStr

    from sluice.core.config import Settings
    from sluice.entry.gateway import check_settings

    good = Settings(job_id_secret=SecretStr("k" * 32), caller_rate_per_s=1, caller_burst=2,
                    caller_limits="arn:aws:iam::123456789012:role/a=5/10")
    check_settings(good)
    with pytest.raises(ConfigError, match="CallerLimits"):
        check_settings(good.model_copy(update={"caller_limits": "arn:aws:iam::123456789012:role/a=fast"}))
