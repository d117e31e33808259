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


REDIS_USER_SECRETS = {"RedisRelayUserSecret", "RedisGatewayUserSecret", "RedisOperatorUserSecret",
                      "RedisWorkerUserSecret"}
USER_PREFIX = {"Fn::Join": ["-", ["sluice", {"Fn::Select": [0, {"Fn::Split": ["-", {"Fn::Select": [
    2, {"Fn::Split": ["/", {"Ref": "AWS::StackId"}]}]}]}]}]]}


def test_every_secret_rotates_on_a_schedule_through_the_rotation_function() -> None:
    """Issue 27: the Redis users' passwords (one user per function) rotate as the AUTH token did."""
    schedules = {p["Properties"]["SecretId"]["Ref"]: p for p in
                 cfn.resources(T, "AWS::SecretsManager::RotationSchedule").values()}
    assert set(schedules) == REDIS_USER_SECRETS | {"JobIdSecret"}
    for schedule in schedules.values():
        p = schedule["Properties"]
        assert cfn.is_getatt(p["RotationLambdaARN"], "SecretRotationFunction", "Arn")
        assert p["RotationRules"]["ScheduleExpression"] == "rate(30 days)"
        assert p["RotateImmediatelyOnUpdate"] is False  # a deploy does not rotate
        # Secrets Manager checks at RotateSecret that it may invoke the function (issue 27: its policy).
        assert schedule["DependsOn"] == ["SecretRotationFunctionPolicy"]
    (allow,) = [s for s in props("SecretRotationFunctionPolicy")["PolicyDocument"]["Statement"]
                if s["Effect"] == "Allow"]
    assert allow["Principal"] == {"Service": "secretsmanager.amazonaws.com"}
    assert set(allow["Condition"]) == {"ArnLike"}  # SourceArns that name this account's secrets
    fn = props("SecretRotationFunction")
    assert fn["CodeUri"] == "infra/secret_rotation/" and fn["Handler"] == "app.handler"
    assert fn["Environment"]["Variables"] == {"REDIS_USER_ID_PREFIX": USER_PREFIX}


def test_the_rotation_function_may_touch_only_the_secrets_and_the_redis_users() -> None:
    statements = _statements(_function_roles()["SecretRotationFunction"])
    by_action = {a: s["Resource"] for s in statements for a in s["Action"] if not a.startswith("logs:")}
    secrets = [{"Fn::Sub": "arn:${AWS::Partition}:secretsmanager:${AWS::Region}:${AWS::AccountId}:secret:"
                           "sluice/${AWS::StackName}/redis/*"}, {"Ref": "JobIdSecret"}]
    for action in ("secretsmanager:DescribeSecret", "secretsmanager:GetSecretValue",
                   "secretsmanager:PutSecretValue", "secretsmanager:UpdateSecretVersionStage",
                   "secretsmanager:ListSecretVersionIds"):  # the job id key's age (the rotation app)
        assert by_action.pop(action) == secrets, action
    users = {"Fn::Sub": ["arn:${AWS::Partition}:elasticache:${AWS::Region}:${AWS::AccountId}"
                         ":user:${Prefix}-*", {"Prefix": USER_PREFIX}]}
    assert by_action.pop("elasticache:ModifyUser") == users
    assert by_action.pop("elasticache:DescribeUsers") == users
    assert by_action == {}
    for name in REDIS_USER_SECRETS | {"RedisDefaultUserSecret"}:  # all under the rotation's name prefix
        assert props(name)["Name"] == {"Fn::Sub": "sluice/${AWS::StackName}/redis/"
                                                  + props(name)["Name"]["Fn::Sub"].rpartition("/")[2]}


def test_only_the_rotation_function_writes_a_secret() -> None:
    for name, role in _function_roles().items():
        for statement in _statements(role):
            writes = [a for a in statement["Action"] if a.startswith("secretsmanager:")
                      and a not in ("secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret")]
            assert not writes or name == "SecretRotationFunction", (name, writes)
            if writes:
                assert "/redis/*" in json.dumps(statement["Resource"])


