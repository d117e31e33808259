"""Issue 27, item 1: one function per kind of caller, each admitting only its caller.

Every invoker a deployment has (API Gateway on each route, the Scheduler role, the worker, relay,
countdown and teams' workers, every other function's role, a stranger whose own IAM policy allows
``lambda:*`` on ``*``) against every function, decided by IAM's rules (``sluice_dev.local.iam``, the
same evaluator the local Lambda service runs) over the template's resource policies and the
callers' own policies after the SAM transform: each function admits exactly its caller.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import pytest

from sluice_dev.local.iam import Request, decide
from tests.infra import cfn
from tests.infra.test_template import RES, T

PARAMS = cfn.parameters(T)
CONDS = cfn.conditions(T, PARAMS)
ACCOUNT, STACK = PARAMS["AWS::AccountId"], PARAMS["AWS::StackName"]
API_ID = "a1b2c3d4e5"
SPLIT = {
    "GatewayFunction": "gateway",
    "OperatorFunction": "operator",
    "InternalFunction": "internal",
    "FiringsFunction": "firings",
}


def role(name: str, path: str = "/") -> str:
    return f"arn:aws:iam::{ACCOUNT}:role{path}{name}"


def function_arn(logical_id: str) -> str:
    return f"arn:aws:lambda:us-east-1:{ACCOUNT}:function:{STACK}-{SPLIT.get(logical_id, logical_id)}"


@cache
def transformed() -> dict[str, Any]:
    return cfn.transformed()


def _values() -> dict[str, Any]:
    out: dict[str, Any] = {**PARAMS, "Api": API_ID}
    for lid, res in transformed()["Resources"].items():
        if res["Type"] == "AWS::IAM::Role":
            out[f"{lid}.Arn"] = role(f"{STACK}-{lid}-ABCDEF")  # CloudFormation's generated name
        elif res["Type"] == "AWS::Lambda::Function":
            out[f"{lid}.Arn"], out[lid] = function_arn(lid), function_arn(lid).rsplit(":", 1)[-1]
    return out


VALUES = _values()


def concrete(value: Any) -> Any:
    """``value`` with every intrinsic replaced by what this deploy would make of it."""
    value = cfn.resolve(value, CONDS)
    if isinstance(value, list):
        return [concrete(v) for v in value]
    if not isinstance(value, dict):
        return value
    if set(value) == {"Ref"}:
        return _named(value["Ref"])
    if set(value) == {"Fn::GetAtt"}:
        return _named(".".join(value["Fn::GetAtt"]))
    if set(value) == {"Fn::Sub"}:
        arg = value["Fn::Sub"]
        text, local = (
            (arg, {}) if isinstance(arg, str) else (arg[0], {k: concrete(v) for k, v in arg[1].items()})
        )
        return re.sub(r"\$\{([^}]+)\}", lambda m: str(local.get(m.group(1)) or _named(m.group(1))), text)
    if len(value) == 1 and next(iter(value)).startswith("Fn::"):
        return f"<{next(iter(value))}>"  # Select, Split, Join: Kafka's ARNs, nothing a Lambda invoke reads
    return {k: concrete(v) for k, v in value.items()}


def _named(name: str) -> str:
    """A function's or role's ARN as deployed; anything else (a table, a bucket) a placeholder."""
    return str(VALUES.get(name, f"<{name}>"))


def resource_policies() -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for res in cfn.resources(T, "AWS::Lambda::ResourcePolicy").values():
        (target, attribute) = res["Properties"]["ResourceArn"]["Fn::GetAtt"]
        assert attribute == "Arn"
        out.setdefault(target, []).append(concrete(res["Properties"]["PolicyDocument"]))
    return out


def identity_policies(role_arn: str) -> list[dict[str, Any]]:
    """The role's own policies (inline, after the SAM transform, and AWS::IAM::RolePolicy)."""
    docs: list[dict[str, Any]] = []
    for lid, res in transformed()["Resources"].items():
        if res["Type"] == "AWS::IAM::Role" and VALUES[f"{lid}.Arn"] == role_arn:
            docs += [p["PolicyDocument"] for p in concrete(res["Properties"].get("Policies", []))]
        if (
            res["Type"] == "AWS::IAM::RolePolicy"
            and VALUES[f"{res['Properties']['RoleName']['Ref']}.Arn"] == role_arn
        ):
            docs.append(concrete(res["Properties"]["PolicyDocument"]))
    return docs


