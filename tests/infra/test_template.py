"""The security and wiring properties template.yaml promises, checked on the template itself.

Each test reads the template as CloudFormation would (short-form tags included), and where
IAM is concerned, after the real SAM transform, so the roles checked are the roles deployed.
Where the template mirrors code (table keys, request models, settings, metric names), the
test asks the code, not a copy of its values.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.infra import cfn

T = cfn.template()
RES = T["Resources"]
DEFAULTS = cfn.conditions(T, cfn.parameters(T))

# AWS managed policies SAM attaches to generated roles; each uses Resource "*".
ALLOWED_MANAGED_POLICIES = {
    "AWSLambdaBasicExecutionRole": "SAM's default for every generated role (log writes)",
    "AWSLambdaVPCAccessExecutionRole": "ENI actions, which AWS grants only on Resource '*'",
    "AWSXrayWriteOnlyAccess": "X-Ray has no resource-level permissions",
}

# Inline statements that must use Resource "*", each with its reason: exactly these.
ALLOWED_WILDCARD_RESOURCES = {
    ("PrefixListsFunction", ("ec2:DescribePrefixLists",)):
        "describe actions have no resource-level permissions; it reads AWS's public prefix lists "
        "so that the functions' HTTPS egress is narrowed to them (issue 19)",
}


def props(name: str) -> dict[str, Any]:
    return RES[name]["Properties"]  # type: ignore[no-any-return]


# ------------------------------------------------------------------ DynamoDB


def test_every_table_is_on_demand_with_pitr_sse_and_ttl() -> None:
    tables = cfn.resources(T, "AWS::DynamoDB::Table")
    assert len(tables) >= 2
    for name, table in tables.items():
        p = table["Properties"]
        assert p["BillingMode"] == "PAY_PER_REQUEST", name
        assert p["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True, name
        assert p["SSESpecification"]["SSEEnabled"] is True, name
        assert p["TimeToLiveSpecification"]["Enabled"] is True, name


class _RecordingDynamoDB:
    """Stands in for a boto3 client so sluice.backends.dynamodb.tables shows the layout it creates."""

    def __init__(self) -> None:
        self.keys: list[dict[str, str]] = []
        self.attributes: list[dict[str, str]] = []
        self.ttl: str | None = None

    def create_table(self, **kw: Any) -> None:
        self.keys, self.attributes = kw["KeySchema"], kw["AttributeDefinitions"]
        assert self.keys[0]["KeyType"] == "HASH"

    def get_waiter(self, _name: str) -> Any:
        return type("W", (), {"wait": lambda *a, **k: None})()

    def update_time_to_live(self, **kw: Any) -> None:
        self.ttl = kw["TimeToLiveSpecification"]["AttributeName"]


@pytest.mark.parametrize(("resource", "creator"), [("JobsTable", "create_jobs_table"),
                                                   ("IdempotencyTable", "create_idempotency_table"),
                                                   ("RoutesTable", "create_routes_table"),
                                                   ("SchedulesTable", "create_schedules_table"),
                                                   ("ParkedTable", "create_parked_table")])
def test_tables_have_the_layout_the_code_creates_locally(resource: str, creator: str) -> None:
    from sluice.backends.dynamodb import tables

    client = _RecordingDynamoDB()
    getattr(tables, creator)(client, "t")
    p = props(resource)
    assert p["KeySchema"] == client.keys
    assert p["AttributeDefinitions"] == client.attributes
    assert p["TimeToLiveSpecification"]["AttributeName"] == client.ttl


# ------------------------------------------------------------------ Redis


def redis_group(**params: Any) -> dict[str, Any]:
    """The replication group's properties as a deploy with ``params`` would create it."""
    (group,) = cfn.resources(T, "AWS::ElastiCache::ReplicationGroup").values()
    return cfn.resolve(group["Properties"], cfn.conditions(T, cfn.parameters(T, **params)))  # type: ignore[no-any-return]


@pytest.mark.parametrize("shards", [1, 3])
def test_redis_is_encrypted_multi_az_with_a_generated_auth_token(shards: int) -> None:
    p = redis_group(RedisShards=shards)
    assert p["TransitEncryptionEnabled"] is True
    assert p["TransitEncryptionMode"] == "required"
    assert p["AtRestEncryptionEnabled"] is True
    assert p["MultiAZEnabled"] is True and p["AutomaticFailoverEnabled"] is True
    if shards == 1:
        nodes = p["NumCacheClusters"]
        assert T["Parameters"][nodes["Ref"]]["MinValue"] >= 2, "failover needs a replica"
    else:
        replicas = p["ReplicasPerNodeGroup"]
        assert T["Parameters"][replicas["Ref"]]["MinValue"] >= 1, "failover needs a replica per shard"
    # Issue 27: no shared AUTH token; each function AUTHs as its own ElastiCache user
    # (tests/infra/test_template_redis_users.py).
    assert "AuthToken" not in p and p["UserGroupIds"] == [{"Ref": "RedisUserGroup"}]
    env = T["Globals"]["Function"]["Environment"]["Variables"]
    assert "SLUICE_REDIS_AUTH_SECRET_ARN" not in env
    conds = cfn.conditions(T, cfn.parameters(T, RedisShards=shards))
    url = cfn.resolve(env["SLUICE_REDIS_URL"], conds)["Fn::Sub"]
    assert url.startswith("rediss://" if shards == 1 else "rediss+cluster://"), "TLS is required by the group"


def test_one_shard_is_the_default_and_unchanged() -> None:
    assert T["Parameters"]["RedisShards"]["Default"] == 1
    p = redis_group()
    assert p["NumCacheClusters"] == {"Ref": "CacheNodes"}
    assert "NumNodeGroups" not in p and "ReplicasPerNodeGroup" not in p
    assert p["CacheParameterGroupName"] == {"Ref": "RedisParameters"}
    assert "cluster-enabled" not in props("RedisParameters")["Properties"]
    env = T["Globals"]["Function"]["Environment"]["Variables"]
    url = cfn.resolve(env["SLUICE_REDIS_URL"], cfn.conditions(T, cfn.parameters(T)))
    assert url == {"Fn::Sub": "rediss://${RedisGroup.PrimaryEndPoint.Address}:${RedisGroup.PrimaryEndPoint.Port}/0"}


def test_n_shards_with_m_replicas_use_cluster_mode_and_the_configuration_endpoint() -> None:
    conds = cfn.conditions(T, cfn.parameters(T, RedisShards=4, RedisReplicasPerShard=2))
    p = redis_group(RedisShards=4, RedisReplicasPerShard=2)
    assert p["NumNodeGroups"] == {"Ref": "RedisShards"}
    assert p["ReplicasPerNodeGroup"] == {"Ref": "RedisReplicasPerShard"}
    assert "NumCacheClusters" not in p  # ElastiCache refuses both
    assert p["CacheParameterGroupName"] == {"Ref": "RedisClusterParameters"}
    cluster_params = RES["RedisClusterParameters"]
    assert cluster_params["Condition"] == "RedisCluster" and conds["RedisCluster"]
    assert cluster_params["Properties"]["Properties"] == {"cluster-enabled": "yes",
                                                          "maxmemory-policy": "noeviction"}
    assert cluster_params["Properties"]["CacheParameterGroupFamily"] == props("RedisParameters")[
        "CacheParameterGroupFamily"]
    # The same security as one shard: TLS required, RBAC users, encrypted at rest.
    assert (p["TransitEncryptionMode"], p["AtRestEncryptionEnabled"]) == ("required", True)
    assert p["UserGroupIds"] == redis_group()["UserGroupIds"] and "AuthToken" not in p
    assert p["SecurityGroupIds"] == redis_group()["SecurityGroupIds"]
    endpoint = "${RedisGroup.ConfigurationEndPoint.Address}:${RedisGroup.ConfigurationEndPoint.Port}/0"
    env = T["Globals"]["Function"]["Environment"]["Variables"]
    assert cfn.resolve(env["SLUICE_REDIS_URL"], conds) == {"Fn::Sub": f"rediss+cluster://{endpoint}"}
    assert cfn.resolve(T["Outputs"]["RedisEndpoint"]["Value"], conds) == {"Fn::Sub": f"rediss+cluster://{endpoint}"}
    # Settings accepts what the template gives the functions.
    from sluice.core.config import Settings

    Settings(redis_url="rediss+cluster://clustercfg.sluice.abc.use1.cache.amazonaws.com:6379/0")


