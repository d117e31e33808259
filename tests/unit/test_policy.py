from __future__ import annotations

import random

import pytest

from sluice.core import policy


def test_backoff_full_jitter_stays_under_exponential_ceiling() -> None:
    rng = random.Random(7)
    for attempt in range(1, 12):
        ceiling = min(policy.MAX_BACKOFF_MS, policy.BASE_BACKOFF_MS * 2 ** (attempt - 1))
        draws = [policy.backoff_ms(attempt, rng=rng) for _ in range(200)]
        assert all(0 <= d <= ceiling for d in draws)
        # full jitter: draws spread over the range, not bunched at the ceiling
        assert min(draws) < ceiling / 4 and max(draws) > ceiling * 3 / 4


def test_backoff_rejects_attempt_zero() -> None:
    with pytest.raises(ValueError):
        policy.backoff_ms(0)


@pytest.mark.parametrize(("attempts", "max_attempts", "permanent", "expected"), [
    (1, 5, False, "retry"), (4, 5, False, "retry"), (5, 5, False, "dead"), (1, 5, True, "dead"),
    (1, 1, False, "dead"),
])
def test_retry_or_dead(attempts: int, max_attempts: int, permanent: bool, expected: str) -> None:
    assert policy.retry_or_dead(attempts, max_attempts, permanent=permanent) == expected


def test_token_bucket_refills_at_rate_and_caps_at_burst() -> None:
    b = policy.Bucket(tokens=0, updated_ms=0)
    b = policy.refill(b, 500, rate_per_s=100, burst=20)
    assert b.tokens == 20  # 50 earned, capped at burst
    granted, b = policy.take(b, 30)
    assert granted == 20 and b.tokens == 0
    b = policy.refill(b, 600, rate_per_s=100, burst=20)
    assert b.tokens == pytest.approx(10)


def test_watermark_hysteresis() -> None:
    assert policy.watermark_paused(101, 100, 50, currently_paused=False) is True
    assert policy.watermark_paused(100, 100, 50, currently_paused=False) is True  # at the mark
    assert policy.watermark_paused(99, 100, 50, currently_paused=False) is False
    assert policy.watermark_paused(80, 100, 50, currently_paused=True) is True
    assert policy.watermark_paused(49, 100, 50, currently_paused=True) is False
    assert policy.watermark_paused(10_000, 0, 0, currently_paused=False) is False


def test_dispatch_count_respects_in_flight_room() -> None:
    assert policy.dispatch_count(ready=0, leased=0, max_in_flight=0, per_invocation=10) == 0
    assert policy.dispatch_count(ready=95, leased=0, max_in_flight=0, per_invocation=10) == 10
    assert policy.dispatch_count(ready=95, leased=18, max_in_flight=20, per_invocation=10) == 1
    assert policy.dispatch_count(ready=95, leased=20, max_in_flight=20, per_invocation=10) == 0


def test_lambda_never_leases_what_it_cannot_finish() -> None:
    assert policy.can_finish_before(5_000, 10_000, 1_000) is False
    assert policy.can_finish_before(12_000, 10_000, 1_000) is True


def test_grant_margin_is_the_configured_margin_capped_by_what_a_healthy_lease_keeps() -> None:
    # 30 s lease renewed every 10 s keeps >= 20 s: a 5 s margin applies in full.
    assert policy.grant_margin_ms(30_000, 5_000) == 5_000
    # 2 s lease keeps >= 1333 ms between renewals: the margin is capped at half of that.
    assert policy.grant_margin_ms(2_000, 5_000) == 666
    assert policy.grant_margin_ms(2_000, 5_000, heartbeat_fraction=0.5) == 500
    assert policy.grant_margin_ms(30_000, 0) == 0


def test_can_grant_needs_the_margin_left_and_never_grants_a_lapsed_lease() -> None:
    assert policy.can_grant(20_000, 30_000, 5_000)
    assert policy.can_grant(5_000, 30_000, 5_000)
    assert not policy.can_grant(4_999, 30_000, 5_000)  # a late grant could outrun the lease
    assert not policy.can_grant(0, 30_000, 0) and not policy.can_grant(-1, 30_000, 0)
    assert policy.can_grant(1, 30_000, 0)
    # a healthy short lease, just before its renewal, is still granted
    assert policy.can_grant(2_000 * 2 / 3 - 1, 2_000, 5_000)


def test_share_budget_gives_every_queue_a_turn_before_a_second() -> None:
    from sluice.core.policy import share_budget

    wanted = {"flood": 50, "a": 2, "b": 1, "idle": 0}
    assert share_budget(wanted, 4) == {"flood": 2, "a": 1, "b": 1, "idle": 0}
    assert share_budget(wanted, 4, start=1) == {"flood": 1, "a": 2, "b": 1, "idle": 0}
    assert share_budget(wanted, 1000) == wanted  # never more than wanted
    assert share_budget(wanted, 0) == dict.fromkeys(wanted, 0)
    assert share_budget({}, 5) == {}
    assert sum(share_budget(wanted, 7, start=3).values()) == 7


@pytest.mark.parametrize(("principal", "expected"), [
    ("arn:aws:iam::123456789012:role/ops/sluice-operators", True),  # the entry itself
    ("arn:aws:sts::123456789012:assumed-role/sluice-operators/alice", True),  # a session of it
    ("arn:aws:iam::123456789012:user/root-ops", True),
    ("arn:aws:sts::123456789012:assumed-role/sluice-operators-2/alice", False),
    ("arn:aws:sts::999999999999:assumed-role/sluice-operators/alice", False),  # another account
    ("arn:aws-cn:sts::123456789012:assumed-role/sluice-operators/alice", False),  # another partition
    ("arn:aws:sts::123456789012:federated-user/sluice-operators", False),
    ("arn:aws:iam::123456789012:user/someone", False),
    ("", False), ("sluice-operators", False), ("arn:aws:sts::123456789012:assumed-role", False),
])
def test_operators_are_exact_principals_or_sessions_of_their_roles(principal: str, expected: bool) -> None:
    from sluice.core.policy import is_operator, priority_allowed

    operators = ["arn:aws:iam::123456789012:role/ops/sluice-operators",
                 "arn:aws:iam::123456789012:user/root-ops"]
    assert is_operator(principal, operators) is expected
    assert priority_allowed(9, principal, max_caller_priority=5, operators=operators) is expected
    assert priority_allowed(5, principal, max_caller_priority=5, operators=operators)
