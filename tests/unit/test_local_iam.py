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