def test_only_the_gateway_and_the_relay_read_the_generated_job_id_secret() -> None:
    env = props("GatewayFunction")["Environment"]["Variables"]
    secret = env["SLUICE_JOB_ID_SECRET_ARN"]["Ref"]
    assert RES[secret]["Type"] == "AWS::SecretsManager::Secret"
    assert props(secret)["GenerateSecretString"]["PasswordLength"] >= 32  # ids.MIN_KEY_BYTES is 16
    assert env["SLUICE_JOB_ID_HORIZON_HOURS"] == {"Ref": "KafkaRetentionHours"}  # Kafka's retention
    readers: dict[str, list[Any]] = {}
    for name, role in _function_roles().items():
        for policies in cfn.variants(role["Properties"].get("Policies", [])):
            for policy in policies:
                for statement in policy["PolicyDocument"]["Statement"]:
                    if secret in json.dumps(statement["Resource"]):
                        readers.setdefault(name, []).append(statement["Action"])
    # The relay verifies ids (issue 19); the rotation function writes it
    # (tests/infra/test_template_security.py scopes that role).
    # The four functions that mint ids, one per kind of caller (issue 27), all read it.
    minting = {"GatewayFunction", "OperatorFunction", "InternalFunction", "FiringsFunction"}
    assert set(readers) == minting | {"RelayFunction", "SecretRotationFunction"}
    for name in minting:
        assert props(name)["Environment"]["Variables"]["SLUICE_JOB_ID_SECRET_ARN"] == {"Ref": secret}, name
    for reader in (*sorted(minting), "RelayFunction"):
        assert all(actions == ["secretsmanager:GetSecretValue"] for actions in readers[reader]), reader
    assert props("RelayFunction")["Environment"]["Variables"]["SLUICE_JOB_ID_SECRET_ARN"] == {"Ref": secret}


@pytest.mark.parametrize("shards", [1, 3])
def test_redis_never_evicts(shards: int) -> None:
    params = redis_group(RedisShards=shards)["CacheParameterGroupName"]
    assert RES[params["Ref"]]["Type"] == "AWS::ElastiCache::ParameterGroup"
    assert props(params["Ref"])["Properties"]["maxmemory-policy"] == "noeviction"


# ------------------------------------------------------------------ IAM


def _function_roles() -> dict[str, dict[str, Any]]:
    out = cfn.transformed()
    roles = {}
    for name, fn in cfn.resources(out, "AWS::Lambda::Function").items():
        role = fn["Properties"]["Role"]
        assert cfn.is_getatt(role, role["Fn::GetAtt"][0], "Arn"), f"{name} must get a role from this stack"
        roles[name] = out["Resources"][role["Fn::GetAtt"][0]]
    return roles


def test_every_function_has_its_own_role() -> None:
    roles = _function_roles()
    assert {"GatewayFunction", "RelayFunction", "WorkerFunction"} <= set(roles)
    assert len({id(r) for r in roles.values()}) == len(roles)
    for name, role in roles.items():
        statement, = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        assert statement["Principal"] == {"Service": ["lambda.amazonaws.com"]}, name


def test_no_role_has_a_wildcard_action_or_an_unexplained_wildcard_resource() -> None:
    for name, role in _function_roles().items():
        for arn in role["Properties"].get("ManagedPolicyArns", []):
            assert arn.rsplit("/", 1)[-1] in ALLOWED_MANAGED_POLICIES, f"{name}: {arn}"
        for policies in cfn.variants(role["Properties"].get("Policies", [])):
            for policy in policies:
                for statement in policy["PolicyDocument"]["Statement"]:
                    assert statement["Effect"] == "Allow", name
                    actions = statement["Action"]
                    for action in [actions] if isinstance(actions, str) else actions:
                        assert "*" not in action, f"{name}: wildcard action {action}"
                    resources = statement["Resource"]
                    if (name, tuple(actions)) in ALLOWED_WILDCARD_RESOURCES:
                        continue
                    for resource in [resources] if not isinstance(resources, list) else resources:
                        assert resource != "*", f"{name}: Resource '*' for {actions}"


def test_policy_templates_are_scoped_to_this_stacks_resources() -> None:
    scoped = {"TableName", "BucketName", "SecretArn", "FunctionName", "QueueName"}
    seen = 0
    for name, fn in cfn.resources(T, "AWS::Serverless::Function").items():
        for policies in cfn.variants(fn["Properties"].get("Policies", [])):
            for policy in policies:
                if "Statement" in policy:
                    continue
                (template_name, args), = policy.items()
                for key, value in args.items():
                    assert key in scoped, f"{name}: {template_name} {key}"
                    target = value.get("Ref") or value.get("Fn::GetAtt", [None])[0]
                    assert target in RES, f"{name}: {template_name} must name a resource of this stack"
                    seen += 1
    assert seen >= 8


def test_worker_may_send_only_to_its_dead_letter_queue_and_put_only_results() -> None:
    statements = [s for p in props("WorkerFunction")["Policies"] if "Statement" in p for s in p["Statement"]]
    by_action = {a: s["Resource"] for s in statements for a in s["Action"]}
    assert by_action["sqs:SendMessage"] == {"Fn::GetAtt": ["WorkerDeadLetterQueue", "Arn"]}
    assert by_action["s3:PutObject"] == {"Fn::Sub": "${ResultsBucket.Arn}/results/*"}  # issue 19: a prefix


# ------------------------------------------------------------------ API


def _api(**overrides: Any) -> dict[str, Any]:
    conds = cfn.conditions(T, cfn.parameters(T, **overrides))
    return cfn.resolve(props("Api")["DefinitionBody"], conds)  # type: ignore[no-any-return]


def _operations(body: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(path, method, op) for path, item in body["paths"].items() for method, op in item.items()]


def test_api_requires_sigv4_by_default() -> None:
    assert T["Parameters"]["ApiAuthMode"]["Default"] == "IAM"
    body = _api()
    scheme = body["components"]["securitySchemes"]["sigv4"]
    assert scheme["x-amazon-apigateway-authtype"] == "awsSigv4"
    ops = _operations(body)
    assert len(ops) == 6 + len(ADMIN_OPS)
    for path, method, op in ops:
        assert op["security"] == [{"sigv4": []}], f"{method} {path}"


