"""infra/worker.yaml, a team's own worker function (issue 15), against what template.yaml gives it."""

from __future__ import annotations

import re
from typing import Any

from sluice.core.config import Settings
from tests.infra import cfn

TEAM = cfn.load(cfn.ROOT / "infra" / "worker.yaml")
RES = TEAM["Resources"]
FN = RES["TeamWorkerFunction"]["Properties"]


def _imports(value: Any) -> list[str]:
    """Every export name the value imports, as its Fn::Sub text."""
    if isinstance(value, dict):
        if "Fn::ImportValue" in value:
            return [value["Fn::ImportValue"]["Fn::Sub"]]
        return [x for v in value.values() for x in _imports(v)]
    if isinstance(value, list):
        return [x for v in value for x in _imports(v)]
    return []


TEAM_STACK = cfn.load(cfn.ROOT / "infra" / "team.yaml")  # the infra team's, per team (issue 27)


def test_every_import_is_an_export_of_the_sluice_stack_or_of_the_teams_stack() -> None:
    exported = {o["Export"]["Name"]["Fn::Sub"].replace("${AWS::StackName}", "${SluiceStackName}")
                for o in cfn.template()["Outputs"].values() if "Export" in o}
    exported |= {o["Export"]["Name"]["Fn::Sub"] for o in TEAM_STACK["Outputs"].values() if "Export" in o}
    imported = set(_imports(TEAM))
    assert imported and imported <= exported, imported - exported
    assert {"${SluiceStackName}-team-${TeamName}-WorkerRoleArn",
            "${SluiceStackName}-team-${TeamName}-RegistrarArn"} <= imported


def test_the_relay_may_invoke_the_team_function_by_its_naming_convention() -> None:
    assert FN["FunctionName"] == {"Fn::Sub": "${SluiceStackName}-worker-${TeamName}"}
    relay = cfn.template()["Resources"]["RelayFunction"]["Properties"]["Policies"]
    resources = [s["Resource"] for p in relay if "Statement" in p for s in p["Statement"]
                 if s["Action"] == ["lambda:InvokeFunction"]]
    assert resources == [{"Fn::Sub": "arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}"
                                     ":function:${AWS::StackName}-worker-*"}]
    # The team's AllowedPattern keeps the name inside that pattern and within Lambda's 64 characters.
    assert TEAM["Parameters"]["TeamName"]["AllowedPattern"] == "^[a-z0-9][a-z0-9-]{0,20}$"


def test_async_invocations_are_never_retried_and_fail_to_the_teams_dlq() -> None:
    cfg = RES["TeamWorkerAsyncConfig"]["Properties"]
    assert cfg["FunctionName"] == {"Ref": "TeamWorkerFunction"} and cfg["Qualifier"] == "$LATEST"
    assert cfg["MaximumRetryAttempts"] == 0
    assert cfg["DestinationConfig"]["OnFailure"]["Destination"] == {
        "Fn::GetAtt": ["TeamWorkerDeadLetterQueue", "Arn"]}


def test_it_runs_in_sluices_vpc_logs_to_a_retained_group_and_uses_the_layer() -> None:
    # At its defaults (Egress=none); with Egress=internet: tests/infra/test_template_egress.py.
    defaults = cfn.conditions(TEAM, cfn.parameters(TEAM))
    assert _imports(cfn.resolve(FN["VpcConfig"], defaults)) == ["${SluiceStackName}-FunctionSecurityGroupId",
                                                                "${SluiceStackName}-PrivateSubnetIds"]
    assert FN["LoggingConfig"]["LogGroup"] == {"Ref": "TeamWorkerLogGroup"}
    assert RES["TeamWorkerLogGroup"]["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}
    assert FN["Layers"] == [{"Ref": "SluiceLayerArn"}]
    assert FN["Handler"] == "sluice.entry.worker_function.handler"
    assert "Events" not in FN  # SAM events add allow-only permissions (TeamSafetyNet is a rule)
    (rule,) = cfn.resources(TEAM, "AWS::Events::Rule").values()
    assert rule["Properties"]["ScheduleExpression"] == {"Ref": "SafetyNetRate"}
    assert rule["Properties"]["State"] == "ENABLED"
    (target,) = rule["Properties"]["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": ["TeamWorkerFunction", "Arn"]}  # unqualified: the policy's ARN
    assert target["Input"] == {"Fn::Sub": [
        '{"queues": ["${Names}"], "batch": ${WorkerBatch}, "source": "safety-net"}',
        {"Names": {"Fn::Join": ['", "', {"Ref": "Queues"}]}}]}


def test_the_teams_registrar_registers_the_functions_routes_on_every_version() -> None:
    """Not the function itself any more (issue 27): the team's registrar, whose configuration and
    resource policy the infra team's stack holds."""
    assert "Routes" not in RES
    routes = RES["TeamRoutes"]
    assert routes["Type"] == "Custom::SluiceRoutes"
    token = routes["Properties"]["ServiceToken"]
    assert _imports(token) == ["${SluiceStackName}-team-${TeamName}-RegistrarArn"]
    # No versions or aliases (each would be an invoke target TeamWorkerPolicy does not cover): the
    # registrar describes the function unqualified, after CloudFormation updated it (the Ref orders
    # it), and a change of the module, layer, queues or CodeRevision re-registers.
    assert "AutoPublishAlias" not in FN and "Version" not in routes["Properties"]
    assert routes["Properties"]["Function"] == {"Ref": "TeamWorkerFunction"}
    for prop, param in (("HandlersModule", "HandlersModule"), ("Layer", "SluiceLayerArn"),
                        ("Queues", "Queues"), ("CodeRevision", "CodeRevision")):
        assert routes["Properties"][prop] == {"Ref": param}, prop
    assert "Owner" not in routes["Properties"]  # the registrar's configuration says whose routes


def test_the_team_stack_creates_no_role_and_writes_no_route() -> None:
    """The role is the one infra/team.yaml vends; nothing in this stack can widen it."""
    assert _imports(FN["Role"]) == ["${SluiceStackName}-team-${TeamName}-WorkerRoleArn"]
    assert "Policies" not in FN
    assert not [r for r in RES.values() if str(r["Type"]).startswith("AWS::IAM::")]
    assert "SLUICE_ROUTES_TABLE" not in FN["Environment"]["Variables"]
    assert "${SluiceStackName}-RoutesTableArn" not in _imports(TEAM)


def test_its_dlq_is_named_as_the_vended_role_expects() -> None:
    assert RES["TeamWorkerDeadLetterQueue"]["Properties"]["QueueName"] == {
        "Fn::Sub": "${SluiceStackName}-worker-${TeamName}-dlq"}


def test_its_environment_variables_are_settings_fields() -> None:
    names = {f"SLUICE_{n.upper()}" for n in Settings.model_fields}
    for var in FN["Environment"]["Variables"]:
        assert var in names or not var.startswith("SLUICE_"), var
        assert re.fullmatch(r"[A-Z_]+", var)


def test_handlers_start_jobs_through_sluices_internal_function() -> None:
    """ctx.enqueue in a team's handler invokes Sluice's internal function (docs/flows.md), named by an
    export of the Sluice stack; the vended role may invoke it alone: tests/infra/test_team_stack.py."""
    env = FN["Environment"]["Variables"]
    assert _imports(env["SLUICE_INTERNAL_FUNCTION_NAME"]) == ["${SluiceStackName}-InternalFunctionName"]
    assert "SLUICE_GATEWAY_FUNCTION_NAME" not in env
