"""Issue 27, item 1: one function per kind of caller, each admitting only its caller.

Every invoker a deployment has (API Gateway on each route, the Scheduler role, the schedule rules,
Secrets Manager, the infra team's deploy roles, the worker, relay, countdown and teams' workers,
every other function's role, a stranger whose own IAM policy allows ``lambda:*`` on ``*``) against
EVERY function of template.yaml, decided by IAM's rules (``sluice_dev.local.iam``, the same
evaluator the local Lambda service runs) over the template's resource policies and the callers' own
policies after the SAM transform: each function admits exactly its callers.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import pytest

from sluice_dev.local.iam import Request, decide
from tests.infra import cfn
from tests.infra.test_template import RES, T

DEPLOYERS = "arn:aws:iam::123456789012:role/infra-deploy,arn:aws:iam::123456789012:role/cfn-service"
PARAMS = cfn.parameters(T, DeployerPrincipalArns=DEPLOYERS)
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


def rule_arn(logical_id: str) -> str:
    return f"arn:aws:events:us-east-1:{ACCOUNT}:rule/{STACK}-{logical_id}-GHIJKL"  # a generated name


def secret_arn(name: str) -> str:
    return f"arn:aws:secretsmanager:us-east-1:{ACCOUNT}:secret:{name}-AbCdEf"


def _values() -> dict[str, Any]:
    out: dict[str, Any] = {**PARAMS, "Api": API_ID, "JobIdSecret": secret_arn(f"sluice/{STACK}/job-id-key")}
    for lid, res in transformed()["Resources"].items():
        if res["Type"] == "AWS::Events::Rule":
            out[f"{lid}.Arn"] = rule_arn(lid)
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
    if set(value) == {"Fn::Join"}:
        sep, parts = value["Fn::Join"]
        parts = concrete(parts)
        return sep.join(str(p) for p in (parts if isinstance(parts, list) else [parts]))
    if set(value) == {"Fn::Split"}:
        sep, text = value["Fn::Split"]
        return str(concrete(text)).split(sep)
    if len(value) == 1 and next(iter(value)).startswith("Fn::"):
        return f"<{next(iter(value))}>"  # Select: Kafka's ARNs, nothing a Lambda invoke reads
    return {k: concrete(v) for k, v in value.items()}


def _named(name: str) -> Any:
    """A function's, role's or rule's ARN as deployed, a parameter's value (a CommaDelimitedList's:
    a list); anything else (a table, a bucket) a placeholder."""
    value = VALUES.get(name, f"<{name}>")
    return value if isinstance(value, list) else str(value)


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
# Every function of template.yaml (the split four, and issue 27's "every function": the relay, the
# workers, the stream readers, the rotation and custom-resource functions).
FUNCTIONS = sorted(
    lid
    for lid, res in T["Resources"].items()
    if res["Type"] in ("AWS::Serverless::Function", "AWS::Lambda::Function")
)
# Invoked by an event source mapping's poller: the Deny names IAM principals but the function's own
# role (the poller's), so a service principal, which has no allow here, is refused implicitly.
STREAM_READERS = {"EventsFunction", "CountdownFunction"}
DEPLOYER = DEPLOYERS.split(",")[0], None
CUSTOM_RESOURCES = {"PrefixListsFunction", "KafkaBootstrapFunction", "KafkaTopicsFunction",
                    "RegistrarFunction"}
RELAY_RULES = [("events.amazonaws.com", rule_arn(f"RelayTick{i}")) for i in range(1, 5)]
# Every invoker and the functions it may invoke (empty: none).
INVOKERS: list[tuple[str, tuple[str, str | None], frozenset[str]]] = [
    *[
        (f"API Gateway {arn.split('/live/')[1]}", (p, arn), frozenset({"GatewayFunction"}))
        for p, arn in PUBLIC_ROUTES
    ],
    *[
        (f"API Gateway {arn.split('/live/')[1]}", (p, arn), frozenset({"OperatorFunction"}))
        for p, arn in ADMIN_ROUTES
    ],
    ("another API's route", api("POST", "/v1/queues/emails/jobs", "zzzzzzzzzz"), frozenset()),
    ("another API's admin route", api("DELETE", "/v1/admin/queues/emails/dlq", "zzzzzzzzzz"), frozenset()),
    ("API Gateway, no SourceArn", ("apigateway.amazonaws.com", None), frozenset()),
    ("Scheduler's role", (VALUES["SchedulerInvokeRole.Arn"], None), frozenset({"FiringsFunction"})),
    ("the worker", sam_role("WorkerFunction"), frozenset({"InternalFunction"})),
    # The relay dispatches the default worker (async), releases continuations and asks the team map
    # function outside the VPC (issue 33).
    ("the relay", sam_role("RelayFunction"),
     frozenset({"InternalFunction", "WorkerFunction", "TeamMapFunction"})),
    ("the countdown", sam_role("CountdownFunction"), frozenset({"InternalFunction"})),
    # Sluice's registrar asks the default worker for its handlers and declared schedules (issue 31).
    ("Sluice's registrar", sam_role("RegistrarFunction"), frozenset({"WorkerFunction"})),
    ("a team's worker", TEAM, frozenset({"InternalFunction"})),
    ("another stack's team worker", (role("other-stack-team-media", "/sluice/"), None), frozenset()),
    ("a team-named role outside /sluice/", (role(f"{STACK}-team-media"), None), frozenset()),
    ("the events function", sam_role("EventsFunction"), frozenset()),
    # The operator asks the scheduler function outside the VPC for its Scheduler calls (issue 33).
    *[(f"the {name} function", sam_role(f"{lid}"),
       frozenset({"SchedulerFunction"}) if lid == "OperatorFunction" else frozenset())
      for lid, name in SPLIT.items()],
    ("the team map function", sam_role("TeamMapFunction"), frozenset()),
    ("the scheduler function", sam_role("SchedulerFunction"), frozenset()),
    ("the rotation function", sam_role("SecretRotationFunction"), frozenset()),
    ("the Kafka topics function", sam_role("KafkaTopicsFunction"), frozenset()),
    ("a stranger allowed lambda:* on *", STRANGER, frozenset()),
    # The schedule rules: EventBridge with each rule's ARN, and only its own target.
    *[
        (f"the relay's rule {arn.rsplit('-', 2)[-2]}", (p, arn), frozenset({"RelayFunction"}))
        for p, arn in RELAY_RULES
    ],
    (
        "the safety-net rule",
        ("events.amazonaws.com", rule_arn("WorkerSafetyNet")),
        frozenset({"WorkerFunction"}),
    ),
    ("someone else's rule", ("events.amazonaws.com", rule_arn("MyRule")), frozenset()),
    ("events.amazonaws.com", ("events.amazonaws.com", None), frozenset()),
    ("scheduler.amazonaws.com itself", ("scheduler.amazonaws.com", None), frozenset()),
    # Secrets Manager rotating this stack's secrets, and nobody's else.
    (
        "Secrets Manager, a Redis user's secret",
        ("secretsmanager.amazonaws.com", secret_arn(f"sluice/{STACK}/redis/relay")),
        frozenset({"SecretRotationFunction"}),
    ),
    (
        "Secrets Manager, a team's Redis secret",
        ("secretsmanager.amazonaws.com", secret_arn(f"sluice/{STACK}/redis/team-media")),
        frozenset({"SecretRotationFunction"}),
    ),
    (
        "Secrets Manager, the job id key",
        ("secretsmanager.amazonaws.com", VALUES["JobIdSecret"]),
        frozenset({"SecretRotationFunction"}),
    ),
    (
        "Secrets Manager, another stack's secret",
        ("secretsmanager.amazonaws.com", secret_arn("sluice/other/redis/relay")),
        frozenset(),
    ),
    ("Secrets Manager, any secret", ("secretsmanager.amazonaws.com", secret_arn("mine")), frozenset()),
    ("Secrets Manager, no SourceArn", ("secretsmanager.amazonaws.com", None), frozenset()),
    # The infra team's deploy roles: CloudFormation acts for them on custom resources (Sluice's
    # registrar answers DefaultWorkerRegistration; the default worker, the Delete of a stack's
    # DefaultWorkerRoutes from before issue 31).
    *[
        (f"a deployer {d.rsplit('/', 1)[1]}", (d, None), frozenset({*CUSTOM_RESOURCES, "WorkerFunction"}))
        for d in DEPLOYERS.split(",")
    ],
    ("CloudFormation itself", ("cloudformation.amazonaws.com", None), frozenset()),
    ("a role named like a deployer elsewhere", (role("infra-deploy", "/other/"), None), frozenset()),
]


def _decide(function: str, principal: str, source_arn: str | None) -> str:
    own = [STRANGER_POLICY] if principal == STRANGER[0] else identity_policies(principal)
    (policy,) = resource_policies()[function]
    return decide(
        Request(principal, "lambda:InvokeFunction", function_arn(function), source_arn), policy, own
    )


def _refused(function: str, principal: str, decision: str) -> bool:
    """Refused by an explicit deny, which no identity policy of the account can get past; for a
    stream reader, a service principal (no identity policy of its own, so no allow anywhere) and
    the reader's own role (left out of the Deny for the poller, with no allow to invoke itself)
    are refused implicitly."""
    if function in STREAM_READERS and (
        not principal.startswith("arn:") or principal == sam_role(function)[0]
    ):
        return decision == "implicit-deny"
    return decision == "deny"


@pytest.mark.parametrize("function", FUNCTIONS)
@pytest.mark.parametrize(("who", "caller", "allowed"), INVOKERS, ids=[i[0] for i in INVOKERS])
def test_each_function_admits_exactly_its_caller(
    function: str, who: str, caller: tuple[str, str | None], allowed: frozenset[str]
) -> None:
    decision = _decide(function, *caller)
    if function in allowed:
        assert decision == "allow", (who, function)
    else:
        assert _refused(function, caller[0], decision), (who, function, decision)


def test_every_function_has_one_resource_policy_with_a_deny_and_no_permission() -> None:
    """Issue 27: every function, not only the split four. One AWS::Lambda::ResourcePolicy each (not
    mixed with the allow-only AWS::Lambda::Permission, which SAM's Schedule, Api and other push
    events would add: after the SAM transform there is none), with its condition, and a Deny on
    every principal that is no legitimate caller."""
    assert set(FUNCTIONS) >= {
        *SPLIT,
        "RelayFunction",
        "WorkerFunction",
        "EventsFunction",
        "CountdownFunction",
        "SecretRotationFunction",
        *CUSTOM_RESOURCES,
    }
    policies = {}
    for lid, res in cfn.resources(T, "AWS::Lambda::ResourcePolicy").items():
        target = res["Properties"]["ResourceArn"]["Fn::GetAtt"][0]
        assert target not in policies, f"{target}: two resource policies"
        policies[target] = (lid, res)
    for function in FUNCTIONS:
        assert function in policies, f"{function} has no AWS::Lambda::ResourcePolicy"
        lid, res = policies[function]
        assert res.get("Condition") == RES[function].get("Condition"), lid  # exists when the function does
        assert "Events" not in RES[function]["Properties"], function  # SAM events add allow-only permissions
        (policy,) = resource_policies()[function]
        denies = [s for s in policy["Statement"] if s["Effect"] == "Deny"]
        assert len(denies) == 1 and denies[0]["Principal"] == "*", function
        assert {"lambda:InvokeFunction", "lambda:InvokeFunctionUrl"} <= set(denies[0]["Action"]), function
    assert not cfn.resources(T, "AWS::Lambda::Permission")
    assert not [
        lid for lid, r in transformed()["Resources"].items() if r["Type"] == "AWS::Lambda::Permission"
    ]


def test_the_schedules_are_rules_of_their_own_with_the_same_expressions_inputs_and_states() -> None:
    """The SAM Schedule events became AWS::Events::Rule resources (their permission is the
    function's resource policy now): the same expressions, inputs and enabled-ness."""
    rules = cfn.resources(T, "AWS::Events::Rule")
    targets = {lid: r["Properties"]["Targets"] for lid, r in rules.items()}
    assert all(len(x) == 1 for x in targets.values())
    relay = sorted(lid for lid, x in targets.items() if cfn.is_getatt(x[0]["Arn"], "RelayFunction"))
    assert relay == ["RelayTick1", "RelayTick2", "RelayTick3", "RelayTick4"]
    for groups in (1, 2, 3, 4):
        conds = cfn.conditions(T, cfn.parameters(T, RelayPartitionGroups=groups))
        states = [cfn.resolve(rules[r]["Properties"]["State"], conds) for r in relay]
        assert states == ["ENABLED"] * groups + ["DISABLED"] * (4 - groups)
    assert [lid for lid, x in targets.items() if cfn.is_getatt(x[0]["Arn"], "WorkerFunction")] == [
        "WorkerSafetyNet"
    ]
    assert rules["WorkerSafetyNet"]["Properties"]["State"] == "ENABLED"
    assert rules["WorkerSafetyNet"]["Properties"]["ScheduleExpression"] == {"Ref": "SafetyNetRate"}


def test_deploying_without_the_deployer_roles_is_refused() -> None:
    """DeployerPrincipalArns has no safe default (the account's root would admit every role of it):
    CloudFormation refuses a deploy that leaves it empty (the rule DeployersAreNamed)."""
    from tests.infra.test_template_records import refused

    assert any("DeployerPrincipalArns" in r for r in refused(DeployerPrincipalArns=""))
    assert not refused(DeployerPrincipalArns=DEPLOYERS)


def test_the_callers_own_policies_allow_the_function_they_call() -> None:
    """An allow in the caller's own policy is what a same-account call needs when the resource
    policy names the account (teams) or a deny-only policy; Sluice's own callers have both."""
    for caller, function in (
        (sam_role("WorkerFunction"), "InternalFunction"),
        (sam_role("RelayFunction"), "InternalFunction"),
        (sam_role("RelayFunction"), "WorkerFunction"),
        (sam_role("CountdownFunction"), "InternalFunction"),
        (sam_role("RegistrarFunction"), "WorkerFunction"),
        ((VALUES["SchedulerInvokeRole.Arn"], None), "FiringsFunction"),
        (sam_role("RelayFunction"), "TeamMapFunction"),
        (sam_role("OperatorFunction"), "SchedulerFunction"),
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