def api(method: str, path: str, api_id: str = API_ID) -> tuple[str, str]:
    return "apigateway.amazonaws.com", f"arn:aws:execute-api:us-east-1:{ACCOUNT}:{api_id}/live/{method}{path}"


def sam_role(function: str) -> tuple[str, None]:
    return VALUES[f"{function}Role.Arn"], None


TEAM = role(f"{STACK}-team-media", "/sluice/"), None
STRANGER = role("admin-with-lambda-star"), None
STRANGER_POLICY = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": "lambda:*", "Resource": "*"}],
}
PUBLIC_ROUTES = [
    api("POST", "/v1/queues/emails/jobs"),
    api("POST", "/v1/queues/emails/jobs/batch"),
    api("GET", "/v1/queues/emails"),
    api("GET", "/v1/jobs/j1"),
    api("DELETE", "/v1/jobs/j1"),
    api("GET", "/v1/openapi.json"),
]
ADMIN_ROUTES = [
    api("DELETE", "/v1/admin/queues/emails/dlq"),
    api("POST", "/v1/admin/queues/emails/pause"),
    api("POST", "/v1/admin/queues/emails/schedules"),
    api("GET", "/v1/admin/queues"),
]
# Every invoker and the one function it may invoke (None: none of the four).
INVOKERS: list[tuple[str, tuple[str, str | None], str | None]] = [
    *[(f"API Gateway {arn.split('/live/')[1]}", (p, arn), "GatewayFunction") for p, arn in PUBLIC_ROUTES],
    *[(f"API Gateway {arn.split('/live/')[1]}", (p, arn), "OperatorFunction") for p, arn in ADMIN_ROUTES],
    ("another API's route", api("POST", "/v1/queues/emails/jobs", "zzzzzzzzzz"), None),
    ("another API's admin route", api("DELETE", "/v1/admin/queues/emails/dlq", "zzzzzzzzzz"), None),
    ("API Gateway, no SourceArn", ("apigateway.amazonaws.com", None), None),
    ("Scheduler's role", (VALUES["SchedulerInvokeRole.Arn"], None), "FiringsFunction"),
    ("the worker", sam_role("WorkerFunction"), "InternalFunction"),
    ("the relay", sam_role("RelayFunction"), "InternalFunction"),
    ("the countdown", sam_role("CountdownFunction"), "InternalFunction"),
    ("a team's worker", TEAM, "InternalFunction"),
    ("another stack's team worker", (role("other-stack-team-media", "/sluice/"), None), None),
    ("a team-named role outside /sluice/", (role(f"{STACK}-team-media"), None), None),
    ("the events function", sam_role("EventsFunction"), None),
    *[(f"the {name} function", sam_role(f"{lid}"), None) for lid, name in SPLIT.items()],
    ("a stranger allowed lambda:* on *", STRANGER, None),
    ("events.amazonaws.com", ("events.amazonaws.com", None), None),
    ("scheduler.amazonaws.com itself", ("scheduler.amazonaws.com", None), None),
]


def _decide(function: str, principal: str, source_arn: str | None) -> str:
    own = [STRANGER_POLICY] if principal == STRANGER[0] else identity_policies(principal)
    (policy,) = resource_policies()[function]
    return decide(
        Request(principal, "lambda:InvokeFunction", function_arn(function), source_arn), policy, own
    )


@pytest.mark.parametrize("function", sorted(SPLIT))
@pytest.mark.parametrize(("who", "caller", "allowed"), INVOKERS, ids=[i[0] for i in INVOKERS])
def test_each_function_admits_exactly_its_caller(
    function: str, who: str, caller: tuple[str, str | None], allowed: str | None
) -> None:
    decision = _decide(function, *caller)
    if function == allowed:
        assert decision == "allow", (who, function)
    else:  # refused by an explicit deny: no identity policy of the account can get it through
        assert decision == "deny", (who, function, decision)


