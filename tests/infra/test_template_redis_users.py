"""Issue 27, item 2 (Redis): ElastiCache RBAC instead of one AUTH token.

One user per kind of function, each ACL exactly ``sluice.backends.redis.acl``'s for its role,
each password in a secret its own function alone may read; the default user off; the teams'
users joined through TeamRedisUserIds; in-transit encryption (RBAC needs it) on both engines.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sluice.backends.redis import acl
from tests.infra import cfn
from tests.infra.test_template import RES, T, _function_roles, props, redis_group

USERS = {"RedisRelayUser": "RelayFunction", "RedisGatewayUser": "GatewayFunction",
         "RedisOperatorUser": "OperatorFunction", "RedisWorkerUser": "WorkerFunction"}
# The functions that read no Redis: no user, no secret.
NO_REDIS = ("CountdownFunction", "EventsFunction", "RegistrarFunction")


def functions() -> list[str]:
    return list(cfn.resources(T, "AWS::Serverless::Function"))


def group_users(**params: Any) -> list[Any]:
    conds = cfn.conditions(T, cfn.parameters(T, **params))
    ids = cfn.resolve(props("RedisUserGroup")["UserIds"], conds)
    if "Fn::Split" in ids:  # Split(",", Join(",", [...])): the items joined
        ids = ids["Fn::Split"][1]["Fn::Join"][1]
    return ids  # type: ignore[no-any-return]


@pytest.mark.parametrize("engine", ["valkey", "redis"])
@pytest.mark.parametrize("shards", [1, 3])
def test_the_replication_group_authenticates_users_not_a_token(engine: str, shards: int) -> None:
    p = redis_group(CacheEngine=engine, RedisShards=shards)
    assert "AuthToken" not in p
    assert p["UserGroupIds"] == [{"Ref": "RedisUserGroup"}]
    assert p["TransitEncryptionEnabled"] is True and p["TransitEncryptionMode"] == "required"  # RBAC needs it
    versions = T["Mappings"]["CacheEngines"][engine]["Version"]
    assert float(versions) >= (7.2 if engine == "valkey" else 6.0), "RBAC: Valkey 7.2+, Redis OSS 6.0+"
    assert not [r for r in RES.values() if r["Type"] == "AWS::SecretsManager::Secret"
                and "AUTH token" in json.dumps(r)], "no AUTH token secret is left"
    assert "RedisAuthSecretArn" not in T["Outputs"], "no shared Redis credential is exported to teams"


def test_the_default_user_is_off_and_every_user_is_in_the_group() -> None:
    d = props("RedisDefaultUser")
    assert d["UserName"] == "default" and d["AccessString"].split()[0] == "off"
    assert "+" not in d["AccessString"] and "~" not in d["AccessString"]
    assert group_users() == [{"Ref": "RedisDefaultUser"}, *({"Ref": u} for u in USERS)]
    assert props("RedisUserGroup")["Engine"] == "redis"
    for name in ["RedisDefaultUser", *USERS]:
        assert props(name)["Engine"] == "redis"
    ids = [json.dumps(props(name)["UserId"]) for name in ["RedisDefaultUser", *USERS]]
    assert len(set(ids)) == len(ids)


def test_team_users_join_the_group_through_a_parameter() -> None:
    param = T["Parameters"]["TeamRedisUserIds"]
    assert param["Type"] == "CommaDelimitedList" and param["Default"] == ""
    users = group_users(TeamRedisUserIds="sluice-abcd1234-team-a,sluice-abcd1234-team-b")
    assert users[-1] == {"Fn::Join": [",", {"Ref": "TeamRedisUserIds"}]}
    assert users[:-1] == [{"Ref": "RedisDefaultUser"}, *({"Ref": u} for u in USERS)]


@pytest.mark.parametrize("user", sorted(USERS))
def test_each_users_acl_is_its_roles(user: str) -> None:
    role = acl.function_role(USERS[user])
    assert role is not None
    assert props(user)["AccessString"] == acl.access_string(role)
    assert "~*" not in props(user)["AccessString"].split()


def test_each_user_has_its_own_generated_secret_naming_it() -> None:
    for user in ["RedisDefaultUser", *USERS]:
        p = props(user)
        (password,) = p["AuthenticationMode"]["Passwords"]
        secret = f"{user}Secret"
        assert password == {"Fn::Sub": f"{{{{resolve:secretsmanager:${{{secret}}}:SecretString:password}}}}"}
        gen = props(secret)["GenerateSecretString"]
        assert gen["GenerateStringKey"] == "password" and gen["PasswordLength"] >= 32
        if user != "RedisDefaultUser":
            template, values = gen["SecretStringTemplate"]["Fn::Sub"]
            assert json.loads(template.replace("${Id}", "x")) == {"username": "x", "user_id": "x"}
            assert values["Id"] == p["UserId"] == p["UserName"]


def _secret_reads(role: dict[str, Any]) -> list[str]:
    out = []
    for policies in cfn.variants(role["Properties"].get("Policies", [])):
        for policy in policies:
            for st in policy["PolicyDocument"]["Statement"]:
                actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
                if "secretsmanager:GetSecretValue" in actions:
                    out.append(json.dumps(st["Resource"]))
    return out


# The split functions that run the gateway's code share its user (sluice.backends.redis.acl).
SHARES = {"InternalFunction": "RedisGatewayUser", "FiringsFunction": "RedisGatewayUser"}


@pytest.mark.parametrize("function", ["GatewayFunction", "OperatorFunction", "RelayFunction",
                                      "WorkerFunction", *SHARES])
def test_each_function_authenticates_as_its_own_user_and_reads_only_its_secret(function: str) -> None:
    (user,) = [u for u, f in USERS.items() if f == function] or [SHARES[function]]
    env = props(function)["Environment"]["Variables"]
    assert env["SLUICE_REDIS_AUTH_SECRET_ARN"] == {"Ref": f"{user}Secret"}
    reads = " ".join(_secret_reads(_function_roles()[function]))
    for other in ["RedisDefaultUser", *USERS]:
        assert (f'"{other}Secret"' in reads) == (other == user), (function, other)


@pytest.mark.parametrize("function", NO_REDIS)
def test_functions_that_read_no_redis_have_no_redis_credential(function: str) -> None:
    env = {**T["Globals"]["Function"]["Environment"]["Variables"],
           **props(function).get("Environment", {}).get("Variables", {})}
    assert "SLUICE_REDIS_AUTH_SECRET_ARN" not in env
    assert not [r for r in _secret_reads(_function_roles()[function]) if "/redis/" in r or "User" in r]


def test_a_team_stack_gets_what_its_user_needs_and_no_credential() -> None:
    outputs = T["Outputs"]
    assert outputs["RedisWorkerCommandRules"]["Value"] == acl.worker_command_rules()
    sep, prefix = outputs["RedisUserIdPrefix"]["Value"]["Fn::Join"]
    for user, word in [("RedisDefaultUser", "default"), ("RedisRelayUser", "relay")]:
        assert props(user)["UserId"]["Fn::Join"] == [sep, [*prefix, word]]
    assert cfn.is_getatt(outputs["SecretRotationFunctionArn"]["Value"], "SecretRotationFunction", "Arn")
    worker = cfn.load(cfn.ROOT / "infra/worker.yaml")
    env = next(iter(cfn.resources(worker, "AWS::Serverless::Function").values()))["Properties"]["Environment"]
    assert env["Variables"]["SLUICE_REDIS_AUTH_SECRET_ARN"] == {
        "Fn::Sub": "sluice/${SluiceStackName}/redis/team-${TeamName}"}
    assert "RedisAuthSecretArn" not in json.dumps(worker)


def test_no_worker_user_may_load_a_script_and_every_worker_can_ask_the_internal_function() -> None:
    """A team's user with SCRIPT LOAD could run its own endless Lua and stall every team (docs/security.md):
    the worker users' access strings (Sluice's default worker's, and the rules a team stack appends to
    its queues) have none; a worker asks the internal function, which loads shipped scripts only."""
    worker_rules = [props("RedisWorkerUser")["AccessString"],
                    T["Outputs"]["RedisWorkerCommandRules"]["Value"]]
    for rules in worker_rules:
        assert not {"+script|load", "+script", "+eval", "+@scripting"} & set(rules.split()), rules
    for user in ("RedisRelayUser", "RedisGatewayUser", "RedisOperatorUser"):
        assert "+script|load" in props(user)["AccessString"].split(), user  # the internal function's
    assert props("WorkerFunction")["Environment"]["Variables"]["SLUICE_INTERNAL_FUNCTION_NAME"] == {
        "Ref": "InternalFunction"}
    team_worker = cfn.load(cfn.ROOT / "infra/worker.yaml")
    (fn,) = cfn.resources(team_worker, "AWS::Serverless::Function").values()
    assert "SLUICE_INTERNAL_FUNCTION_NAME" in fn["Properties"]["Environment"]["Variables"]


# What RedisWorkerAccessRules exported before session 35: frozen, since CloudFormation refuses to
# change an export another stack imports (team stacks deployed before then import it).
LEGACY_WORKER_RULES = (
    "-@all +blpop +cluster|shards +cluster|slots +command +decrby +del +evalsha +exists +get +hdel "
    "+hexists +hget +hgetall +hincrby +hmget +hset +hsetnx +incrby +lpop +pexpire +ping +pttl +rpush "
    "+script|load +set +time +zadd +zcard +zpopmin +zrange +zrangebyscore +zrem +zremrangebyrank "
    "+zremrangebyscore")


def test_the_export_teams_stacks_imported_before_stays_as_it_was_and_no_team_stack_imports_it_now() -> None:
    """A Sluice stack update that changed an export a team stack imports would fail (and roll back):
    the worker's rules without script|load are a new export, which infra/team.yaml imports; the old
    one keeps its value until no team stack deployed before imports it (docs/deploy.md, Upgrading)."""
    outputs = T["Outputs"]
    assert outputs["RedisWorkerAccessRules"]["Value"] == LEGACY_WORKER_RULES
    assert outputs["RedisWorkerAccessRules"]["Export"]["Name"] == {
        "Fn::Sub": "${AWS::StackName}-RedisWorkerAccessRules"}
    assert outputs["RedisWorkerCommandRules"]["Export"]["Name"] == {
        "Fn::Sub": "${AWS::StackName}-RedisWorkerCommandRules"}
    team = (cfn.ROOT / "infra/team.yaml").read_text()
    assert "-RedisWorkerAccessRules" not in team and "-RedisWorkerCommandRules" in team
