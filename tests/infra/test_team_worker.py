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


def test_every_import_is_an_export_of_the_sluice_stack() -> None:
    exported = {o["Export"]["Name"]["Fn::Sub"].replace("${AWS::StackName}", "${SluiceStackName}")
                for o in cfn.template()["Outputs"].values() if "Export" in o}
    imported = set(_imports(TEAM))
    assert imported and imported <= exported, imported - exported


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
    assert _imports(FN["VpcConfig"]) == ["${SluiceStackName}-FunctionSecurityGroupId",
                                         "${SluiceStackName}-PrivateSubnetIds"]
    assert FN["LoggingConfig"]["LogGroup"] == {"Ref": "TeamWorkerLogGroup"}
    assert RES["TeamWorkerLogGroup"]["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}
    assert FN["Layers"] == [{"Ref": "SluiceLayerArn"}]
    assert FN["Handler"] == "sluice.entry.worker_function.handler"
    schedule = FN["Events"]["SafetyNet"]["Properties"]
    assert schedule["Schedule"] == {"Ref": "SafetyNetRate"}
    assert "safety-net" in schedule["Input"]["Fn::Sub"][0]


def test_the_function_registers_its_own_routes_on_every_version() -> None:
    routes = RES["Routes"]
    assert routes["Type"] == "Custom::SluiceRoutes"
    assert routes["Properties"]["ServiceToken"] == {"Fn::GetAtt": ["TeamWorkerFunction", "Arn"]}
    assert routes["Properties"]["Version"] == {"Ref": "TeamWorkerFunction.Version"}
    assert FN["AutoPublishAlias"] == "live"


def test_least_privilege_no_listing_of_jobs_and_route_writes_only_for_its_queues() -> None:
    statements = [s for p in FN["Policies"] for s in p["Statement"]]
    for s in statements:
        assert all("*" not in a for a in s["Action"]), s
        if "dynamodb:Scan" in s["Action"]:
            assert _imports(s["Resource"]) == ["${SluiceStackName}-RoutesTableArn"]
        assert "dynamodb:Query" not in s["Action"]
    writes = next(s for s in statements if "dynamodb:DeleteItem" in s["Action"])
    assert _imports(writes["Resource"]) == ["${SluiceStackName}-RoutesTableArn"]
    assert writes["Condition"] == {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": {"Ref": "Queues"}}}
    results = next(s for s in statements if "s3:PutObject" in s["Action"])
    assert results["Resource"]["Fn::Sub"][0].endswith("/results/*")


def test_its_environment_variables_are_settings_fields() -> None:
    names = {f"SLUICE_{n.upper()}" for n in Settings.model_fields}
    for var in FN["Environment"]["Variables"]:
        assert var in names or not var.startswith("SLUICE_"), var
        assert re.fullmatch(r"[A-Z_]+", var)


def _leading_keys(condition: Any, queues: list[str]) -> list[str]:
    """The Split/Sub/Join of the jobs-table condition, evaluated as CloudFormation would."""
    split = condition["ForAllValues:StringLike"]["dynamodb:LeadingKeys"]["Fn::Split"]
    text, names = split[1]["Fn::Sub"]
    joined = names["Names"]["Fn::Join"]
    assert joined[1] == {"Ref": "Queues"}
    return str(text.replace("${Names}", joined[0].join(queues))).split(split[0])


def test_the_jobs_table_is_reached_only_for_its_own_queues_job_ids() -> None:
    from fnmatch import fnmatchcase

    from sluice.core.ids import mint

    statements = [s for p in FN["Policies"] for s in p["Statement"]]
    jobs = next(s for s in statements if _imports(s["Resource"]) == ["${SluiceStackName}-JobsTableArn"])
    keys = _leading_keys(jobs["Condition"], ["avatars", "avatar-cleanup"])
    assert keys == ["*.avatars.*", "*.avatar-cleanup.*"]
    key = b"k" * 32
    for queue, allowed in (("avatars", True), ("avatar-cleanup", True), ("avatar", False),
                           ("avatars2", False), ("thumbnails", False)):
        job_id = mint(1_700_000_000_000, queue, key)
        assert any(fnmatchcase(job_id, k) for k in keys) is allowed, (queue, job_id)


def test_handlers_may_start_jobs_through_sluices_internal_function_and_only_it() -> None:
    """ctx.enqueue in a team's handler invokes Sluice's internal function (docs/flows.md): the team's
    function is told its name, from the Sluice stack's export, and may invoke that one function."""
    env = FN["Environment"]["Variables"]
    assert _imports(env["SLUICE_INTERNAL_FUNCTION_NAME"]) == ["${SluiceStackName}-InternalFunctionName"]
    assert "SLUICE_GATEWAY_FUNCTION_NAME" not in env
    statements = [s for p in FN["Policies"] for s in p["Statement"]]
    invoke = [s for s in statements if "lambda:InvokeFunction" in s["Action"]]
    assert len(invoke) == 1 and invoke[0]["Action"] == ["lambda:InvokeFunction"]
    arn, names = invoke[0]["Resource"]["Fn::Sub"]
    assert arn == "arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}:function:${Internal}"
    assert _imports(names["Internal"]) == ["${SluiceStackName}-InternalFunctionName"]