def test_the_rotation_handler_knows_every_step() -> None:
    source = (cfn.ROOT / "infra/secret_rotation/app.py").read_text()
    for step in ("createSecret", "setSecret", "testSecret", "finishSecret"):
        assert f'"{step}"' in source, step
    # The old password stays valid beside the new one while functions re-read their secret.
    both = 'Passwords=[json.loads(current)["password"], json.loads(pending)["password"]]'
    assert f"modify_user(UserId=user, {both})" in source
    assert RES["RedisGroup"]["Properties"]["TransitEncryptionMode"] == "required"


# ------------------------------------------------------------------ item 9: network scope


def _egress(conds: dict[str, bool]) -> list[dict[str, Any]]:
    rules = cfn.resolve(props("FunctionSecurityGroup")["SecurityGroupEgress"], conds)
    for name, r in cfn.resources(T, "AWS::EC2::SecurityGroupEgress").items():
        if r.get("Condition") is None or conds[r["Condition"]]:
            rule = {k: v for k, v in cfn.resolve(r["Properties"], conds).items()
                    if v != {"Ref": "AWS::NoValue"}}
            assert rule.pop("GroupId") == {"Ref": "FunctionSecurityGroup"}, name
            rules.append(rule)
    return rules  # type: ignore[no-any-return]


def test_https_egress_goes_to_the_endpoints_only_when_the_stack_makes_them() -> None:
    conds = cfn.conditions(T, cfn.parameters(T))
    assert conds["CreateEndpoints"]
    https = [r for r in _egress(conds) if r.get("FromPort") == 443]
    assert all("CidrIp" not in r for r in https), https  # no 0.0.0.0/0
    lists = [r["DestinationPrefixListId"] for r in https if "DestinationPrefixListId" in r]
    assert lists == [{"Fn::GetAtt": ["PrefixLists", "DynamoDb"]}, {"Fn::GetAtt": ["PrefixLists", "S3"]}]
    [to_endpoints] = [r for r in https if "DestinationSecurityGroupId" in r]
    assert to_endpoints["DestinationSecurityGroupId"] == {
        "Fn::GetAtt": ["Endpoints", "Outputs.EndpointSecurityGroupId"]}
    everything = _egress(conds)
    assert all(r.get("CidrIp") in (None, "255.255.255.255/32") for r in everything), everything
    lookup = props("PrefixLists")
    assert cfn.is_getatt(lookup["ServiceToken"], "PrefixListsFunction", "Arn")
    assert props("PrefixListsFunction")["Handler"] == "app.prefix_lists_handler"


def test_an_existing_vpc_without_our_endpoints_keeps_https_to_anywhere_documented() -> None:
    conds = cfn.conditions(T, cfn.parameters(T, VpcId="vpc-0abc", CreateVpcEndpoints="false"))
    assert not conds["CreateEndpoints"]
    assert [r["CidrIp"] for r in _egress(conds) if r.get("FromPort") == 443] == ["0.0.0.0/0"]
    assert "CreateVpcEndpoints=false" in (cfn.ROOT / "docs/deploy.md").read_text()


def test_the_prefix_list_lookup_names_both_services_of_the_region() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("kafka_setup_app", cfn.ROOT / "infra/kafka_setup/app.py")
    assert spec and spec.loader
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)

    class Ec2:
        def describe_prefix_lists(self, Filters: list[dict[str, Any]]) -> dict[str, Any]:
            (f,) = Filters
            assert f["Name"] == "prefix-list-name"
            known = {"com.amazonaws.eu-west-1.dynamodb": "pl-6da54004",
                     "com.amazonaws.eu-west-1.s3": "pl-6fa54006"}
            return {"PrefixLists": [{"PrefixListName": n, "PrefixListId": known[n]} for n in f["Values"]
                                    if n in known]}

    found = app.prefix_lists({"Region": "eu-west-1"}, Ec2())
    assert found == {"DynamoDb": "pl-6da54004", "S3": "pl-6fa54006"}
    try:
        app.prefix_lists({"Region": "xx-nowhere-1"}, Ec2())
    except RuntimeError as exc:
        assert "com.amazonaws.xx-nowhere-1.dynamodb" in str(exc)
    else:
        raise AssertionError("a Region without the prefix lists must fail the deploy")


