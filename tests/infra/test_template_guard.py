"""Issue 27, items 3, 5 and 8 in the template: the operator list fails closed, the per-caller
throttle's parameters reach the gateway, and the network and endpoint policies are narrow.

The template read as CloudFormation reads it (``tests.infra.cfn``); each test fails on the
template (or the gateway) before the issue.
"""

from __future__ import annotations

from typing import Any

from tests.infra import cfn
from tests.infra.test_template import RES, T, props
from tests.unit.test_gateway_admin import EVERY, OPERATOR, OPERATOR_SESSION, WEB, Rig, dead_id


def _functions_with(var: str) -> dict[str, dict[str, Any]]:
    return {lid: r["Properties"] for lid, r in cfn.resources(T, "AWS::Serverless::Function").items()
            if var in (r["Properties"].get("Environment") or {}).get("Variables", {})}


# ------------------------------------------------------------------ item 3: operators fail closed


def test_at_the_templates_default_nobody_is_an_operator() -> None:
    """OperatorPrincipalArns' default is empty, and a gateway configured from the template's default
    refuses every signed caller on every admin route, writing nothing (it left them to IAM alone)."""
    from sluice_dev.local.deployed import settings_of
    from sluice_dev.local.template import TEMPLATE, load

    assert T["Parameters"]["OperatorPrincipalArns"]["Default"] == ""
    assert "nobody is an operator" in T["Parameters"]["OperatorPrincipalArns"]["Description"]
    deploy = load(TEMPLATE)
    holders = [lid for lid, f in deploy.functions.items() if "SLUICE_OPERATOR_PRINCIPALS" in f.env]
    assert holders  # the function that serves /v1/admin
    for lid in holders:
        s = settings_of(deploy.functions[lid].concrete_env())
        operators = tuple(a.strip() for a in s.operator_principals.split(",") if a.strip())
        assert operators == ()
        for caller in (WEB, OPERATOR, OPERATOR_SESSION):
            rig = Rig(operators=operators)
            dead_id(rig)
            for method, path, body in EVERY:
                code, _, doc = rig.call(method, path, body, caller=caller)
                assert (code, doc["code"]) == (403, "NOT_OPERATOR"), (lid, caller, method, path)
            assert rig.untouched()


# ------------------------------------------------------------------ item 8: narrowing


def _egress(**overrides: Any) -> dict[str, Any]:
    params = cfn.parameters(T, **overrides)
    conds = cfn.conditions(T, params)
    return cfn.resolve(RES["FunctionToKafka"]["Properties"], conds)  # type: ignore[no-any-return]


def test_kafka_egress_goes_to_the_cluster_only_never_to_the_internet() -> None:
    """The 9092-9098 egress went to 0.0.0.0/0 whenever a cluster was named; now to its security group
    or its subnets' CIDR, and a rule makes CloudFormation refuse a named cluster with neither."""
    made = _egress()
    assert made["DestinationSecurityGroupId"] == {"Ref": "KafkaSecurityGroup"} and "CidrIp" not in made
    assert (made["FromPort"], made["ToPort"]) == (9098, 9098)  # MSK SASL/IAM over TLS only
    named = dict(KafkaBootstrapServers="b-1.kafka.example:9096")
    by_group = _egress(**named, KafkaSecurityGroupId="sg-0123abcd")
    assert by_group["DestinationSecurityGroupId"] == {"Ref": "KafkaSecurityGroupId"}
    assert "CidrIp" not in by_group
    assert (by_group["FromPort"], by_group["ToPort"]) == (9092, 9098)
    by_cidr = _egress(**named, KafkaBrokerCidr="10.9.0.0/16")
    assert by_cidr["CidrIp"] == {"Ref": "KafkaBrokerCidr"} and "DestinationSecurityGroupId" not in by_cidr
    iam = _egress(**named, KafkaClusterArn="arn:aws:kafka:us-east-1:123456789012:cluster/jobs/abc",
                  KafkaSecurityGroupId="sg-0123abcd")
    assert (iam["FromPort"], iam["ToPort"]) == (9098, 9098)
    for overrides in ({}, named, {**named, "KafkaBrokerCidr": "10.9.0.0/16"}):
        assert _egress(**overrides).get("CidrIp") != "0.0.0.0/0"
    rule = T["Rules"]["ExistingKafkaNeedsItsNetwork"]
    assert rule["RuleCondition"] == {"Fn::Not": [{"Fn::Equals": [{"Ref": "KafkaBootstrapServers"}, ""]}]}
    (assertion,) = rule["Assertions"]
    text = str(assertion["Assert"])
    assert "KafkaSecurityGroupId" in text and "KafkaBrokerCidr" in text


ENDPOINTS = cfn.load(cfn.ROOT / "infra" / "endpoints.yaml")
# Endpoint -> the service prefix of the actions it carries.
SERVICES = {"DynamoDbEndpoint": "dynamodb", "S3Endpoint": "s3", "LambdaEndpoint": "lambda",
            "SecretsManagerEndpoint": "secretsmanager"}
