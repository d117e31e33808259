"""sluice_dev.local.iam: IAM's decision over policy documents, as the local Lambda service makes it."""

from __future__ import annotations

from typing import Any

import pytest

from sluice_dev.local.iam import Request, decide

FN = "arn:aws:lambda:us-east-1:000000000000:function:sluice-internal"
API = "arn:aws:execute-api:us-east-1:000000000000:local/*/*/v1/queues/*"
WORKER = "arn:aws:iam::000000000000:role/sluice-WorkerFunctionRole"
TEAM = "arn:aws:iam::000000000000:role/sluice/sluice-team-media"
OTHER = "arn:aws:iam::000000000000:role/someone-else"


def doc(*statements: dict[str, Any]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": list(statements)}


def invoke(principal: str, source_arn: str | None = None) -> Request:
    return Request(principal, "lambda:InvokeFunction", FN, source_arn)


PUBLIC = doc(
    {
        "Effect": "Allow",
        "Principal": {"Service": "apigateway.amazonaws.com"},
        "Action": "lambda:InvokeFunction",
        "Resource": FN,
        "Condition": {"ArnLike": {"aws:SourceArn": API}},
    },
    {
        "Effect": "Deny",
        "Principal": "*",
        "Action": ["lambda:InvokeFunction"],
        "Resource": FN,
        "Condition": {"ArnNotLike": {"aws:SourceArn": API}},
    },
)
INTERNAL = doc(
    {"Effect": "Allow", "Principal": {"AWS": [WORKER]}, "Action": "lambda:InvokeFunction", "Resource": FN},
    {
        "Effect": "Allow",
        "Principal": {"AWS": "arn:aws:iam::000000000000:root"},
        "Action": "lambda:InvokeFunction",
        "Resource": FN,
        "Condition": {"ArnLike": {"aws:PrincipalArn": "arn:aws:iam::000000000000:role/sluice/sluice-team-*"}},
    },
    {
        "Effect": "Deny",
        "Principal": "*",
        "Action": "lambda:InvokeFunction",
        "Resource": FN,
        "Condition": {
            "ArnNotLike": {
                "aws:PrincipalArn": [WORKER, "arn:aws:iam::000000000000:role/sluice/sluice-team-*"]
            }
        },
    },
)
ALLOW_ALL = doc({"Effect": "Allow", "Action": "lambda:*", "Resource": "*"})


def test_api_gateway_with_the_apis_source_arn_is_admitted() -> None:
    ok = "arn:aws:execute-api:us-east-1:000000000000:local/live/POST/v1/queues/q/jobs"
    assert decide(invoke("apigateway.amazonaws.com", ok), PUBLIC) == "allow"


def test_api_gateway_for_another_api_or_route_is_denied() -> None:
    for arn in (
        "arn:aws:execute-api:us-east-1:000000000000:other/live/POST/v1/queues/q/jobs",
        "arn:aws:execute-api:us-east-1:000000000000:local/live/POST/v1/admin/queues/q/pause",
    ):
        assert decide(invoke("apigateway.amazonaws.com", arn), PUBLIC) == "deny"


def test_a_direct_invoke_has_no_source_arn_so_the_deny_wins_over_the_callers_own_allow() -> None:
    """A role of the account whose identity policy allows lambda:* on "*": an allow alone would let
    it in (same account), the resource policy's Deny does not."""
    assert decide(invoke(WORKER), PUBLIC, [ALLOW_ALL]) == "deny"
    assert decide(invoke(WORKER), doc(PUBLIC["Statement"][0]), [ALLOW_ALL]) == "allow"  # the allow alone


def test_the_internal_function_admits_its_roles_and_team_roles_only() -> None:
    assert decide(invoke(WORKER), INTERNAL) == "allow"
    assert decide(invoke(TEAM), INTERNAL) == "allow"
    assert decide(invoke(OTHER), INTERNAL, [ALLOW_ALL]) == "deny"
    assert decide(invoke("arn:aws:iam::000000000000:role/sluice-team-media"), INTERNAL) == "deny"  # no path
    assert (
        decide(invoke("apigateway.amazonaws.com", API), INTERNAL) == "deny"
    )  # a service has no PrincipalArn


def test_without_any_allow_the_call_is_implicitly_denied() -> None:
    assert decide(invoke(OTHER), None) == "implicit-deny"
    assert (
        decide(
            invoke(OTHER),
            doc(
                {
                    "Effect": "Allow",
                    "Principal": {"AWS": WORKER},
                    "Action": "lambda:InvokeFunction",
                    "Resource": FN,
                }
            ),
        )
        == "implicit-deny"
    )


def test_an_identity_allow_is_enough_within_the_account_and_its_deny_wins() -> None:
    mine = doc({"Effect": "Allow", "Action": "lambda:InvokeFunction", "Resource": FN + "*"})
    assert decide(invoke(OTHER), None, [mine]) == "allow"
    assert (
        decide(invoke(OTHER), None, [mine, doc({"Effect": "Deny", "Action": "*", "Resource": "*"})]) == "deny"
    )
    assert (
        decide(
            invoke(OTHER),
            None,
            [doc({"Effect": "Allow", "Action": "lambda:InvokeFunction", "Resource": FN + "-other"})],
        )
        == "implicit-deny"
    )


def test_another_accounts_root_does_not_name_this_accounts_roles() -> None:
    theirs = doc(
        {
            "Effect": "Allow",
            "Principal": {"AWS": "arn:aws:iam::111111111111:root"},
            "Action": "lambda:InvokeFunction",
            "Resource": FN,
        }
    )
    assert decide(invoke(OTHER), theirs) == "implicit-deny"


def test_if_exists_and_string_operators() -> None:
    cond = doc(
        {
            "Effect": "Allow",
            "Principal": "*",
            "Action": "lambda:InvokeFunction",
            "Resource": FN,
            "Condition": {
                "ArnLikeIfExists": {"aws:SourceArn": API},
                "StringEquals": {"aws:PrincipalArn": WORKER},
            },
        }
    )
    assert decide(invoke(WORKER), cond) == "allow"
    assert decide(invoke(OTHER), cond) == "implicit-deny"


@pytest.mark.parametrize(
    "statement",
    [
        {
            "Effect": "Allow",
            "NotPrincipal": {"AWS": WORKER},
            "Action": "lambda:InvokeFunction",
            "Resource": FN,
        },
        {
            "Effect": "Allow",
            "Principal": "*",
            "Action": "lambda:InvokeFunction",
            "Resource": FN,
            "Condition": {"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}},
        },
        {"Effect": "Maybe", "Principal": "*", "Action": "lambda:InvokeFunction", "Resource": FN},
    ],
)
def test_what_is_not_understood_is_refused_not_guessed(statement: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        decide(invoke(WORKER), doc(statement))


def test_not_action_and_not_resource_apply_to_everything_but_what_they_list() -> None:
    """The vended team role's boundary denies S3 outside Sluice's bucket with NotResource."""
    other = FN.replace("internal", "other")
    deny_others = {"Effect": "Deny", "NotResource": FN, "Action": "lambda:InvokeFunction"}
    allow_all = {"Effect": "Allow", "Action": "lambda:*", "Resource": "*"}
    assert decide(invoke(WORKER), None, [doc(allow_all, deny_others)]) == "allow"
    elsewhere = Request(WORKER, "lambda:InvokeFunction", other)
    assert decide(elsewhere, None, [doc(allow_all, deny_others)]) == "deny"
    not_invoke = {"Effect": "Allow", "NotAction": "lambda:InvokeFunction", "Resource": "*"}
    assert decide(invoke(WORKER), None, [doc(not_invoke)]) == "implicit-deny"
    assert decide(Request(WORKER, "lambda:GetFunction", FN), None, [doc(not_invoke)]) == "allow"


def test_null_tells_a_present_key_from_an_absent_one() -> None:
    """The stream readers' Deny (issue 27): only an IAM principal (aws:PrincipalArn present) other
    than the function's own role; a service principal carries no aws:PrincipalArn."""
    own = "arn:aws:iam::111122223333:role/stack-EventsFunctionRole-X"
    policy = {
        "Statement": [
            {
                "Effect": "Deny",
                "Principal": "*",
                "Action": "lambda:InvokeFunction",
                "Resource": "*",
                "Condition": {
                    "Null": {"aws:PrincipalArn": "false"},
                    "ArnNotEquals": {"aws:PrincipalArn": own},
                },
            }
        ]
    }
    star = [{"Statement": [{"Effect": "Allow", "Action": "lambda:*", "Resource": "*"}]}]
    fn = "arn:aws:lambda:us-east-1:111122223333:function:events"
    stranger = Request("arn:aws:iam::111122223333:role/admin", "lambda:InvokeFunction", fn)
    assert decide(stranger, policy, star) == "deny"
    assert decide(Request(own, "lambda:InvokeFunction", fn), policy, star) == "allow"
    assert decide(Request("events.amazonaws.com", "lambda:InvokeFunction", fn), policy) == "implicit-deny"
    absent = {"Statement": [{**policy["Statement"][0], "Condition": {"Null": {"aws:SourceArn": "true"}}}]}
    assert decide(stranger, absent, star) == "deny"  # a direct invoke has no SourceArn


def test_the_local_stack_reads_the_schedule_rules_and_their_callers() -> None:
    """template.yaml's AWS::Events::Rule schedules (issue 27: no SAM Schedule events) are each
    function's schedules, and each rule's ARN is what its function's resource policy admits."""
    from sluice_dev.local import access
    from sluice_dev.local.template import load

    deploy = load(overrides={"RelayPartitionGroups": "2"})
    relay = deploy.functions["RelayFunction"].schedules
    assert [(s.name, s.expression, s.enabled) for s in relay] == [
        ("RelayTick1", "rate(1 minute)", True),
        ("RelayTick2", "rate(1 minute)", True),
        ("RelayTick3", "rate(1 minute)", False),
        ("RelayTick4", "rate(1 minute)", False),
    ]
    (net,) = deploy.functions["WorkerFunction"].schedules
    assert net.name == "WorkerSafetyNet" and net.input["source"] == "safety-net"
    names = access.names_for(deploy, {"RelayFunction": "sluice-relay", "WorkerFunction": "sluice-worker"})
    local = access.Access()
    for lid, name in (("RelayFunction", "sluice-relay"), ("WorkerFunction", "sluice-worker")):
        local.add_function(deploy, deploy.functions[lid], name, names)
    local.check("sluice-relay", access.rule_caller(deploy.stack_name, "RelayTick2"))
    local.check("sluice-worker", access.rule_caller(deploy.stack_name, "WorkerSafetyNet"))
    for function, caller in (
        ("sluice-relay", access.rule_caller(deploy.stack_name, "WorkerSafetyNet")),
        ("sluice-relay", access.EVENTS),
        ("sluice-worker", access.rule_caller(deploy.stack_name, "RelayTick1")),
        ("sluice-worker", access.Caller(access.role_arn(deploy.stack_name, "GatewayFunctionRole"))),
    ):
        with pytest.raises(access.AccessDenied):
            local.check(function, caller)
    local.check("sluice-worker", access.Caller(access.role_arn(deploy.stack_name, "RelayFunctionRole")))
