"""Issue 27: a team's own worker function (infra/worker.yaml) admits only its callers, like every
function of template.yaml (tests/infra/test_template_invokers.py): the Sluice relay's role, the
team's registrar role and the team's safety-net rule; every other principal is denied by an
explicit Deny, whatever its own IAM policy allows. Decided by ``sluice_dev.local.iam`` (the
evaluator the local Lambda service runs) over TeamWorkerPolicy at concrete parameters."""

from __future__ import annotations

import re
from typing import Any

import pytest

from sluice_dev.local.iam import Request, decide
from tests.infra import cfn
from tests.infra.test_team_worker import RES, TEAM
from tests.infra.test_template_invokers import ACCOUNT, STACK, STRANGER_POLICY, VALUES, identity_policies

TEAM_NAME = "media"
RELAY_ROLE = VALUES["RelayFunctionRole.Arn"]  # the Sluice stack's relay role, as deployed
FUNCTION = f"arn:aws:lambda:us-east-1:{ACCOUNT}:function:{STACK}-worker-{TEAM_NAME}"
RULE = f"arn:aws:events:us-east-1:{ACCOUNT}:rule/{STACK}-worker-{TEAM_NAME}-TeamSafetyNet-GHIJKL"
NAMES = {"SluiceStackName": STACK, "TeamName": TEAM_NAME, "AWS::Partition": "aws", "AWS::AccountId": ACCOUNT,
         "TeamWorkerFunction.Arn": FUNCTION, "TeamSafetyNet.Arn": RULE}
EXPORTS = {f"{STACK}-RelayFunctionRoleArn": RELAY_ROLE}


def role(name: str, path: str = "/") -> str:
    return f"arn:aws:iam::{ACCOUNT}:role{path}{name}"


def concrete(value: Any) -> Any:
    if isinstance(value, list):
        return [concrete(v) for v in value]
    if not isinstance(value, dict):
        return value
    if set(value) == {"Fn::GetAtt"}:
        return NAMES[".".join(value["Fn::GetAtt"])]
    if set(value) == {"Fn::Sub"}:
        return re.sub(r"\$\{([^}]+)\}", lambda m: NAMES[m.group(1)], value["Fn::Sub"])
    if set(value) == {"Fn::ImportValue"}:
        return EXPORTS[concrete(value["Fn::ImportValue"])]
    return {k: concrete(v) for k, v in value.items()}


POLICY = concrete(RES["TeamWorkerPolicy"]["Properties"]["PolicyDocument"])
REGISTRAR = role(f"{STACK}-registrar-{TEAM_NAME}", "/sluice/")
STRANGER = role("admin-with-lambda-star")
ALLOW_ALL = [STRANGER_POLICY]  # every refused role is given lambda:* too: only the Deny stops it
INVOKERS: list[tuple[str, str, str | None, bool]] = [
    ("the relay", RELAY_ROLE, None, True),
    ("the team's registrar", REGISTRAR, None, True),
    ("the team's safety-net rule", "events.amazonaws.com", RULE, True),
    ("a stranger allowed lambda:* on *", STRANGER, None, False),
    ("the team's own worker role", role(f"{STACK}-team-{TEAM_NAME}", "/sluice/"), None, False),
    ("another team's worker role", role(f"{STACK}-team-thumbs", "/sluice/"), None, False),
    ("another team's registrar", role(f"{STACK}-registrar-thumbs", "/sluice/"), None, False),
    ("a registrar-named role outside /sluice/", role(f"{STACK}-registrar-{TEAM_NAME}"), None, False),
    ("another stack's relay", role("other-RelayFunctionRole-ABCDEF"), None, False),
    ("the Sluice worker", VALUES["WorkerFunctionRole.Arn"], None, False),
    ("the Sluice gateway", VALUES["GatewayFunctionRole.Arn"], None, False),
    ("a team deployer", role(f"{STACK}-deployer-{TEAM_NAME}"), None, False),
    ("API Gateway", "apigateway.amazonaws.com",
     f"arn:aws:execute-api:us-east-1:{ACCOUNT}:a1b2c3d4e5/live/POST/v1/queues/emails/jobs", False),
    ("another rule", "events.amazonaws.com", f"arn:aws:events:us-east-1:{ACCOUNT}:rule/MyRule", False),
    ("the Sluice safety net", "events.amazonaws.com", VALUES["WorkerSafetyNet.Arn"], False),
    ("events.amazonaws.com, no SourceArn", "events.amazonaws.com", None, False),
]


@pytest.mark.parametrize(("who", "principal", "source", "admitted"), INVOKERS, ids=[i[0] for i in INVOKERS])
def test_the_team_worker_admits_exactly_its_callers(who: str, principal: str, source: str | None,
                                                    admitted: bool) -> None:
    own = [] if not principal.startswith("arn:") else ALLOW_ALL
    decision = decide(Request(principal, "lambda:InvokeFunction", FUNCTION, source), POLICY, own)
    assert decision == ("allow" if admitted else "deny"), (who, decision)


def test_the_admitted_callers_need_no_allow_of_their_own_beyond_what_they_have() -> None:
    """Same account: the resource policy's allow alone admits them; the relay's own policy allows
    the team functions too (so an allow on either side suffices, and neither is a Deny)."""
    for principal in (RELAY_ROLE, REGISTRAR):
        request = Request(principal, "lambda:InvokeFunction", FUNCTION)
        assert decide(request, POLICY, []) == "allow", principal
    assert decide(Request(RELAY_ROLE, "lambda:InvokeFunction", FUNCTION), None,
                  identity_policies(RELAY_ROLE)) == "allow"


def test_one_resource_policy_with_one_deny_and_no_permission() -> None:
    (lid,) = cfn.resources(TEAM, "AWS::Lambda::ResourcePolicy")
    assert RES[lid]["Properties"]["ResourceArn"] == {"Fn::GetAtt": ["TeamWorkerFunction", "Arn"]}
    assert not cfn.resources(TEAM, "AWS::Lambda::Permission")
    denies = [s for s in POLICY["Statement"] if s["Effect"] == "Deny"]
    assert len(denies) == 1 and denies[0]["Principal"] == "*"
    assert {"lambda:InvokeFunction", "lambda:InvokeFunctionUrl"} <= set(denies[0]["Action"])


def test_the_relay_role_is_exported_and_the_registrar_role_named_as_the_team_stack_names_it() -> None:
    out = cfn.template()["Outputs"]["RelayFunctionRoleArn"]
    assert out["Value"] == {"Fn::GetAtt": ["RelayFunctionRole", "Arn"]}
    assert out["Export"]["Name"] == {"Fn::Sub": "${AWS::StackName}-RelayFunctionRoleArn"}
    registrar = cfn.load(cfn.ROOT / "infra" / "team.yaml")["Resources"]["RegistrarRole"]["Properties"]
    assert registrar["Path"] == "/sluice/"
    assert registrar["RoleName"] == {"Fn::Sub": "${SluiceStackName}-registrar-${TeamName}"}
    assert role(concrete(registrar["RoleName"]), registrar["Path"]) == REGISTRAR