ADMIN_OPS = {("/v1/admin/queues/{queue}/pause", "post"), ("/v1/admin/queues/{queue}/resume", "post"),
             ("/v1/admin/queues/{queue}/rate", "put"), ("/v1/admin/queues/{queue}/max-in-flight", "put"),
             ("/v1/admin/queues/{queue}/watermarks", "put"), ("/v1/admin/queues/{queue}/dlq", "get"),
             ("/v1/admin/queues/{queue}/dlq", "delete"), ("/v1/admin/queues/{queue}/dlq/redrive", "post"),
             ("/v1/admin/queues/{queue}/schedules", "get"), ("/v1/admin/queues/{queue}/schedules", "post"),
             ("/v1/admin/queues/{queue}/schedules/{name}", "get"),
             ("/v1/admin/queues/{queue}/schedules/{name}", "delete"),
             ("/v1/admin/queues/{queue}/schedules/{name}/pause", "post"),
             ("/v1/admin/queues/{queue}/schedules/{name}/resume", "post"),
             ("/v1/admin/queues", "get"), ("/v1/admin/queues/{queue}", "get"),
             ("/v1/admin/queues/{queue}/caps", "put"), ("/v1/admin/queues/{queue}/jobs", "get"),
             ("/v1/admin/queues/{queue}/jobs/{job_id}/timeline", "get"),  # issue 32
             ("/v1/admin/queues/{queue}/depth", "get"),
             ("/v1/admin/queues/{queue}/sensitive", "put")}  # issue 32's review


@pytest.mark.parametrize("mode", ["IAM", "API_KEY", "IAM_AND_API_KEY"])
def test_the_operator_api_is_sigv4_only_in_every_auth_mode(mode: str) -> None:
    """Issue 17: /v1/admin/... take IAM callers only, even when the API runs with API keys."""
    ops = {(path, method): op for path, method, op in _operations(_api(ApiAuthMode=mode))
           if path.startswith("/v1/admin/")}
    assert set(ops) == ADMIN_OPS
    for (path, method), op in ops.items():
        assert op["security"] == [{"sigv4": []}], f"{method} {path}"
        # per-queue IAM policies can scope them; the listing of every queue is its own resource
        assert path.startswith("/v1/admin/queues/{queue}") or path == "/v1/admin/queues", path


def test_the_templates_operator_routes_are_the_gateways() -> None:
    from sluice.entry.gateway import Gateway
    from sluice.gateway.schedules import Schedules
    from sluice_dev.fakes import FakeScheduleStore
    from tests.unit.test_gateway_fakes import Rig

    rig = Rig()  # a gateway with a schedules table, as the template's (SLUICE_SCHEDULES_TABLE)
    rig.gateway = Gateway(rig.api, schedules=lambda api: Schedules(api, FakeScheduleStore()))
    code, _, doc = rig.call("GET", "/v1/openapi.json")
    assert code == 200
    served = {(p, m) for p, ops in doc["paths"].items() for m in ops if p.startswith("/v1/admin/")}
    assert served == ADMIN_OPS


@pytest.mark.parametrize(("mode", "required"), [("API_KEY", [{"api_key": []}]),
                                                ("IAM_AND_API_KEY", [{"sigv4": [], "api_key": []}])])
def test_api_key_modes_require_a_key_and_a_usage_plan(mode: str, required: list[dict[str, Any]]) -> None:
    body = _api(ApiAuthMode=mode)
    for path, method, op in _operations(body):
        if path.startswith("/v1/admin/"):
            continue  # SigV4 only in every mode (test_the_operator_api_is_sigv4_only_in_every_auth_mode)
        assert op["security"] == required, f"{method} {path}"
    conds = cfn.conditions(T, cfn.parameters(T, ApiAuthMode=mode))
    for name in ("ApiUsagePlan", "ApiKey", "ApiUsagePlanKey"):
        assert conds[RES[name]["Condition"]], name
    assert not cfn.conditions(T, cfn.parameters(T))[RES["ApiKey"]["Condition"]]


def test_every_route_goes_to_its_function_and_bodies_are_validated() -> None:
    """The public routes to GatewayFunction, the operator routes to OperatorFunction (issue 27);
    each function's resource policy is tests/infra/test_template_invokers.py's."""
    body = _api()
    validators = body["x-amazon-apigateway-request-validators"]
    for path, _method, op in _operations(body):
        integration = op["x-amazon-apigateway-integration"]
        assert integration["type"] == "aws_proxy"
        own = "OperatorFunction" if path.startswith("/v1/admin/") else "GatewayFunction"
        assert f"${{{own}.Arn}}" in integration["uri"]["Fn::Sub"], path
        assert path.startswith("/v1/")
        if "requestBody" in op:
            assert validators[op["x-amazon-apigateway-request-validator"]]["validateRequestBody"] is True
    assert "GatewayApiPermission" not in RES


