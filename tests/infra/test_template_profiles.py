"""Deploy profiles (issue 33, item 2): template.yaml at Profile=small, standard and large, as CloudFormation
would resolve it, and the cost model's profiles (sluice_dev.cost.profiles) against what it creates.

standard is the parameters as given (today's shape); small and large take their shape from the Profiles
mapping. cfn-lint and `sam validate --lint` for each profile and egress choice: test_lint_profiles.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sluice_dev.cost.profiles import PROFILES
from tests.infra import cfn

T = cfn.template()
ENDPOINTS = cfn.load(cfn.NESTED["endpoints"])


class Deploy:
    """The template at some parameters: its conditions, the resources it creates, values resolved."""

    def __init__(self, doc: dict[str, Any] = T, **overrides: Any) -> None:
        self.doc = doc
        self.params = cfn.parameters(doc, **overrides)
        self.conds = cfn.conditions(doc, self.params)
        self.resources = {name: r for name, r in doc["Resources"].items()
                          if self.conds.get(r.get("Condition", ""), True)}

    def value(self, expr: Any) -> Any:
        """``expr`` with Fn::If decided, and parameter Refs and Fn::FindInMap computed."""
        expr = cfn.resolve(expr, self.conds)
        if isinstance(expr, dict) and set(expr) == {"Ref"} and expr["Ref"] in self.params:
            return self.params[expr["Ref"]]
        if isinstance(expr, dict) and set(expr) == {"Fn::FindInMap"}:
            table, first, second = (self.value(x) for x in expr["Fn::FindInMap"])
            return self.doc["Mappings"][table][first][second]
        if isinstance(expr, dict):
            return {k: self.value(v) for k, v in expr.items()}
        if isinstance(expr, list):
            return [self.value(v) for v in expr]
        return expr

    def props(self, name: str) -> dict[str, Any]:
        return self.value(self.resources[name].get("Properties", {}))  # type: ignore[no-any-return]

    def env(self, function: str) -> dict[str, Any]:
        merged = {**T["Globals"]["Function"]["Environment"]["Variables"],
                  **self.resources[function]["Properties"].get("Environment", {}).get("Variables", {})}
        return self.value(merged)  # type: ignore[no-any-return]


EXISTING = {"VpcId": "vpc-0123456789abcdef0", "PrivateSubnetIds": "subnet-0a,subnet-0b",
            "PrivateRouteTableIds": "rtb-0a"}
EGRESS = ("none", "nat-single", "nat-per-az", "existing-nat")


def at(profile: str, egress: str = "none", **more: Any) -> Deploy:
    existing = EXISTING if egress == "existing-nat" else {}
    return Deploy(Profile=profile, HandlerEgress=egress, **{**existing, **more})


def test_standard_is_the_default_and_takes_the_parameters_as_given() -> None:
    assert T["Parameters"]["Profile"]["Default"] == "standard"
    d = at("standard", CacheNodeType="cache.r7g.xlarge", KafkaPartitions=12, RelayPartitionGroups=2,
           NewVpcSubnetCount=2, RedisShards=2)
    assert "KafkaCluster" in d.resources and "KafkaBrokers" not in d.resources
    assert "Api" in d.resources and "HttpApi" not in d.resources
    redis = d.props("RedisGroup")
    assert (redis["CacheNodeType"], redis["NumNodeGroups"], redis["MultiAZEnabled"]) == (
        "cache.r7g.xlarge", 2, True)
    assert d.env("RelayFunction")["SLUICE_KAFKA_PARTITIONS"] == 12
    assert d.env("RelayFunction")["SLUICE_RELAY_PARTITION_GROUPS"] == 2
    assert d.props("Network")["Parameters"]["SubnetCount"] == 2
    assert d.props("Endpoints")["Parameters"]["InterfaceEndpoints"] == "all"
    assert "FunctionToEndpoints" in d.resources and "FunctionToAwsApis" not in d.resources


@pytest.mark.parametrize("egress", EGRESS)
def test_small_is_two_azs_provisioned_msk_one_cache_node_and_an_http_api(egress: str) -> None:
    d = at("small", egress, CacheNodeType="cache.r7g.xlarge", KafkaPartitions=8)
    assert "KafkaCluster" not in d.resources and "Api" not in d.resources
    if egress != "existing-nat":
        assert d.props("Network")["Parameters"]["SubnetCount"] == 2
    msk = d.props("KafkaBrokers")
    assert (msk["NumberOfBrokerNodes"], msk["BrokerNodeGroupInfo"]["InstanceType"]) == (2, "kafka.t3.small")
    assert msk["ClientAuthentication"]["Sasl"]["Iam"]["Enabled"] is True
    assert msk["ClientAuthentication"]["Unauthenticated"]["Enabled"] is False
    assert msk["EncryptionInfo"]["EncryptionInTransit"] == {"ClientBroker": "TLS", "InCluster": True}
    assert len(msk["BrokerNodeGroupInfo"]["ClientSubnets"]) == 2
    scaling = d.props("KafkaBrokerStorage")
    assert (scaling["ScalableDimension"], scaling["ResourceId"]) == ("kafka:broker-storage:VolumeSize",
                                                                     {"Ref": "KafkaBrokers"})
    assert d.props("KafkaBrokerStorageScaling")["TargetTrackingScalingPolicyConfiguration"]["DisableScaleIn"]
    config = d.props("KafkaBrokersConfiguration")["ServerProperties"]
    assert "default.replication.factor=2" in config and "auto.create.topics.enable=false" in config
    # Every function's Kafka permission names the provisioned cluster.
    assert d.props("KafkaBootstrap")["ClusterArn"] == {"Ref": "KafkaBrokers"}
    redis = d.props("RedisGroup")
    assert (redis["CacheNodeType"], redis["NumCacheClusters"]) == ("cache.t4g.micro", 1)
    assert (redis["MultiAZEnabled"], redis["AutomaticFailoverEnabled"]) == (False, False)
    assert "NumNodeGroups" not in redis
    assert d.props("Observability")["Parameters"]["CacheNodes"] == 1  # one memory alarm, on its one node
    nat = egress in ("nat-single", "nat-per-az")  # a NAT gateway this stack creates
    assert d.props("Endpoints")["Parameters"]["InterfaceEndpoints"] == ("none" if nat else "all")
    assert ("FunctionToAwsApis" in d.resources) is nat and ("FunctionToEndpoints" in d.resources) is not nat


def test_the_small_profiles_http_api_signs_every_route_and_sends_20_events() -> None:
    d = at("small")
    routes = {d.props(n)["RouteKey"]: d.props(n) for n, r in d.resources.items()
              if r["Type"] == "AWS::ApiGatewayV2::Route"}
    assert set(routes) == {"ANY /v1/queues/{proxy+}", "ANY /v1/jobs/{proxy+}", "GET /v1/openapi.json",
                           "ANY /v1/admin/{proxy+}"}
    assert {r["AuthorizationType"] for r in routes.values()} == {"AWS_IAM"}
    integrations = {n: d.props(n) for n, r in d.resources.items()
                    if r["Type"] == "AWS::ApiGatewayV2::Integration"}
    assert {i["PayloadFormatVersion"] for i in integrations.values()} == {"2.0"}
    admin = routes["ANY /v1/admin/{proxy+}"]["Target"]
    assert admin == {"Fn::Sub": "integrations/${HttpApiOperator}"}
    assert d.props("HttpApiOperator")["IntegrationUri"] == {"Fn::GetAtt": ["OperatorFunction", "Arn"]}
    for name in ("ApiUsagePlan", "ApiKey", "ApiWaf", "ApiWafAssociation"):
        assert name not in Deploy(Profile="small", ApiAuthMode="API_KEY", ApiWafRateLimit=100).resources
    # The functions admit the HTTP API's SourceArns: the same paths, the HTTP API's id.
    allow = d.props("GatewayFunctionPolicy")["PolicyDocument"]["Statement"][0]
    arns = allow["Condition"]["ArnLike"]["aws:SourceArn"]
    assert [a["Fn::Sub"][1]["FrontDoor"] for a in arns] == [{"Ref": "HttpApi"}] * 3
    assert at("standard").props("GatewayFunctionPolicy")["PolicyDocument"]["Statement"][0][
        "Condition"]["ArnLike"]["aws:SourceArn"][0]["Fn::Sub"][1]["FrontDoor"] == {"Ref": "Api"}
    assert "HttpApi" in d.value(T["Outputs"]["ApiUrl"]["Value"])["Fn::Sub"]


def test_small_refuses_api_keys_and_waf_before_anything_is_created() -> None:
    rule = T["Rules"]["SmallIsAnHttpApi"]
    assert rule["RuleCondition"] == {"Fn::Equals": [{"Ref": "Profile"}, "small"]}
    asserted = [a["Assert"] for a in rule["Assertions"]]
    assert {"Fn::Equals": [{"Ref": "ApiAuthMode"}, "IAM"]} in asserted
    assert {"Fn::Equals": [{"Ref": "ApiWafRateLimit"}, "0"]} in asserted


def test_small_with_an_existing_kafka_creates_none() -> None:
    d = at("small", KafkaBootstrapServers="b-1:9098", KafkaClusterArn=(
        "arn:aws:kafka:us-east-1:123456789012:cluster/jobs/0f6e5d4c"), KafkaSecurityGroupId="sg-0a")
    kafka = {"KafkaBrokers", "KafkaCluster", "KafkaBrokersConfiguration", "KafkaBootstrap"}
    created = kafka & set(d.resources)
    assert not created


def test_large_is_three_shards_32_partitions_and_four_relay_groups() -> None:
    d = at("large", RedisShards=1, KafkaPartitions=8, RelayPartitionGroups=1,
           CacheNodeType="cache.t4g.small")
    redis = d.props("RedisGroup")
    assert (redis["CacheNodeType"], redis["NumNodeGroups"], redis["ReplicasPerNodeGroup"]) == (
        "cache.r7g.large", 3, 1)
    assert "NumCacheClusters" not in redis and d.conds["RedisCluster"]
    assert d.props("Observability")["Parameters"]["RedisShards"] == 3
    relay = d.env("RelayFunction")
    assert (relay["SLUICE_KAFKA_PARTITIONS"], relay["SLUICE_RELAY_PARTITION_GROUPS"]) == (32, 4)
    assert relay["SLUICE_REDIS_URL"]["Fn::Sub"].startswith("rediss+cluster://")
    assert d.props("KafkaTopics")["Partitions"] == 32
    assert d.conds["RelayGroup2"] and d.conds["RelayGroup3"] and d.conds["RelayGroup4"]
    assert "KafkaCluster" in d.resources and "Api" in d.resources


def test_every_profile_creates_what_the_cost_model_prices() -> None:
    """sluice cost and docs/cost.md price these shapes: they must be what the template creates."""
    interface = {r["Properties"]["ServiceName"]["Fn::Sub"].rsplit(".", 1)[1]: r.get("Condition")
                 for r in ENDPOINTS["Resources"].values()
                 if r["Type"] == "AWS::EC2::VPCEndpoint"
                 and r["Properties"].get("VpcEndpointType") == "Interface"}
    names = {"lambda": "Lambda", "secretsmanager": "Secrets Manager"}
    for name, p in PROFILES.items():
        d = at(name)
        maps = T["Mappings"]["Profiles"][name]
        subnets = d.value(d.resources["Network"]["Properties"]["Parameters"]["SubnetCount"])
        assert p.azs == int(subnets), name
        redis = d.props("RedisGroup")
        assert f"cache.{p.cache_node.replace('_', '.')}" == redis["CacheNodeType"], name
        shards = redis.get("NumNodeGroups", 1)
        nodes = redis.get("NumCacheClusters") or shards * (1 + redis["ReplicasPerNodeGroup"])
        assert (p.cache_nodes, p.cache_shards) == (nodes, shards), name
        assert p.job_partitions == d.env("RelayFunction")["SLUICE_KAFKA_PARTITIONS"], name
        assert p.relay_groups == int(d.env("RelayFunction")["SLUICE_RELAY_PARTITION_GROUPS"]), name
        assert p.api == ("http" if "HttpApi" in d.resources else "rest"), name
        kind = "msk-provisioned" if "KafkaBrokers" in d.resources else "msk-serverless"
        assert p.kafka == kind, name
        if kind == "msk-provisioned":
            assert (p.kafka_brokers, p.kafka_volume_gb) == (maps["KafkaBrokers"], maps["KafkaBrokerVolumeGB"])
            assert f"kafka.{p.kafka_broker.replace('_', '.')}" == maps["KafkaBrokerType"]
        for egress, with_nat in (("none", False), ("nat-single", True)):
            which = at(name, egress).props("Endpoints")["Parameters"]["InterfaceEndpoints"]
            made = [names[k] for k in interface if which != "none"]
            expected = p.endpoints_with_nat if with_nat and p.endpoints_with_nat is not None \
                else p.interface_endpoints
            assert sorted(made) == sorted(expected), (name, egress)


@pytest.mark.parametrize("egress", EGRESS)
def test_large_and_standard_keep_every_endpoint_and_only_the_workers_way_out(egress: str) -> None:
    """Egress is the profile's own choice only in small (its endpoints); large and standard are as before."""
    for profile in ("standard", "large"):
        d = at(profile, egress)
        assert d.props("Endpoints")["Parameters"]["InterfaceEndpoints"] == "all"
        assert "FunctionToAwsApis" not in d.resources and "FunctionToEndpoints" in d.resources
        assert ("HandlerEgressSecurityGroup" in d.resources) is (egress != "none")