# Called by AWS services on a function's behalf, never through the VPC: the stream reads of an
# event source mapping (DynamoDB Streams has its own API host, which no gateway endpoint serves).
NOT_THROUGH_THE_VPC = {"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator",
                       "dynamodb:ListStreams"}


def _actions(statement: dict[str, Any]) -> list[str]:
    actions = statement["Action"]
    return [actions] if isinstance(actions, str) else list(actions)


def _allowed_actions(value: Any) -> set[str]:
    """Every action an identity policy's Allow statement anywhere in ``value`` names (a statement with
    a Principal is a trust or resource policy: who may call, not what a role may call)."""
    found: set[str] = set()
    if isinstance(value, dict):
        if value.get("Effect") == "Allow" and "Action" in value and "Principal" not in value:
            found |= set(_actions(value))
        for v in value.values():
            found |= _allowed_actions(v)
    elif isinstance(value, list):
        for v in value:
            found |= _allowed_actions(v)
    return found


def _in_vpc_actions() -> set[str]:
    """What the functions that run in the VPC may call: template.yaml's (after the SAM transform)
    and the team templates' (infra/worker.yaml, and infra/team.yaml where it exists)."""
    from tests.infra.test_template import _function_roles

    out = cfn.transformed()
    actions: set[str] = set()
    for name, role in _function_roles().items():
        if "VpcConfig" in out["Resources"][name]["Properties"]:
            actions |= _allowed_actions(role["Properties"].get("Policies", []))
    for team in ("worker.yaml", "team.yaml"):
        path = cfn.ROOT / "infra" / team
        if path.exists():
            actions |= _allowed_actions(cfn.load(path).get("Resources", {}))
    return actions - NOT_THROUGH_THE_VPC


def test_endpoint_policies_name_the_actions_the_functions_use() -> None:
    """No endpoint policy allows Action "*" (or a service's "*") any more; each names actions, and
    those cover every action an in-VPC role holds for its service (a new call fails here first)."""
    used = _in_vpc_actions()
    endpoints = cfn.resources(ENDPOINTS, "AWS::EC2::VPCEndpoint")
    assert set(endpoints) == set(SERVICES)
    for name, endpoint in endpoints.items():
        service = SERVICES[name]
        named: set[str] = set()
        for statement in endpoint["Properties"]["PolicyDocument"]["Statement"]:
            for action in _actions(statement):
                assert "*" not in action, f"{name}: {action}"
                assert action.startswith(f"{service}:"), f"{name}: {action}"
                named.add(action)
            if statement["Sid"] != "CustomResourceReplies":
                condition = statement["Condition"]["StringEquals"]
                assert condition["aws:PrincipalAccount"] == {"Ref": "AWS::AccountId"}, name
                assert condition["aws:ResourceAccount"] == {"Ref": "AWS::AccountId"}, name
        missing = {a for a in used if a.startswith(f"{service}:")} - named
        assert not missing, f"{name} does not carry {sorted(missing)}, which an in-VPC role uses"


def test_custom_resource_replies_reach_this_regions_bucket_for_this_accounts_stacks_only() -> None:
    """The statement admitted any principal's PutObject to every cloudformation-custom-resource-response-*
    bucket, so a process in the VPC could write into another account's pre-signed reply (out of the VPC)."""
    s3 = ENDPOINTS["Resources"]["S3Endpoint"]["Properties"]["PolicyDocument"]["Statement"]
    (replies,) = [st for st in s3 if st["Sid"] == "CustomResourceReplies"]
    assert _actions(replies) == ["s3:PutObject"]
    template, values = replies["Resource"]["Fn::Sub"]
    assert values == {"Region": {"Fn::Join": ["", {"Fn::Split": ["-", {"Ref": "AWS::Region"}]}]}}
    arn = cfn.sub(template, {"AWS::Partition": "aws", "AWS::Region": "us-east-1",
                             "AWS::AccountId": "123456789012", "Region": "useast1"})
    assert arn == ("arn:aws:s3:::cloudformation-custom-resource-response-useast1/"
                   "arn:aws:cloudformation:us-east-1:123456789012:stack/*")
    # The key of a real reply (the pre-signed URL's path, decoded) matches; another account's does not.
    from fnmatch import fnmatchcase

    ours = ("arn:aws:s3:::cloudformation-custom-resource-response-useast1/arn:aws:cloudformation:us-east-1:"
            "123456789012:stack/sluice/5b6e-11ef|KafkaTopics|0a1b2c")
    assert fnmatchcase(ours, arn) and not fnmatchcase(ours.replace("123456789012", "999999999999"), arn)
    assert not fnmatchcase(ours.replace("useast1", "euwest1"), arn)