def test_every_vpc_endpoint_serves_this_account_only() -> None:
    nested = cfn.load(cfn.NESTED["endpoints"])
    endpoints = cfn.resources(nested, "AWS::EC2::VPCEndpoint")
    assert len(endpoints) == 4  # no STS, Scheduler or SSM endpoint since issue 33 (docs/deploy.md)
    for name, endpoint in endpoints.items():
        statements = endpoint["Properties"]["PolicyDocument"]["Statement"]
        service = endpoint["Properties"]["ServiceName"]["Fn::Sub"].rsplit(".", 1)[-1]
        for st in statements:
            assert st["Effect"] == "Allow", name
            if st["Sid"] != "CustomResourceReplies":  # the actions each names: test_template_guard.py
                cond = st["Condition"]["StringEquals"]
                assert cond["aws:PrincipalAccount"] == {"Ref": "AWS::AccountId"}, name
                assert cond["aws:ResourceAccount"] == {"Ref": "AWS::AccountId"}, name
            else:  # the one exception: custom resources answer CloudFormation through S3
                assert (service, st["Action"]) == ("s3", "s3:PutObject"), name
                # this region's response bucket, this account's stacks (issue 27, item 8)
                bucket = ":s3:::cloudformation-custom-resource-response-${Region}/"
                assert bucket in st["Resource"]["Fn::Sub"][0]


# ------------------------------------------------------------------ item 9: IAM scope


def test_no_function_may_scan_or_query_a_table() -> None:
    """No function may list jobs, results or idempotency records. The exceptions are two
    configuration tables: the routes table (issue 15), a few items read whole by the gateway and
    the relay, and by the registrar registering routes (a Scan there, on that table alone); and the
    schedules table (issue 17), whose one queue's partition the operator function lists for the
    route GET /v1/admin/queues/{queue}/schedules (a Query there, by that function alone), and which
    Sluice's registrar reads whole for the schedules the default worker's code declared (issue 31: a
    Scan there, by that function alone, which runs no handler code); and the
    queues table (issue 28), the durable registry of queue names, read whole to load Redis's cache
    after a Redis loss and for the operator's listing (a Scan there, on that table alone); and the
    parking lot (issue 28), whose lanes the relay reads back in order (a Query there, by the relay,
    which alone writes it), and whose one queue's records the operator function lists for
    GET /v1/admin/queues/{queue}/jobs?state=parked (a Query there, nothing else: issue 32's review)."""
    for name, role in _function_roles().items():
        for statement in _statements(role):
            for action in statement["Action"]:
                routes = statement["Resource"] == {"Fn::GetAtt": ["RoutesTable", "Arn"]}
                registry = statement["Resource"] == {"Fn::GetAtt": ["QueuesTable", "Arn"]}
                if action == "dynamodb:Scan" and (routes or registry):
                    continue
                schedules = statement["Resource"] == {"Fn::GetAtt": ["SchedulesTable", "Arn"]}
                if action == "dynamodb:Query" and schedules and name == "OperatorFunction":
                    continue
                if action == "dynamodb:Scan" and schedules and name == "RegistrarFunction":
                    continue  # the schedules the default worker's code declared, for the registrar
                parked = statement["Resource"] == {"Fn::GetAtt": ["ParkedTable", "Arn"]}
                if parked:
                    relay_may = ("dynamodb:Query", "dynamodb:PutItem", "dynamodb:BatchWriteItem",
                                 "dynamodb:DeleteItem")
                    operator_may = name == "OperatorFunction" and action == "dynamodb:Query"
                    assert operator_may or (name == "RelayFunction" and action in relay_may), (name, action)
                    continue
                assert action not in ("dynamodb:Scan", "dynamodb:Query", "dynamodb:PartiQLSelect"), \
                    (name, action)


