"""Issue 19's template properties (items 3, 4, 5, 8, 9): rotation, scope, limits.

Same approach as test_template.py: the template read as CloudFormation reads it, and IAM
after the real SAM transform.
"""

from __future__ import annotations

import json
from typing import Any

from tests.infra import cfn
from tests.infra.test_template import RES, T, _function_roles, props


def _statements(role: dict[str, Any]) -> list[dict[str, Any]]:
    return [statement for policies in cfn.variants(role["Properties"].get("Policies", []))
            for policy in policies for statement in policy["PolicyDocument"]["Statement"]]


# ------------------------------------------------------------------ item 8: secrets rotate


def test_both_secrets_rotate_on_a_schedule_through_the_rotation_function() -> None:
    schedules = {p["Properties"]["SecretId"]["Ref"]: p for p in
                 cfn.resources(T, "AWS::SecretsManager::RotationSchedule").values()}
    assert set(schedules) == {"RedisAuthSecret", "JobIdSecret"}
    for schedule in schedules.values():
        p = schedule["Properties"]
        assert cfn.is_getatt(p["RotationLambdaARN"], "SecretRotationFunction", "Arn")
        assert p["RotationRules"]["ScheduleExpression"] == "rate(30 days)"
        assert p["RotateImmediatelyOnUpdate"] is False  # a deploy does not rotate
        assert "SecretRotationPermission" in schedule["DependsOn"]
    permission = props("SecretRotationPermission")
    assert permission["Principal"] == "secretsmanager.amazonaws.com"
    assert permission["SourceAccount"] == {"Ref": "AWS::AccountId"}
    fn = props("SecretRotationFunction")
    assert fn["CodeUri"] == "infra/secret_rotation/" and fn["Handler"] == "app.handler"
    assert fn["Environment"]["Variables"] == {"REDIS_SECRET_ARN": {"Ref": "RedisAuthSecret"},
                                              "REPLICATION_GROUP_ID": {"Ref": "RedisGroup"}}


def test_the_rotation_function_may_touch_only_the_two_secrets_and_the_redis_group() -> None:
    statements = _statements(_function_roles()["SecretRotationFunction"])
    by_action = {a: s["Resource"] for s in statements for a in s["Action"] if not a.startswith("logs:")}
    secrets = [{"Ref": "RedisAuthSecret"}, {"Ref": "JobIdSecret"}]
    for action in ("secretsmanager:DescribeSecret", "secretsmanager:GetSecretValue",
                   "secretsmanager:PutSecretValue", "secretsmanager:UpdateSecretVersionStage"):
        assert by_action.pop(action) == secrets, action
    group = {"Fn::Sub": "arn:${AWS::Partition}:elasticache:${AWS::Region}:${AWS::AccountId}"
                        ":replicationgroup:${RedisGroup}"}
    assert by_action.pop("elasticache:ModifyReplicationGroup") == group
    assert by_action.pop("elasticache:DescribeReplicationGroups") == group
    assert by_action == {}


def test_only_the_rotation_function_writes_a_secret() -> None:
    for name, role in _function_roles().items():
        for statement in _statements(role):
            writes = [a for a in statement["Action"] if a.startswith("secretsmanager:")
                      and a not in ("secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret")]
            assert not writes or name == "SecretRotationFunction", (name, writes)
            if writes:
                assert "RedisAuthSecret" in json.dumps(statement["Resource"])


def test_the_rotation_handler_knows_every_step() -> None:
    source = (cfn.ROOT / "infra/secret_rotation/app.py").read_text()
    for step in ("createSecret", "setSecret", "testSecret", "finishSecret"):
        assert f'"{step}"' in source, step
    assert '"ROTATE"' in source  # the old Redis token stays valid while functions re-read
    assert RES["RedisGroup"]["Properties"]["TransitEncryptionMode"] == "required"