def test_secrets_manager_may_invoke_the_rotation_function_for_this_stacks_secrets_only() -> None:
    """SecretRotationPermission had no SourceArn: any secret of the account could have it invoked.
    Now: the job id secret by its ARN, and the Redis users' secrets by their stack's name prefix
    (sluice/<stack>/redis/*: Sluice's users' and the teams', infra/team.yaml), in the function's one
    resource policy (issue 27: no allow-only AWS::Lambda::Permission left on it)."""
    from fnmatch import fnmatchcase

    assert not [r for r in cfn.resources(T, "AWS::Lambda::Permission").values()
                if cfn.is_getatt(r["Properties"]["FunctionName"], "SecretRotationFunction", "Arn")]
    statements = props("SecretRotationFunctionPolicy")["PolicyDocument"]["Statement"]
    (allow,) = [s for s in statements if s["Effect"] == "Allow"]
    assert allow["Principal"] == {"Service": "secretsmanager.amazonaws.com"}
    assert allow["Action"] == "lambda:InvokeFunction"
    by_ref, patterns = {}, {}
    for source in allow["Condition"]["ArnLike"]["aws:SourceArn"]:
        if "Ref" in source:
            by_ref[source["Ref"]] = source
        else:
            patterns[source["Fn::Sub"]] = source
    assert set(by_ref) == {"JobIdSecret"}
    (pattern,) = patterns
    arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:"
    concrete = (pattern.replace("${AWS::Partition}", "aws").replace("${AWS::Region}", "us-east-1")
                .replace("${AWS::AccountId}", "123456789012").replace("${AWS::StackName}", "prod"))
    for secret, allowed in ((f"{arn}sluice/prod/redis/relay-AbCdEf", True),
                            (f"{arn}sluice/prod/redis/team-pay-AbCdEf", True),
                            (f"{arn}sluice/other/redis/relay-AbCdEf", False),
                            (f"{arn}someone-elses-AbCdEf", False)):
        assert fnmatchcase(secret, concrete) is allowed, secret
    schedules = cfn.resources(T, "AWS::SecretsManager::RotationSchedule")
    for schedule in schedules.values():
        # The policy exists before the rotation (Secrets Manager checks it may invoke the function).
        assert "SecretRotationFunctionPolicy" in schedule["DependsOn"], schedule
    assert {s["Properties"]["SecretId"]["Ref"] for s in schedules.values()} == {
        "JobIdSecret", "RedisRelayUserSecret", "RedisGatewayUserSecret", "RedisOperatorUserSecret",
        "RedisWorkerUserSecret"}


# ------------------------------------------------------------------ item 5: each caller's own limit


def test_every_caller_has_its_own_limit_at_the_templates_defaults() -> None:
    """The parameters reach the public API's function, and a gateway configured from the defaults
    has a per-caller limit (it had none: the stage throttle and WAF's per-IP rule were all)."""
    from sluice.core.throttle import CallerLimit
    from sluice.entry import root
    from sluice_dev.local.deployed import settings_of
    from sluice_dev.local.template import TEMPLATE, load

    params = T["Parameters"]
    for name in ("CallerRatePerSecond", "CallerBurst", "CallerBytesPerSecond", "CallerByteBurst"):
        assert params[name]["Type"] == "Number" and params[name]["Default"] > 0, name
    assert params["CallerLimits"]["Type"] == "CommaDelimitedList" and params["CallerLimits"]["Default"] == ""
    # A caller's own limit is a fraction of the stage's, which every caller shares.
    assert params["CallerRatePerSecond"]["Default"] < params["ApiThrottleRatePerSecond"]["Default"]
    assert params["CallerByteBurst"]["Default"] >= 10 * 1024 * 1024  # API Gateway's largest request fits
    assert "per source IP only" in params["ApiWafRateLimit"]["Description"]
    env = props("GatewayFunction")["Environment"]["Variables"]
    assert env["SLUICE_CALLER_RATE_PER_S"] == {"Ref": "CallerRatePerSecond"}
    assert env["SLUICE_CALLER_BURST"] == {"Ref": "CallerBurst"}
    assert env["SLUICE_CALLER_BYTES_PER_S"] == {"Ref": "CallerBytesPerSecond"}
    assert env["SLUICE_CALLER_BYTE_BURST"] == {"Ref": "CallerByteBurst"}
    assert env["SLUICE_CALLER_LIMITS"] == {"Fn::Join": [",", {"Ref": "CallerLimits"}]}
    team = "arn:aws:iam::123456789012:role/team-a"
    deploy = load(TEMPLATE, overrides={"CallerLimits": f"{team}=500/1000"})
    s = settings_of(deploy.functions["GatewayFunction"].concrete_env(), job_id_secret="k" * 32)
    throttle = root.caller_throttle(s)
    assert throttle is not None and not throttle.off
    assert throttle.limits.default == CallerLimit(100, 200, 5 * 1024 * 1024, 10 * 1024 * 1024)
    assert throttle.limits.for_caller("arn:aws:sts::123456789012:assumed-role/team-a/x") == \
        CallerLimit(500, 1000, 5 * 1024 * 1024, 10 * 1024 * 1024)
    off = load(TEMPLATE, overrides={"CallerRatePerSecond": "0", "CallerBytesPerSecond": "0"})
    assert root.caller_throttle(settings_of(off.functions["GatewayFunction"].concrete_env())) is None