OBSERVABILITY = cfn.load(cfn.NESTED["observability"])


def api_watch(profile: str) -> tuple[list[tuple[str, dict[str, Any]]], list[list[Any]]]:
    """What watches the profile's front door in the observability stack as that profile deploys it: each
    API Gateway metric its alarms read (metric name, dimensions), and the dashboard's API widget's rows."""
    d = at(profile)
    passed = d.props("Observability")["Parameters"]
    http_api = passed["HttpApiId"]
    api_id = "a1b2c3" if http_api == {"Ref": "HttpApi"} else http_api  # the HttpApi's id, once created
    params = {"HttpApiId": api_id, "ApiName": "sluice-test-api", "ApiStage": passed["ApiStage"]}
    obs_params = cfn.parameters(OBSERVABILITY, **params)
    conds = cfn.conditions(OBSERVABILITY, obs_params)
    read = []
    for alarm in cfn.resources(OBSERVABILITY, "AWS::CloudWatch::Alarm").values():
        if not conds.get(alarm.get("Condition", ""), True):
            continue
        p = alarm["Properties"]
        metrics = [m["MetricStat"]["Metric"] for m in p.get("Metrics", []) if "MetricStat" in m]
        metrics += [p] if "MetricName" in p else []
        for m in metrics:
            if m["Namespace"] == "AWS/ApiGateway":
                dims = {dim["Name"]: obs_params[dim["Value"]["Ref"]] if isinstance(dim["Value"], dict)
                        else dim["Value"] for dim in m["Dimensions"]}
                read.append((m["MetricName"], dims))
    text, _ = cfn.dashboard(OBSERVABILITY, **params)
    values = {k: "x" if v is None else v for k, v in obs_params.items()} | {"RelayLagAlarmThreshold": 1}
    widgets = json.loads(cfn.sub(text, values))["widgets"]
    (api,) = [w["properties"]["metrics"] for w in widgets if w["properties"].get("title") == "API"]
    return read, api