def test_the_queues_table_is_written_by_the_enqueue_functions_and_the_relay_only() -> None:
    """Issue 28: the durable registry of queues. The functions that run the enqueue pipeline (they
    reserve a new queue before its first 202) and the relay (it writes through a queue new to Redis's
    cache) may write it; the operator reads it (the listing, and one queue's item for its
    parked counter, as the gateway for GET /v1/queues/{queue}) and writes only a queue's sensitive
    fields (issue 32's review: an UpdateItem held to the item's own attributes, returning nothing);
    no other function touches it; and every one that may is told its name."""
    assert props("QueuesTable")["KeySchema"] == [{"AttributeName": "queue", "KeyType": "HASH"}]
    writers = {"GatewayFunction", "InternalFunction", "FiringsFunction", "RelayFunction"}
    for name, role in _function_roles().items():
        actions = {action for statement in _statements(role)
                   if statement["Resource"] == {"Fn::GetAtt": ["QueuesTable", "Arn"]}
                   for action in statement["Action"]}
        expected = ({"dynamodb:UpdateItem", "dynamodb:Scan", "dynamodb:GetItem"} if name == "GatewayFunction"
                    else {"dynamodb:UpdateItem", "dynamodb:Scan"} if name in writers
                    else {"dynamodb:Scan", "dynamodb:GetItem", "dynamodb:UpdateItem"}
                    if name == "OperatorFunction" else set())
        assert actions == expected, (name, actions)
        if name == "OperatorFunction":
            updates = [st for st in _statements(role) if "dynamodb:UpdateItem" in st["Action"]
                       and st["Resource"] == {"Fn::GetAtt": ["QueuesTable", "Arn"]}]
            assert updates and all(u["Action"] == ["dynamodb:UpdateItem"] for u in updates)
            assert all(u["Condition"]["ForAllValues:StringEquals"]["dynamodb:Attributes"] ==
                       ["queue", "created_at_ms", "state"] for u in updates)
        env = props(name).get("Environment", {}).get("Variables", {}) if name in RES else {}
        if expected:
            assert env.get("SLUICE_QUEUES_TABLE") == {"Ref": "QueuesTable"}, name


def test_the_worker_may_write_results_under_the_results_prefix_only() -> None:
    from sluice.backends.dynamodb.results import RESULTS_PREFIX, result_key
    from sluice.core.payloads import PREFIX as PAYLOADS_PREFIX

    assert result_key("j", 1, "0" * 64).startswith(f"{RESULTS_PREFIX}/")
    s3 = {}
    for name, role in _function_roles().items():
        for statement in _statements(role):
            for action in statement["Action"]:
                if action.startswith("s3:"):
                    s3.setdefault(name, set()).add((action, json.dumps(statement["Resource"])))
    scoped = json.dumps({"Fn::Sub": f"${{ResultsBucket.Arn}}/{RESULTS_PREFIX}/*"})
    payloads = json.dumps({"Fn::Sub": f"${{PayloadsBucket.Arn}}/{PAYLOADS_PREFIX}/*"})
    put_payloads = ("s3:PutObject", payloads)
    assert s3 == {"WorkerFunction": {("s3:PutObject", scoped), ("s3:GetObject", scoped),
                                     ("s3:GetObject", payloads)},
                  # the functions whose pipeline appends records put large payloads (issue 28), and
                  # read none; the operator's redrive keeps the record's pointer
                  "GatewayFunction": {("s3:GetObject", scoped), put_payloads},
                  "InternalFunction": {put_payloads}, "FiringsFunction": {put_payloads},
                  # a result too large for its completion event, copied out of the item (docs/events.md)
                  "EventsFunction": {("s3:PutObject", scoped)}}


