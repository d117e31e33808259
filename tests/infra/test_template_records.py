"""Issue 27, items 4 and 7: Kafka with TLS and IAM by default, and retentions that honour the life
bound and the job id key window (sluice.core.limits), as CloudFormation's Rules decide them."""

from __future__ import annotations

from typing import Any

import pytest

from sluice.core import limits
from tests.infra.test_template import RES, T, props

DEFAULTS = {name: str(p.get("Default", "")) for name, p in T["Parameters"].items()}
# Required, without a default (the rule DeployersAreNamed; tests/infra/test_template_invokers.py).
DEFAULTS["DeployerPrincipalArns"] = "arn:aws:iam::123456789012:role/infra-deploy"


def _eval(node: Any, params: dict[str, str]) -> Any:
    """The Rules' functions CloudFormation evaluates before it creates anything."""
    if isinstance(node, list):
        return [_eval(n, params) for n in node]
    if not isinstance(node, dict):
        return str(node)
    (fn, arg), = node.items()
    if fn == "Ref":
        return params[arg]
    args = _eval(arg, params)
    if fn == "Fn::Equals":
        return args[0] == args[1]
    if fn == "Fn::Not":
        return not args[0]
    if fn == "Fn::And":
        return all(args)
    if fn == "Fn::Or":
        return any(args)
    if fn == "Fn::Contains":
        return args[1] in args[0]
    if fn == "Fn::Join":  # of a CommaDelimitedList parameter, given here as its text
        return args[0].join(args[1].split(",")) if isinstance(args[1], str) else args[0].join(args[1])
    raise AssertionError(f"no evaluator for {fn}")


def refused(**given: object) -> list[str]:
    """The AssertDescriptions of every rule the parameters fail (empty: CloudFormation goes on)."""
    params = {**DEFAULTS, **{k: str(v) for k, v in given.items()}}
    out = []
    for rule in T["Rules"].values():
        if "RuleCondition" in rule and not _eval(rule["RuleCondition"], params):
            continue
        out += [a["AssertDescription"] for a in rule["Assertions"] if not _eval(a["Assert"], params)]
    return out


def in_range(name: str, value: int) -> bool:
    p = T["Parameters"][name]
    if "AllowedValues" in p:
        return str(value) in {str(v) for v in p["AllowedValues"]}
    return int(p.get("MinValue", value)) <= value <= int(p.get("MaxValue", value))


# ------------------------------------------------------------------ item 4: Kafka security


def test_kafka_security_defaults_to_iam_and_the_functions_get_what_the_parameter_says() -> None:
    p = T["Parameters"]["KafkaSecurity"]
    assert p["Default"] == "iam" and set(p["AllowedValues"]) == {"iam", "tls", "plaintext"}
    env = T["Globals"]["Function"]["Environment"]["Variables"]
    assert env["SLUICE_KAFKA_SECURITY"] == {"Ref": "KafkaSecurity"}  # every function's
    assert RES["KafkaTopics"]["Properties"]["Security"] == {"Ref": "KafkaSecurity"}


def test_named_bootstrap_servers_without_a_cluster_arn_need_an_explicit_opt_out_of_iam() -> None:
    servers = "b-1.example:9098,b-2.example:9098"
    # Where the brokers are, as ExistingKafkaNeedsItsNetwork asks of any named cluster.
    named = {"KafkaBootstrapServers": servers, "KafkaSecurityGroupId": "sg-0123abcd"}
    arn = "arn:aws:kafka:us-east-1:123456789012:cluster/c/abc-1"
    assert refused() == []  # Sluice's own MSK Serverless cluster: IAM over TLS
    (why,) = refused(**named)  # was plaintext by default before issue 27
    assert "KafkaSecurity=plaintext" in why
    assert refused(**named, KafkaClusterArn=arn) == []
    assert refused(**named, KafkaSecurity="tls") == []
    assert refused(**named, KafkaSecurity="plaintext") == []  # the opt-in
    assert refused(KafkaSecurity="plaintext") != []  # the created cluster speaks IAM only
    assert refused(**named, KafkaClusterArn=arn, KafkaSecurity="plaintext") != []


# ------------------------------------------------------------------ item 7: the key window


def test_the_job_id_key_rotates_as_the_key_window_in_core_says() -> None:
    schedule = props("JobIdSecretRotation")["RotationRules"]["ScheduleExpression"]
    assert schedule == f"rate({limits.KEY_ROTATION_DAYS} days)"
    assert limits.KEY_WINDOW_MS >= limits.JOB_LIFE_MS


@pytest.mark.parametrize("hours", [24, 168, 335, 336, 720, 721, 8760])
def test_kafka_retention_is_bounded_by_the_life_bound_and_the_key_window(hours: int) -> None:
    ok = in_range("KafkaRetentionHours", hours)
    assert ok == (limits.life_bound_problems(hours, 14) == []), hours
    assert in_range("KafkaRetentionHours", int(DEFAULTS["KafkaRetentionHours"]))


def test_retention_covers_the_longest_delay_plus_the_longest_hold_parked_or_not() -> None:
    """Issue 28, item 6: a parked record leaves the shared partitions, but a replay after a Redis
    loss may read it again from Kafka (the checkpoint stays at or below the oldest unfinished job),
    so Kafka must keep every record for the longest delay plus the longest hold, parking or not.
    The template's floor and default, and `sluice check`, say so; the parking lot's TTL and the
    sweep's life check use the same bound (tests/backends/test_parking_lot.py)."""
    from sluice.core.models import MAX_DELAY_MS

    every_hold_h = -(-(MAX_DELAY_MS + limits.MAX_HOLD_MS) // limits.HOUR_MS)
    assert limits.JOB_LIFE_MS >= MAX_DELAY_MS + limits.MAX_HOLD_MS
    assert T["Parameters"]["KafkaRetentionHours"]["MinValue"] >= every_hold_h
    assert int(DEFAULTS["KafkaRetentionHours"]) >= every_hold_h
    assert limits.life_bound_problems(every_hold_h - 1, 14) != []  # one hour short: refused
    assert limits.life_bound_problems(168, 14) != []  # Kafka's own default, 7 days: refused


@pytest.mark.parametrize("days", [1, 3, 7, 14, 30, 365])
def test_item_retention_outlives_the_life_bound(days: int) -> None:
    deployable = in_range("RetentionDays", days) and refused(RetentionDays=days) == []
    assert deployable == (limits.life_bound_problems(336, days) == []), days


def test_every_parameter_value_the_template_accepts_passes_sluice_check() -> None:
    """Item 7: no retention the parameters allow outlives the key window (sluice check refuses one)."""
    for hours in range(1, 9000):
        if not in_range("KafkaRetentionHours", hours):
            continue
        for days in T["Parameters"]["RetentionDays"]["AllowedValues"]:
            if refused(RetentionDays=days) == []:
                assert limits.life_bound_problems(hours, int(days)) == [], (hours, days)