def _schema_limits(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Field -> (type, minimum, maximum), following pydantic's $refs and anyOf wrappers."""
    out = {}
    for field, spec in schema["properties"].items():
        spec = defs.get(spec.get("$ref", "").rsplit("/", 1)[-1], spec)
        # an optional field (``X | None``): the template states X; null is the field left out
        spec = next((s for s in spec.get("anyOf", ()) if s.get("type") != "null"), spec)
        out[field] = (spec.get("type"), spec.get("minimum"), spec.get("maximum"), spec.get("pattern"))
    return out


def test_api_request_models_are_the_gateways_models() -> None:
    from sluice.core.wire import BatchRequest, EnqueueRequest

    schemas = _api()["components"]["schemas"]
    mine = schemas["EnqueueRequest"]
    theirs = EnqueueRequest.model_json_schema()
    assert set(mine["properties"]) == set(theirs["properties"])
    assert set(mine["required"]) == set(theirs.get("required", []))
    assert mine["additionalProperties"] is False and EnqueueRequest.model_config.get("extra") == "forbid"
    assert _schema_limits(mine, {}) == {k: v for k, v in _schema_limits(theirs, {}).items()
                                        if k != "payload"} | {"payload": (None, None, None, None)}
    batch, batch_theirs = schemas["EnqueueBatchRequest"], BatchRequest.model_json_schema()
    jobs, jobs_theirs = batch["properties"]["jobs"], batch_theirs["properties"]["jobs"]
    assert (jobs["minItems"], jobs["maxItems"]) == (jobs_theirs["minItems"], jobs_theirs["maxItems"])
    assert batch["additionalProperties"] is False
    assert {k: v for k, v in jobs["items"].items()} == mine


def test_api_stage_is_throttled_and_logged() -> None:
    p = props("Api")
    (settings,) = p["MethodSettings"]
    assert settings["ThrottlingRateLimit"] == {"Ref": "ApiThrottleRatePerSecond"}
    assert settings["ThrottlingBurstLimit"] == {"Ref": "ApiThrottleBurst"}
    fmt = json.loads(p["AccessLogSetting"]["Format"])
    assert {"requestId", "status", "caller"} <= set(fmt)
    assert cfn.is_getatt(p["AccessLogSetting"]["DestinationArn"], "ApiAccessLogGroup", "Arn")
    # Stage logging needs the account's CloudWatch role first; the stage variable orders them.
    assert "ApiGatewayAccount" in json.dumps(p["Variables"])
    cap = T["Parameters"]["MaxPayloadBytes"]
    assert cap["MaxValue"] == 10 * 1024 * 1024
    assert T["Globals"]["Function"]["Environment"]["Variables"]["SLUICE_MAX_PAYLOAD_BYTES"] == {
        "Ref": "MaxPayloadBytes"}


# ------------------------------------------------------------------ functions


def test_worker_async_invocations_are_never_retried_and_fail_to_a_dlq() -> None:
    configs = [c["Properties"] for c in cfn.resources(T, "AWS::Lambda::EventInvokeConfig").values()
               if c["Properties"]["FunctionName"] == {"Ref": "WorkerFunction"}]
    assert len(configs) == 1
    (config,) = configs
    assert config["MaximumRetryAttempts"] == 0
    destination = config["DestinationConfig"]["OnFailure"]["Destination"]
    assert cfn.is_getatt(destination, destination["Fn::GetAtt"][0], "Arn")
    assert RES[destination["Fn::GetAtt"][0]]["Type"] == "AWS::SQS::Queue"
    # SAM's EventInvokeConfig property would grant sqs:SendMessage*; the template must not use it.
    assert "EventInvokeConfig" not in props("WorkerFunction")


def test_relay_runs_overlap_at_each_hand_over_with_two_instances_reserved_per_partition_group() -> None:
    """Issue 18, the relay's hand-over: a run stops relay_stop_before_ms before its Timeout, and
    that must be well after the next minute's tick has started the next run (EventBridge and a
    cold start may be late), so no moment is left with no relay; two runs per group then
    overlap, and the reservation covers both (a third would be throttled, and never is needed)."""
    from sluice.core.config import Settings

    p = props("RelayFunction")
    groups = T["Parameters"]["RelayPartitionGroups"]["AllowedValues"]
    assert "Events" not in p  # rules of their own (issue 27): RelayFunctionPolicy admits them by ARN
    ticks = [r for r in _rules_of("RelayFunction").values()]
    assert len(ticks) == max(groups)
    assert {t["Properties"]["ScheduleExpression"] for t in ticks} == {"rate(1 minute)"}
    runs_s = p["Timeout"] - Settings().relay_stop_before_ms / 1000
    assert runs_s >= 60 + 20, "a run must outlast the next tick by a late start's worth"
    assert runs_s < 2 * 60, "at most two runs of a group overlap"
    assert p["Timeout"] <= 900
    for groups_wanted in groups:
        params = cfn.parameters(T, RelayPartitionGroups=groups_wanted)
        conds = cfn.conditions(T, params)
        states = [cfn.resolve(t["Properties"].get("State", "ENABLED"), conds) for t in ticks]
        enabled = [s for s in states if s == "ENABLED"]
        assert len(enabled) == groups_wanted
        assert cfn.resolve(p["ReservedConcurrentExecutions"], conds) == 2 * groups_wanted
    unreserved = cfn.conditions(T, cfn.parameters(T, ReserveRelayConcurrency="false"))
    assert cfn.resolve(p["ReservedConcurrentExecutions"], unreserved) == {"Ref": "AWS::NoValue"}


def _rules_of(function: str) -> dict[str, dict[str, Any]]:
    """The schedule rules (AWS::Events::Rule) whose target is ``function``."""
    return {lid: r for lid, r in cfn.resources(T, "AWS::Events::Rule").items()
            if any(cfn.is_getatt(x["Arn"], function) for x in r["Properties"]["Targets"])}


def test_safety_net_sends_a_valid_dispatch_event() -> None:
    from sluice.core.models import DispatchEvent

    assert "Events" not in props("WorkerFunction")
    (rule,) = _rules_of("WorkerFunction").values()
    assert rule["Properties"]["ScheduleExpression"] == {"Ref": "SafetyNetRate"}
    (event,) = rule["Properties"]["Targets"]
    text, values = event["Input"]["Fn::Sub"]
    params = cfn.parameters(T, SafetyNetQueues="emails,thumbnails")
    joined = values["Queues"]["Fn::Join"]
    values = {"Queues": joined[0].join(params[joined[1]["Ref"]]), "WorkerBatch": params["WorkerBatch"]}
    parsed = DispatchEvent.model_validate_json(cfn.sub(text, values))
    assert parsed.queues == ["emails", "thumbnails"] and parsed.source == "safety-net"
    assert parsed.batch == params["WorkerBatch"]


def test_environment_variables_are_settings_fields() -> None:
    from sluice.core.config import Settings

    names = set(T["Globals"]["Function"]["Environment"]["Variables"])
    for fn in cfn.resources(T, "AWS::Serverless::Function").values():
        names |= set(fn["Properties"].get("Environment", {}).get("Variables", {}))
    sluice_vars = {n for n in names if n.startswith("SLUICE_")}
    assert len(sluice_vars) > 15
    unknown = {n for n in sluice_vars if n.removeprefix("SLUICE_").lower() not in Settings.model_fields}
    assert not unknown, f"not Settings fields (they would be ignored): {sorted(unknown)}"


def test_the_limits_are_parameters_with_the_settings_defaults() -> None:
    """Every function reads the same limits (gateway, relay and worker all build the engine)."""
    from sluice.core.config import Settings

    env = T["Globals"]["Function"]["Environment"]["Variables"]
    pairs = (("MaxDelayedPerQueue", "max_delayed_per_queue"), ("MaxDeadPerQueue", "max_dead_per_queue"),
             ("DeadKeepPerQueue", "dead_keep_per_queue"), ("DeadRetentionHours", "dead_retention_hours"),
             ("MaxQueues", "max_queues"), ("QueueAllowList", "queue_allow_list"),
             ("RedisPushMemoryPercent", "redis_push_memory_percent"),
             ("QueueBudgetBytes", "queue_budget_bytes"), ("RedisBudgetBytes", "redis_budget_bytes"))
    for param, field in pairs:
        assert env[f"SLUICE_{field.upper()}"] == {"Ref": param}
        assert T["Parameters"][param]["Default"] == Settings.model_fields[field].default, param
    pattern = T["Parameters"]["QueueAllowList"]["AllowedPattern"]
    assert re.fullmatch(pattern, "") and re.fullmatch(pattern, "emails,thumbs")
    assert not re.fullmatch(pattern, "Emails") and not re.fullmatch(pattern, "a,,b")


def test_functions_share_the_layer_and_log_to_retained_groups() -> None:
    layer = props("SharedLayer")
    assert layer["ContentUri"] == "shared/" and RES["SharedLayer"]["Metadata"]["BuildMethod"] == "makefile"
    assert T["Globals"]["Function"]["Architectures"] == ["arm64"] == layer["CompatibleArchitectures"]
    assert T["Globals"]["Function"]["Runtime"] == "python3.12"
    for name, fn in cfn.resources(T, "AWS::Serverless::Function").items():
        p = fn["Properties"]
        # Outside the VPC, boto3 only.
        # The layer, outside the VPC: docs/events.md (no endpoint); Sluice's registrar, as a team's; the
        # team map and scheduler functions, so the VPC needs no SSM or Scheduler endpoint (issue 33).
        if name in ("EventsFunction", "RegistrarFunction", "TeamMapFunction", "SchedulerFunction"):
            assert p["Layers"] == [{"Ref": "SharedLayer"}] and "VpcConfig" not in p, name
        elif name not in ("KafkaBootstrapFunction", "SecretRotationFunction", "PrefixListsFunction"):
            assert p["Layers"] == [{"Ref": "SharedLayer"}], name
            # At the defaults (HandlerEgress=none); the worker's egress choices: test_template_egress.py.
            groups = cfn.resolve(p["VpcConfig"]["SecurityGroupIds"], DEFAULTS)
            assert groups == [{"Ref": "FunctionSecurityGroup"}], name
            if name != "WorkerFunction":
                assert p["VpcConfig"]["SecurityGroupIds"] == [{"Ref": "FunctionSecurityGroup"}], name
        group = p["LoggingConfig"]["LogGroup"]["Ref"]
        assert props(group)["RetentionInDays"] == {"Ref": "LogRetentionDays"}, name
    for name, group in cfn.resources(T, "AWS::Logs::LogGroup").items():
        assert "RetentionInDays" in group["Properties"], name


def test_infra_handlers_exist() -> None:
    for name, fn in cfn.resources(T, "AWS::Serverless::Function").items():
        p = fn["Properties"]
        module, function = p.get("Handler", T["Globals"]["Function"]["Handler"]).split(".")
        source = cfn.ROOT / p["CodeUri"] / f"{module}.py"
        if not p["CodeUri"].startswith("infra/"):
            continue  # functions/* belong to their own issues; test_build checks them once present
        assert re.search(rf"^def {function}\(", source.read_text(), re.M), f"{name}: {source}"


# ------------------------------------------------------------------ S3, network, nested stacks


def test_results_bucket_is_private_encrypted_tls_only_and_expires() -> None:
    p = props("ResultsBucket")
    assert p["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]
    assert all(p["PublicAccessBlockConfiguration"].values()) and len(p["PublicAccessBlockConfiguration"]) == 4
    (rule,) = p["LifecycleConfiguration"]["Rules"]
    assert rule["ExpirationInDays"]["Fn::FindInMap"][0] == "ResultExpiry"
    expiry = T["Mappings"]["ResultExpiry"]
    for days in T["Parameters"]["RetentionDays"]["AllowedValues"]:
        assert expiry[str(days)]["Days"] == days + 1, "objects outlive the items that point at them"
    (deny,) = props("ResultsBucketPolicy")["PolicyDocument"]["Statement"]
    assert deny["Effect"] == "Deny" and deny["Condition"]["Bool"]["aws:SecureTransport"] == "false"


def test_vpc_endpoints_cover_every_api_the_functions_call() -> None:
    nested = cfn.load(cfn.NESTED["endpoints"])
    services = {r["Properties"]["ServiceName"]["Fn::Sub"].rsplit(".", 1)[-1]
                for r in cfn.resources(nested, "AWS::EC2::VPCEndpoint").values()}
    # Issue 33: no STS (no function calls it), Scheduler or SSM (called from outside the VPC).
    assert services == {"dynamodb", "s3", "lambda", "secretsmanager"}
    # No route out at the defaults (HandlerEgress=none): every way out is a choice (test_template_egress.py).
    network = cfn.load(cfn.NESTED["network"])
    conds = cfn.conditions(network, cfn.parameters(network))
    for kind in ("AWS::EC2::InternetGateway", "AWS::EC2::NatGateway"):
        made = [n for n, r in cfn.resources(network, kind).items() if conds[r["Condition"]]]
        assert not made, made


@pytest.mark.parametrize("resource", ["Network", "Endpoints", "Observability"])
def test_nested_stacks_get_exactly_the_parameters_they_declare(resource: str) -> None:
    p = props(resource)
    child = cfn.load(cfn.ROOT / p["TemplateURL"])
    declared = child["Parameters"]
    assert set(p["Parameters"]) <= set(declared)
    assert {n for n, spec in declared.items() if "Default" not in spec} <= set(p["Parameters"])


# ------------------------------------------------------------------ observability


def test_alarms_watch_the_metrics_the_code_emits() -> None:
    from sluice.worker.runtime import telemetry

    obs = cfn.load(cfn.NESTED["observability"])
    alarms = cfn.resources(obs, "AWS::CloudWatch::Alarm")
    expressions = " ".join(m.get("Expression", "") for a in alarms.values()
                           for m in a["Properties"].get("Metrics", []))
    for metric in (telemetry.JOBS_DEAD_LETTERED, telemetry.FENCED_WRITES_REJECTED, "RelayLag"):
        assert f"({metric}) FROM {telemetry.NAMESPACE}" in expressions, metric
    plain = {a["Properties"].get("MetricName") for a in alarms.values()}
    assert {"ApproximateNumberOfMessagesVisible", "5XXError", "SumOffsetLag"} <= plain
    # Every function that answers a caller or runs jobs has an error-rate alarm on its own name: the
    # split functions (issue 27) as the public one.
    rates = {n: a["Properties"]["Metrics"][0]["MetricStat"]["Metric"]["Dimensions"][0]["Value"]["Ref"]
             for n, a in alarms.items() if "ErrorRate" in n}
    assert sorted(rates.values()) == sorted(f"{f}FunctionName" for f in (
        "Gateway", "Operator", "Internal", "Firings", "Relay", "Worker"))
    passed = props("Observability")["Parameters"]
    for function in ("Gateway", "Operator", "Internal", "Firings", "Relay", "Worker"):
        assert passed[f"{function}FunctionName"] == {"Ref": f"{function}Function"}, function
    for name, alarm in alarms.items():
        assert alarm["Properties"]["AlarmActions"] == [{"Ref": "AlarmTopic"}], name


@pytest.mark.parametrize("nodes", range(2, 7))
def test_every_redis_node_the_template_can_create_has_a_memory_alarm(nodes: int) -> None:
    """CacheNodes allows 2..6 nodes and any of them may be the primary after a failover: each one
    (and no node that does not exist) is watched, on the alarm topic."""
    assert redis_group()["NumCacheClusters"] == {"Ref": "CacheNodes"}
    assert (T["Parameters"]["CacheNodes"]["MinValue"], T["Parameters"]["CacheNodes"]["MaxValue"]) == (2, 6)
    passed = cfn.resolve(props("Observability")["Parameters"]["CacheNodes"], {"SmallProfile": False})
    assert passed == {"Ref": "CacheNodes"}  # Profile=small passes its 1 (test_template_profiles.py)
    obs = cfn.load(cfn.NESTED["observability"])
    conds = cfn.conditions(obs, cfn.parameters(obs, CacheNodes=nodes, RedisGroupId="grp"))
    watched = set()
    for name, alarm in cfn.resources(obs, "AWS::CloudWatch::Alarm").items():
        if "Condition" in alarm and not conds[alarm["Condition"]]:
            continue
        p = alarm["Properties"]
        if p.get("MetricName") != "DatabaseMemoryUsagePercentage":
            continue
        assert p["Namespace"] == "AWS/ElastiCache" and p["Threshold"] <= 90, name
        (dim,) = p["Dimensions"]
        assert dim["Name"] == "CacheClusterId"
        watched.add(cfn.sub(dim["Value"]["Fn::Sub"], {"RedisGroupId": "grp"}))
        assert p["AlarmActions"] == [{"Ref": "AlarmTopic"}], name
    assert watched == {f"grp-{i:03d}" for i in range(1, nodes + 1)}


@functools.cache
def _observability() -> dict[str, Any]:
    return cfn.load(cfn.NESTED["observability"])


def _alarm_nodes(name: str, props_: dict[str, Any], values: dict[str, Any]) -> list[str] | None:
    """The node ids a resolved Redis memory alarm reads, or None if it is not one."""
    stats = [m["MetricStat"] for m in props_.get("Metrics", []) if "MetricStat" in m]
    if props_.get("MetricName") == "DatabaseMemoryUsagePercentage":
        dims = [props_["Dimensions"]]
    elif stats and all(s["Metric"]["MetricName"] == "DatabaseMemoryUsagePercentage" for s in stats):
        dims = [s["Metric"]["Dimensions"] for s in stats]
    else:
        return None
    nodes = []
    for (dim,) in dims:
        assert dim["Name"] == "CacheClusterId", name
        nodes.append(cfn.sub(dim["Value"]["Fn::Sub"], values))
    return nodes


def _memory_alarms(**params: Any) -> dict[str, dict[str, Any]]:
    """The Redis memory alarms that exist for these parameter values (the observability stack's
    own and those of the nested stacks it creates), with every Fn::If decided and every Ref to a
    parameter resolved, and the node ids each one reads."""
    obs = _observability()
    values = cfn.parameters(obs, RedisGroupId="grp", **params)
    conds = cfn.conditions(obs, values)
    out = {}
    for name, alarm in cfn.resources(obs, "AWS::CloudWatch::Alarm").items():
        if "Condition" not in alarm or conds[alarm["Condition"]]:
            p = cfn.resolve(alarm["Properties"], conds)
            nodes = _alarm_nodes(name, p, values)
            if nodes is not None:
                out[name] = {"properties": p, "nodes": nodes, "topic": {"Ref": "AlarmTopic"}}
    for name, stack in cfn.resources(obs, "AWS::CloudFormation::Stack").items():
        if "Condition" in stack and not conds[stack["Condition"]]:
            continue
        child = _load_child(stack["Properties"]["TemplateURL"])
        passed = stack["Properties"]["Parameters"]
        child_values = cfn.parameters(child, **{
            k: values[v["Ref"]] if isinstance(v, dict) and v.get("Ref") in values else v
            for k, v in passed.items()})
        child_conds = cfn.conditions(child, child_values)
        for alarm_name, alarm in cfn.resources(child, "AWS::CloudWatch::Alarm").items():
            p = cfn.resolve(alarm["Properties"], child_conds)
            nodes = _alarm_nodes(f"{name}.{alarm_name}", p, child_values)
            if nodes is not None:
                # The topic the child's actions name, as the parent passes it.
                (action,) = p["AlarmActions"]
                out[f"{name}.{alarm_name}"] = {"properties": p, "nodes": nodes,
                                               "topic": passed[action["Ref"]]}
    return out


@functools.cache
def _load_child(template_url: str) -> dict[str, Any]:
    return cfn.load(cfn.NESTED["observability"].parent / template_url)


def test_cluster_parameters_reach_the_observability_stack_with_the_same_bounds() -> None:
    """The alarms can only cover every shard and replica the group can have if the nested stack
    accepts every value the parent does."""
    obs = cfn.load(cfn.NESTED["observability"])
    passed = props("Observability")["Parameters"]
    # RedisShards: the standard profile's as given, small's and large's from the Profiles mapping (issue 33)
    profiled = {"Fn::If": ["StandardProfile", {"Ref": "RedisShards"},
                           {"Fn::FindInMap": ["Profiles", {"Ref": "Profile"}, "RedisShards"]}]}
    assert passed["RedisShards"] == profiled
    for name in ("RedisShards", "RedisReplicasPerShard"):
        assert passed[name] in ({"Ref": name}, profiled)
        parent, child = T["Parameters"][name], obs["Parameters"][name]
        assert (child["MinValue"], child["MaxValue"], child["Default"]) == \
            (parent["MinValue"], parent["MaxValue"], parent["Default"]), name


@pytest.mark.parametrize(("shards", "replicas"), [(3, 2), (2, 1), (4, 5), (11, 3), (89, 1), (90, 5)])
def test_every_node_of_every_shard_has_a_memory_alarm_in_cluster_mode(shards: int, replicas: int) -> None:
    """Cluster mode names nodes <group>-<shard 0001..>-<node 001..> (sluice-redis-0002-001): each
    one, and no node that does not exist, is read by a memory alarm at 80% on the alarm topic.
    The one-shard alarms (<group>-001 ...), whose nodes do not exist here, are off."""
    alarms = _memory_alarms(RedisShards=shards, RedisReplicasPerShard=replicas, CacheNodes=6)
    watched = [node for a in alarms.values() for node in a["nodes"]]
    expected = {f"grp-{s:04d}-{n:03d}" for s in range(1, shards + 1) for n in range(1, replicas + 2)}
    assert sorted(watched) == sorted(expected)
    for name, alarm in alarms.items():
        p = alarm["properties"]
        assert p["Threshold"] == 80 and p["ComparisonOperator"] == "GreaterThanThreshold", name
        assert p["AlarmActions"] == p["OKActions"] and alarm["topic"] == {"Ref": "AlarmTopic"}, name
        assert len({n.rsplit("-", 1)[0] for n in alarm["nodes"]}) == 1, f"{name} mixes shards"
        stats = [m for m in p["Metrics"] if "MetricStat" in m]
        assert len(stats) <= 10, f"{name}: a metric-math alarm reads at most 10 metrics"
        assert all(m["MetricStat"]["Stat"] == "Maximum" and m["ReturnData"] is False for m in stats), name
        (watches,) = [m for m in p["Metrics"] if m.get("ReturnData")]
        # The largest of the shard's nodes, point by point: any node over 80% breaches.
        assert watches["Expression"] == "MAX(METRICS())", name


@pytest.mark.parametrize("nodes", [1, 2, 6])  # 1: the small profile's single node (issue 33)
def test_one_shard_keeps_its_per_node_memory_alarms_and_no_shard_alarm(nodes: int) -> None:
    alarms = _memory_alarms(CacheNodes=nodes)
    watched = sorted(n for a in alarms.values() for n in a["nodes"])
    assert watched == [f"grp-{i:03d}" for i in range(1, nodes + 1)]
    assert all(name.startswith("RedisMemoryAlarmNode") for name in alarms)


def test_shard_alarm_stacks_get_exactly_the_parameters_they_declare() -> None:
    obs = _observability()
    stacks = cfn.resources(obs, "AWS::CloudFormation::Stack")
    assert stacks
    for name, stack in stacks.items():
        declared = _load_child(stack["Properties"]["TemplateURL"])["Parameters"]
        passed = stack["Properties"]["Parameters"]
        assert set(passed) <= set(declared), name
        assert {n for n, spec in declared.items() if "Default" not in spec} <= set(passed), name
        refs = [v["Ref"] for v in passed.values() if isinstance(v, dict) and "Ref" in v]
        assert set(refs) <= set(obs["Parameters"]) | set(obs["Resources"]), name
        assert re.fullmatch(declared["Shard"]["AllowedPattern"], passed["Shard"]), name


def test_every_shard_count_and_replica_count_is_covered_exactly() -> None:
    """All 90 x 5 cluster configurations the parameters allow: no shard or node missed, none extra."""
    obs = _observability()
    shards_max = obs["Parameters"]["RedisShards"]["MaxValue"]
    replicas_max = obs["Parameters"]["RedisReplicasPerShard"]["MaxValue"]
    for shards in range(2, shards_max + 1):
        for replicas in range(1, replicas_max + 1):
            watched = [n for a in _memory_alarms(RedisShards=shards, RedisReplicasPerShard=replicas).values()
                       for n in a["nodes"]]
            assert len(watched) == shards * (replicas + 1) == len(set(watched)), (shards, replicas)
            assert max(watched) == f"grp-{shards:04d}-{replicas + 1:03d}", (shards, replicas)


def test_generated_shard_alarms_match_their_generator() -> None:
    """infra/observability.yaml holds exactly what infra/redis_shard_alarms.py writes."""
    from infra import redis_shard_alarms

    text = cfn.NESTED["observability"].read_text()
    assert redis_shard_alarms.splice(text) == text, "run: python infra/redis_shard_alarms.py"


def test_alarm_topic_uses_a_key_whose_policy_lets_cloudwatch_publish() -> None:
    """alias/aws/sns's policy does not admit CloudWatch: alarms on such a topic fail silently."""
    obs = cfn.load(cfn.NESTED["observability"])
    topic = obs["Resources"]["AlarmTopic"]["Properties"]
    key_ref = topic["KmsMasterKeyId"]
    assert isinstance(key_ref, dict) and set(key_ref) == {"Ref"}, f"not a key of this stack: {key_ref}"
    key = obs["Resources"][key_ref["Ref"]]
    assert key["Type"] == "AWS::KMS::Key"
    assert key["Properties"].get("EnableKeyRotation") is True
    statements = key["Properties"]["KeyPolicy"]["Statement"]
    cloudwatch = [s for s in statements if s["Effect"] == "Allow"
                  and s.get("Principal", {}).get("Service") == "cloudwatch.amazonaws.com"]
    assert cloudwatch, "no statement admits cloudwatch.amazonaws.com"
    actions = {a for s in cloudwatch
               for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    assert {"kms:Decrypt", "kms:GenerateDataKey*"} <= actions
    admins = [s for s in statements if s["Action"] == "kms:*"]
    assert admins and all("root" in json.dumps(s["Principal"]) for s in admins), "key must stay manageable"


@pytest.mark.parametrize("http_api", ["", "a1b2c3"])
def test_dashboard_body_is_valid_json(http_api: str) -> None:
    obs = cfn.load(cfn.NESTED["observability"])
    text, _ = cfn.dashboard(obs, HttpApiId=http_api)
    names = set(re.findall(r"\$\{([A-Za-z0-9:.]+)\}", text))
    assert names <= set(obs["Parameters"]) | {"AWS::Region"}
    widgets = json.loads(cfn.sub(text, {n: "x" for n in names} | {"RelayLagAlarmThreshold": 1}))
    assert len(widgets["widgets"]) >= 6


def test_template_outputs_the_api_url_and_table_names() -> None:
    outputs = T["Outputs"]
    url = cfn.resolve(outputs["ApiUrl"]["Value"], {"SmallProfile": False})  # the small profile's: HttpApi
    assert url["Fn::Sub"].startswith("https://${Api}.execute-api.")
    assert outputs["JobsTableName"]["Value"] == {"Ref": "JobsTable"}
    assert outputs["IdempotencyTableName"]["Value"] == {"Ref": "IdempotencyTable"}


def test_layer_pins_satisfy_the_package_dependencies() -> None:
    import tomllib

    from packaging.requirements import Requirement

    found = tomllib.loads((cfn.ROOT / "pyproject.toml").read_text())["project"]
    # The client's dependencies and the Lambda runtime's extra (issue 31): the layer runs both.
    project = [*found["dependencies"], *found["optional-dependencies"]["lambda"]]
    pins = {}
    for line in Path(cfn.ROOT / "shared/requirements.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", f"unpinned: {line}"
            pins[req.name.lower()] = spec.version
    for dep in map(Requirement, project):
        assert dep.name.lower() in pins, f"{dep.name} missing from the layer"
        pinned = pins[dep.name.lower()]
        assert dep.specifier.contains(pinned), f"{dep.name}=={pinned} does not satisfy {dep}"


@pytest.mark.parametrize("environment", ["dev", "prod"])
def test_samconfig_overrides_are_valid_parameter_values(environment: str) -> None:
    import tomllib

    config = tomllib.loads((cfn.ROOT / "samconfig.toml").read_text())[environment]["deploy"]["parameters"]
    assert "CAPABILITY_IAM" in config["capabilities"]
    overrides = dict(item.split("=", 1) for item in config["parameter_overrides"])
    declared = T["Parameters"]
    for name, value in overrides.items():
        spec = declared[name]
        if "AllowedValues" in spec:
            assert value in {str(v) for v in spec["AllowedValues"]}, f"{environment}: {name}={value}"
        if spec["Type"] == "Number":
            assert spec.get("MinValue", float("-inf")) <= float(value) <= spec.get("MaxValue", float("inf"))
        if "AllowedPattern" in spec:
            assert re.fullmatch(spec["AllowedPattern"], value), f"{environment}: {name}={value}"
    # Whatever the environment, the conditions still give a working stack.
    conds = cfn.conditions(T, cfn.parameters(T, **overrides))
    assert conds["CreateEndpoints"] or not conds["CreateNetwork"]


def test_gateway_responses_are_problem_json_whatever_the_message() -> None:
    responses = _api()["x-amazon-apigateway-gateway-responses"]
    assert {"BAD_REQUEST_BODY", "THROTTLED", "DEFAULT_4XX", "DEFAULT_5XX"} <= set(responses)
    hostile = '"quoted" \\ message'
    for name, response in responses.items():
        content_type = response["responseParameters"]["gatewayresponse.header.Content-Type"]
        assert content_type == "'application/problem+json'", name
        template = response["responseTemplates"]["application/json"]
        # What API Gateway substitutes: messageString arrives quoted and escaped for JSON.
        body = (template.replace("$context.error.messageString", json.dumps(hostile))
                .replace("$context.error.responseType", "ACCESS_DENIED"))
        problem = json.loads(body)
        assert problem["type"] == "about:blank" and problem["detail"] == hostile, name
        if "statusCode" in response:
            assert problem["status"] == response["statusCode"], name


# ------------------------------------------------------------------ schedules (issue 17)

SCHEDULE_ARNS = {"Fn::Sub": "arn:${AWS::Partition}:scheduler:${AWS::Region}:${AWS::AccountId}"
                            ":schedule/${ScheduleGroup}/*"}


def test_the_operator_function_keeps_schedules_in_its_table_and_its_group() -> None:
    """Schedule CRUD is the operator function's (issue 27), its Scheduler calls the scheduler function's
    (issue 33); each schedule targets the firings function."""
    from sluice.core.config import Settings

    operator = props("OperatorFunction")["Environment"]["Variables"]
    assert operator["SLUICE_SCHEDULES_TABLE"] == {"Ref": "SchedulesTable"}
    assert operator["SLUICE_SCHEDULER_FUNCTION_NAME"] == {"Ref": "SchedulerFunction"}
    assert not {"SLUICE_SCHEDULER_GROUP", "SLUICE_SCHEDULER_ROLE_ARN", "SLUICE_FIRINGS_FUNCTION_ARN",
                "SLUICE_FIRINGS_DEAD_LETTER_ARN"} & set(operator)
    env = props("SchedulerFunction")["Environment"]["Variables"]
    assert env["SLUICE_SCHEDULER_GROUP"] == {"Ref": "ScheduleGroup"}
    assert env["SLUICE_SCHEDULER_ROLE_ARN"] == {"Fn::GetAtt": ["SchedulerInvokeRole", "Arn"]}
    pseudo = cfn.parameters(T)
    target = cfn.sub(env["SLUICE_FIRINGS_FUNCTION_ARN"]["Fn::Sub"], pseudo)
    name = cfn.sub(props("FiringsFunction")["FunctionName"]["Fn::Sub"], pseudo)
    assert target == "arn:aws:lambda:us-east-1:123456789012:function:sluice-test-firings"
    assert name == "sluice-test-firings"  # the firings function's own ARN
    assert RES["ScheduleGroup"]["Type"] == "AWS::Scheduler::ScheduleGroup"
    for field in ("schedules_table", "scheduler_group", "scheduler_role_arn", "firings_function_arn",
                  "scheduler_function_name"):
        assert field in Settings.model_fields
    for other in ("GatewayFunction", "InternalFunction", "FiringsFunction"):  # no one else creates them
        variables = props(other)["Environment"]["Variables"]
        assert not {"SLUICE_SCHEDULER_ROLE_ARN", "SLUICE_FIRINGS_FUNCTION_ARN",
                    "SLUICE_GATEWAY_FUNCTION_ARN"} & set(variables), other


def test_the_scheduler_function_may_touch_its_groups_schedules_and_pass_the_invoke_role_only() -> None:
    """Issue 33: the operator's Scheduler calls are the scheduler function's, outside the VPC; its role
    holds exactly Scheduler's three calls on the group and the invoke role's PassRole to Scheduler, and the
    operator keeps only the invoke of that function."""
    from tests.infra.test_template_security import _statements

    statements = _statements(_function_roles()["SchedulerFunction"])
    assert len(statements) == 2 and all(s["Effect"] == "Allow" for s in statements)
    scheduler = [s for s in statements if any(a.startswith("scheduler:") for a in s["Action"])]
    assert len(scheduler) == 1  # one statement, in every variant
    assert sorted(scheduler[0]["Action"]) == ["scheduler:CreateSchedule", "scheduler:DeleteSchedule",
                                              "scheduler:UpdateSchedule"]
    assert scheduler[0]["Resource"] == SCHEDULE_ARNS
    assert "VpcConfig" not in props("SchedulerFunction")
    operator = _statements(_function_roles()["OperatorFunction"])
    invokes = {json.dumps(s, sort_keys=True) for s in operator
               if any(a.startswith("lambda:") for a in s["Action"])}
    (invoke,) = [json.loads(s) for s in invokes]  # the same statement in every variant
    assert invoke["Action"] == ["lambda:InvokeFunction"]
    assert "SchedulerFunction" in json.dumps(invoke["Resource"])
    passing, *same = [s for s in statements if "iam:PassRole" in s["Action"]]
    assert all(s == passing for s in same)
    assert passing["Action"] == ["iam:PassRole"]
    assert passing["Resource"] == {"Fn::GetAtt": ["SchedulerInvokeRole", "Arn"]}
    assert passing["Condition"] == {"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}}
    for name, role in _function_roles().items():  # no other function schedules or passes a role
        if name not in ("SchedulerFunction", "RegistrarFunction"):  # the registrar's: the test below
            for st in _statements(role):
                assert not any(a.startswith("scheduler:") or a == "iam:PassRole" for a in st["Action"]), name


def test_sluices_registrar_may_touch_its_groups_schedules_and_ask_the_default_worker_only() -> None:
    """Issue 31: the default worker's declared schedules are registered by RegistrarFunction, which
    runs the layer's code alone: Scheduler create, update and delete in this stack's group, the
    invoke role passed to Scheduler alone, the routes and schedules tables, the worker's describe.
    The worker function, which runs handler code, holds none of it."""
    from tests.infra.test_template_security import _statements

    roles = _function_roles()
    statements = _statements(roles["RegistrarFunction"])
    by_resource: dict[str, set[str]] = {}
    for st in statements:
        assert st["Effect"] == "Allow"
        by_resource.setdefault(json.dumps(st["Resource"], sort_keys=True), set()).update(st["Action"])
    scheduler = [s for s in statements if any(a.startswith("scheduler:") for a in s["Action"])]
    assert len(scheduler) == 1 and scheduler[0]["Resource"] == SCHEDULE_ARNS
    assert sorted(scheduler[0]["Action"]) == ["scheduler:CreateSchedule", "scheduler:DeleteSchedule",
                                              "scheduler:UpdateSchedule"]
    (passing,) = [s for s in statements if "iam:PassRole" in s["Action"]]
    assert passing["Action"] == ["iam:PassRole"]
    assert passing["Resource"] == {"Fn::GetAtt": ["SchedulerInvokeRole", "Arn"]}
    assert passing["Condition"] == {"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}}

    def on(logical_id: str) -> set[str]:
        return by_resource.pop(json.dumps({"Fn::GetAtt": [logical_id, "Arn"]}), set())

    assert on("RoutesTable") == {"dynamodb:Scan", "dynamodb:PutItem", "dynamodb:DeleteItem",
                                 "dynamodb:ConditionCheckItem"}
    assert on("SchedulesTable") == {"dynamodb:Scan", "dynamodb:GetItem", "dynamodb:PutItem",
                                    "dynamodb:DeleteItem"}
    assert on("WorkerFunction") == {"lambda:InvokeFunction"}
    assert on("SchedulerInvokeRole") == {"iam:PassRole"}
    by_resource.pop(json.dumps(SCHEDULE_ARNS, sort_keys=True))
    # Left: what SAM adds to every function (its logs, X-Ray when Tracing is Active).
    assert all(a.startswith(("logs:", "xray:")) for actions in by_resource.values() for a in actions), \
        by_resource
    env = props("RegistrarFunction")["Environment"]["Variables"]
    assert env["SLUICE_SCHEDULER_GROUP"] == {"Ref": "ScheduleGroup"}
    assert env["SLUICE_SCHEDULER_ROLE_ARN"] == {"Fn::GetAtt": ["SchedulerInvokeRole", "Arn"]}
    assert env["SLUICE_SCHEDULES_TABLE"] == {"Ref": "SchedulesTable"}
    assert "VpcConfig" not in props("RegistrarFunction")  # as a team's registrar: public endpoints
    worker = _statements(roles["WorkerFunction"])
    for st in worker:  # the worker: no Scheduler, no role passed, no schedules or routes table
        assert not any(a.startswith("scheduler:") or a == "iam:PassRole" for a in st["Action"]), st
        assert "SchedulesTable" not in json.dumps(st["Resource"]), st
        assert "RoutesTable" not in json.dumps(st["Resource"]), st
    worker_env = props("WorkerFunction")["Environment"]["Variables"]
    assert not {"SLUICE_SCHEDULES_TABLE", "SLUICE_SCHEDULER_ROLE_ARN", "SLUICE_ROUTES_TABLE"} & \
        set(worker_env)


def test_scheduler_may_invoke_the_firings_function_and_nothing_else() -> None:
    (trust,) = props("SchedulerInvokeRole")["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "scheduler.amazonaws.com"}
    assert trust["Action"] == "sts:AssumeRole"
    assert trust["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
    assert trust["Condition"]["ArnLike"]["aws:SourceArn"] == SCHEDULE_ARNS
    role = props("SchedulerInvokeRole")
    assert "Policies" not in role and "ManagedPolicyArns" not in role
    policy = props("SchedulerInvokePolicy")
    assert policy["RoleName"] == {"Ref": "SchedulerInvokeRole"}
    # and, since issue 29, send a firing whose retries are spent to the firings dead-letter queue
    invoke, dead_letter = policy["PolicyDocument"]["Statement"]
    assert invoke == {"Effect": "Allow", "Action": "lambda:InvokeFunction",
                      "Resource": {"Fn::GetAtt": ["FiringsFunction", "Arn"]}}
    assert dead_letter == {"Effect": "Allow", "Action": "sqs:SendMessage",
                           "Resource": {"Fn::GetAtt": ["FiringsDeadLetterQueue", "Arn"]}}
    assert [n for n, r in RES.items() if r["Type"] == "AWS::IAM::RolePolicy"] == ["SchedulerInvokePolicy"]


def test_the_dashboards_redis_widget_charts_every_node_of_the_group_in_either_mode() -> None:
    """Node ids are <group>-00N on one shard and <group>-000S-00N in cluster mode: the widget
    searches the group's nodes instead of naming -001/-002, which do not exist in cluster mode."""
    obs = cfn.load(cfn.NESTED["observability"])
    text, _ = cfn.dashboard(obs)
    names = set(re.findall(r"\$\{([A-Za-z0-9:.]+)\}", text))
    widgets = json.loads(cfn.sub(text, {n: "x" for n in names} | {"RedisGroupId": "grp",
                                                                  "RelayLagAlarmThreshold": 1}))["widgets"]
    redis = next(w["properties"] for w in widgets if w["properties"].get("title") == "Redis")
    rows = [row[0] for row in redis["metrics"]]
    assert all(isinstance(r, dict) and "expression" in r for r in rows), "no fixed node ids"
    for metric in ("EngineCPUUtilization", "DatabaseMemoryUsagePercentage", "ReplicationLag"):
        assert any(f'MetricName="{metric}"' in r["expression"] and "CacheClusterId=grp'" in r["expression"]
                   and r["expression"].startswith("SEARCH('{AWS/ElastiCache,CacheClusterId}") for r in rows)