def test_the_worker_can_run_the_fenced_transaction_on_the_jobs_table() -> None:
    """A handler's FencedTable write is a TransactWriteItems with a ConditionCheck on the job."""
    source = (cfn.ROOT / "shared/sluice/backends/dynamodb/fenced.py").read_text()
    assert '"ConditionCheck"' in source
    actions = {a for s in _statements(_function_roles()["WorkerFunction"]) for a in s["Action"]
               if "JobsTable" in json.dumps(s["Resource"])}
    assert {"dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:ConditionCheckItem"} <= actions


# ------------------------------------------------------------------ item 5: concurrency and cost


def test_workers_and_the_gateway_are_capped_by_default() -> None:
    params = T["Parameters"]
    defaults = cfn.parameters(T)
    conds = cfn.conditions(T, defaults)
    for fn, param in (("WorkerFunction", "WorkerReservedConcurrency"),
                      ("GatewayFunction", "GatewayReservedConcurrency")):
        assert 0 < params[param]["Default"] <= params[param]["MaxValue"], param
        reserved = cfn.resolve(props(fn)["ReservedConcurrentExecutions"], conds)
        assert reserved == {"Ref": param}, fn
    # The relay's dispatch budget reaches the relay, as the Settings fields it is.
    env = props("RelayFunction")["Environment"]["Variables"]
    assert env["SLUICE_DISPATCH_BUDGET_PER_S"] == {"Ref": "RelayDispatchPerSecond"}
    assert env["SLUICE_DISPATCH_BUDGET_BURST"] == {"Ref": "RelayDispatchBurst"}
    assert params["RelayDispatchPerSecond"]["Default"] > 0 and params["RelayDispatchBurst"]["Default"] > 0
    # One relay's burst fits the worker reservation: no dispatch waits on throttling by default.
    assert params["RelayDispatchBurst"]["Default"] <= params["WorkerReservedConcurrency"]["Default"]


def test_top_priorities_are_for_the_operator_allow_list() -> None:
    from sluice.core.models import MAX_PRIORITY

    params = T["Parameters"]
    assert params["MaxCallerPriority"]["Default"] < MAX_PRIORITY
    assert params["OperatorPrincipalArns"]["Default"] == ""  # nobody, until named
    env = props("GatewayFunction")["Environment"]["Variables"]
    assert env["SLUICE_MAX_CALLER_PRIORITY"] == {"Ref": "MaxCallerPriority"}
    assert env["SLUICE_OPERATOR_PRINCIPALS"] == {"Fn::Join": [",", {"Ref": "OperatorPrincipalArns"}]}


def test_the_optional_waf_limits_each_source_and_answers_429() -> None:
    off = cfn.conditions(T, cfn.parameters(T))
    on = cfn.conditions(T, cfn.parameters(T, ApiWafRateLimit="2000"))
    assert not off["UseWaf"] and on["UseWaf"]
    acl = props("ApiWaf")
    (rule,) = acl["Rules"]
    rate = rule["Statement"]["RateBasedStatement"]
    assert rate == {"Limit": {"Ref": "ApiWafRateLimit"}, "AggregateKeyType": "IP"}
    assert rule["Action"]["Block"]["CustomResponse"]["ResponseCode"] == 429
    body = acl["CustomResponseBodies"][rule["Action"]["Block"]["CustomResponse"]["CustomResponseBodyKey"]]
    assert json.loads(body["Content"])["status"] == 429
    assoc = props("ApiWafAssociation")
    assert assoc["ResourceArn"]["Fn::Sub"].endswith("/restapis/${Api}/stages/live")
    assert cfn.is_getatt(assoc["WebACLArn"], "ApiWaf", "Arn")