def test_the_callers_own_policies_allow_the_function_they_call() -> None:
    """An allow in the caller's own policy is what a same-account call needs when the resource
    policy names the account (teams) or a deny-only policy; Sluice's own callers have both."""
    for caller, function in (
        (sam_role("WorkerFunction"), "InternalFunction"),
        (sam_role("RelayFunction"), "InternalFunction"),
        (sam_role("CountdownFunction"), "InternalFunction"),
        ((VALUES["SchedulerInvokeRole.Arn"], None), "FiringsFunction"),
    ):
        request = Request(caller[0], "lambda:InvokeFunction", function_arn(function))
        assert decide(request, None, identity_policies(caller[0])) == "allow", (caller, function)


def test_no_allow_only_permission_is_left_on_any_split_function() -> None:
    """AWS::Lambda::Permission is allow-only (and must not be mixed with ResourcePolicy): none names
    the four functions, each of which has one resource policy denying every other principal."""
    for res in cfn.resources(T, "AWS::Lambda::Permission").values():
        target = res["Properties"]["FunctionName"]
        assert not any(cfn.is_getatt(target, f) or cfn.is_ref(target, f) for f in SPLIT), res
    assert "GatewayApiPermission" not in RES
    policies = resource_policies()
    for function in SPLIT:
        (policy,) = policies[function]
        denies = [s for s in policy["Statement"] if s["Effect"] == "Deny"]
        assert len(denies) == 1 and denies[0]["Principal"] == "*", function
        assert "lambda:InvokeFunction" in denies[0]["Action"], function
        assert set(denies[0]["Condition"]) <= {"ArnNotLike", "ArnNotEquals"}, function


def test_the_functions_are_named_and_each_runs_its_own_entry() -> None:
    for lid, name in SPLIT.items():
        p = RES[lid]["Properties"]
        assert p["FunctionName"] == {"Fn::Sub": f"${{AWS::StackName}}-{name}"}
        assert p["CodeUri"] == f"functions/{name}/"
        app = (cfn.ROOT / "functions" / name / "app.py").read_text()
        assert re.search(rf"from sluice\.entry\.{name} import lambda_function", app), name


def test_the_public_function_no_longer_holds_scheduler_or_schedule_rights() -> None:
    from tests.infra.test_template import _function_roles
    from tests.infra.test_template_security import _statements

    roles = _function_roles()
    for lid in ("GatewayFunction", "InternalFunction", "FiringsFunction"):
        for st in _statements(roles[lid]):
            assert not any(a.startswith("scheduler:") or a == "iam:PassRole" for a in st["Action"]), lid
            if st["Resource"] == {"Fn::GetAtt": ["SchedulesTable", "Arn"]}:
                assert lid == "FiringsFunction" and st["Action"] == ["dynamodb:GetItem"], lid
    for lid in ("OperatorFunction", "InternalFunction", "FiringsFunction"):  # the public API's alone
        for st in _statements(roles[lid]):
            assert (
                st["Resource"] != {"Fn::GetAtt": ["IdempotencyTable", "Arn"]} or lid == "OperatorFunction"
            ), lid


def test_internal_callers_are_told_the_internal_function_and_its_name_is_exported() -> None:
    for lid in ("WorkerFunction", "RelayFunction", "CountdownFunction"):
        env = RES[lid]["Properties"]["Environment"]["Variables"]
        assert env["SLUICE_INTERNAL_FUNCTION_NAME"] == {"Ref": "InternalFunction"}, lid
        assert "SLUICE_GATEWAY_FUNCTION_NAME" not in env, lid
    out = T["Outputs"]["InternalFunctionName"]
    assert out["Value"] == {"Ref": "InternalFunction"}
    assert out["Export"]["Name"] == {"Fn::Sub": "${AWS::StackName}-InternalFunctionName"}
    assert T["Outputs"]["GatewayFunctionName"]["Value"] == {"Ref": "GatewayFunction"}