def test_the_api_alarm_and_widget_watch_the_http_apis_metrics_under_small() -> None:
    """An HTTP API's metrics carry ApiId and Stage $default and are named 4xx and 5xx: under Profile=small
    the 5xx alarm and the dashboard read those (a REST API's ApiName metrics would never have data), and
    under standard and large the REST API's, as before."""
    read, rows = api_watch("small")
    where = {"ApiId": "a1b2c3", "Stage": "$default"}
    assert sorted(read, key=str) == [("5xx", where), ("Count", where)]
    assert [row[1] for row in rows] == ["Count", "4xx", "5xx", "Latency"]
    assert all(row[2:6] == ["ApiId", "a1b2c3", "Stage", "$default"] for row in rows)
    for profile in ("standard", "large"):
        read, rows = api_watch(profile)
        assert read == [("5XXError", {"ApiName": "sluice-test-api", "Stage": "live"})], profile
        assert [row[1] for row in rows] == ["Count", "4XXError", "5XXError", "Latency"], profile
        assert all(row[2:6] == ["ApiName", "sluice-test-api", "Stage", "live"] for row in rows), profile


# ------------------------------------------------------------------ issue 33: every endpoint has a caller

# Services the in-VPC roles hold actions of that need no interface endpoint: the gateway endpoints'
# (DynamoDB, S3); Kafka's IAM actions, which the brokers check (the cluster is in the VPC); and what
# Lambda itself calls with the role, outside the VPC: the dead-letter queues (SQS), the log streams,
# the network interfaces (a team's boundary names these; Sluice's roles get them from managed policies).
NO_INTERFACE_ENDPOINT = {"dynamodb", "s3", "kafka-cluster", "sqs", "logs", "ec2"}


def _in_vpc_services() -> set[str]:
    """The services of every action a role of a function in the VPC holds: template.yaml's (after the SAM
    transform) and a team worker's (infra/team.yaml's boundary, which is its role's permissions)."""
    from tests.infra.test_template import _function_roles
    from tests.infra.test_template_guard import _allowed_actions

    out = cfn.transformed()
    actions = {a for name, role in _function_roles().items()
               if "VpcConfig" in out["Resources"][name]["Properties"]
               for a in _allowed_actions(role["Properties"].get("Policies", []))}
    team = cfn.load(cfn.ROOT / "infra" / "team.yaml")["Resources"]["TeamWorkerBoundary"]
    actions |= _allowed_actions(team["Properties"])
    return {action.split(":", 1)[0] for action in actions}


def test_each_interface_endpoint_has_a_caller_in_the_vpc_and_each_call_an_endpoint() -> None:
    """An interface endpoint costs $0.01 an AZ-hour used or not: each one the template creates serves an
    action an in-VPC role holds (template.yaml after the SAM transform, infra/worker.yaml, infra/team.yaml),
    and each service such a role calls has one. Standard and large created an STS endpoint that nothing
    called, and every profile SSM's and Scheduler's, now called from TeamMapFunction and SchedulerFunction
    outside the VPC (docs/deploy.md, Interface endpoints)."""
    used = _in_vpc_services()
    interface = {r["Properties"]["ServiceName"]["Fn::Sub"].rsplit(".", 1)[1]
                 for r in ENDPOINTS["Resources"].values()
                 if r["Type"] == "AWS::EC2::VPCEndpoint"
                 and r["Properties"].get("VpcEndpointType") == "Interface"}
    assert interface == {"lambda", "secretsmanager"}
    assert interface <= used, f"endpoints with no caller in the VPC: {sorted(interface - used)}"
    assert used - NO_INTERFACE_ENDPOINT <= interface, f"calls with no endpoint: {sorted(used - interface)}"
    assert not {"sts", "ssm", "scheduler"} & used


def test_the_relay_and_the_operator_reach_ssm_and_scheduler_only_through_their_functions() -> None:
    """The relay asks TeamMapFunction (SSM) and the operator SchedulerFunction (Scheduler): both outside
    the VPC, each holding only its call's rights, each told to the one function that invokes it."""
    d = at("standard")
    assert d.env("RelayFunction")["SLUICE_TEAM_MAP_FUNCTION_NAME"] == {"Ref": "TeamMapFunction"}
    assert d.env("OperatorFunction")["SLUICE_SCHEDULER_FUNCTION_NAME"] == {"Ref": "SchedulerFunction"}
    for lid in ("TeamMapFunction", "SchedulerFunction"):
        assert "VpcConfig" not in d.resources[lid]["Properties"], lid
        assert not {"SLUICE_REDIS_AUTH_SECRET_ARN", "SLUICE_JOB_ID_SECRET_ARN"} & set(
            d.resources[lid]["Properties"]["Environment"]["Variables"]), lid
    (statement,) = d.resources["TeamMapFunction"]["Properties"]["Policies"][0]["Statement"]
    assert statement["Action"] == ["ssm:GetParametersByPath"] and statement["Effect"] == "Allow"
    assert [r["Fn::Sub"].rsplit(":parameter", 1)[1] for r in statement["Resource"]] == [
        "/sluice/${AWS::StackName}/teams", "/sluice/${AWS::StackName}/teams/*"]
    assert len(d.resources["TeamMapFunction"]["Properties"]["Policies"]) == 1
    for lid in ("TeamMapFunction", "SchedulerFunction"):
        app = (cfn.ROOT / d.resources[lid]["Properties"]["CodeUri"] / "app.py").read_text()
        code = [line for line in app.splitlines() if line and not line.startswith(('"""', "#"))]
        assert len(code) == 1 and code[0].startswith("from sluice.entry."), (lid, code)


def test_no_code_in_the_vpc_calls_sts() -> None:
    """No STS endpoint is created because nothing calls STS: no client of it anywhere in the layer's code,
    and the MSK IAM token is signed with the function's own credentials (``generate_auth_token(region)``,
    which calls STS only to assume a role or, with ``aws_debug_creds``, to log the caller)."""
    import re

    calls = re.compile(r"""(client|resource)\(\s*["']sts["']|assume_role|get_caller_identity|"""
                       r"""generate_auth_token_from_role_arn|aws_debug_creds""")
    found = [f"{path.relative_to(cfn.ROOT)}:{n}"
             for root in (cfn.ROOT / "shared" / "sluice", cfn.ROOT / "functions", cfn.ROOT / "infra")
             for path in root.rglob("*.py")
             for n, line in enumerate(path.read_text().splitlines(), 1) if calls.search(line)]
    assert not found, found
    assert calls.search('boto_client("sts", s)') and calls.search("sts.assume_role(RoleArn=arn)")
    auth = (cfn.ROOT / "shared" / "sluice" / "backends" / "kafka" / "auth.py").read_text()
    assert "MSKAuthTokenProvider.generate_auth_token(region)" in auth
