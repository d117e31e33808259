"""infra/team.yaml (issue 27): what the infra team deploys per team, and what AWS then enforces.

The team worker's role, its boundary, the team map entry and the registrar's resource policy are
enforced by IAM, SSM and Lambda, not by Sluice's code: these tests evaluate the template's
conditions and resource patterns the way IAM matches them (``fnmatch`` on ``*``), against real
job ids (``ids.mint``) and result keys (``results.result_key``).
"""

from __future__ import annotations

import json
import re
from fnmatch import fnmatchcase
from typing import Any

import pytest

from sluice.backends.dynamodb.results import result_key
from sluice.core.config import Settings
from sluice.core.ids import mint
from tests.infra import cfn
from tests.infra.test_team_worker import _imports

TEAM = cfn.load(cfn.ROOT / "infra" / "team.yaml")
RES = TEAM["Resources"]
BOUNDARY = RES["TeamWorkerBoundary"]["Properties"]["PolicyDocument"]["Statement"]
ROLE = RES["TeamWorkerRole"]["Properties"]
REGISTRAR = RES["RegistrarFunction"]["Properties"]
KEY = b"k" * 32


def sid(name: str) -> dict[str, Any]:
    return next(s for s in BOUNDARY if s.get("Sid") == name)


def split_join(value: Any, queues: list[str]) -> list[str]:
    """A !Split of a !Sub/!Join over Queues, evaluated as CloudFormation would."""
    delimiter, inner = value["Fn::Split"]
    if "Fn::Sub" in inner:
        text, names = inner["Fn::Sub"]
        joined = names["Names"]["Fn::Join"]
        assert joined[1] == {"Ref": "Queues"}
        return str(text.replace("${Names}", joined[0].join(queues))).split(delimiter)
    glue, parts = inner["Fn::Join"]
    text = glue.join(p if isinstance(p, str) else p["Fn::Join"][0].join(queues) for p in parts)
    assert all(isinstance(p, str) or p["Fn::Join"][1] == {"Ref": "Queues"} for p in parts)
    return text.split(delimiter)


def test_the_names_every_part_relies_on() -> None:
    assert ROLE["RoleName"] == {"Fn::Sub": "${SluiceStackName}-team-${TeamName}"}
    assert ROLE["Path"] == "/sluice/"
    entry = RES["TeamMapEntry"]["Properties"]
    assert entry["Name"] == {"Fn::Sub": "/sluice/${SluiceStackName}/teams/${TeamName}"}
    assert entry["Type"] == "StringList" and entry["Value"] == {"Fn::Join": [",", {"Ref": "Queues"}]}
    assert REGISTRAR["FunctionName"] == {"Fn::Sub": "${SluiceStackName}-registrar-${TeamName}"}
    exports = {k: o["Export"]["Name"]["Fn::Sub"] for k, o in TEAM["Outputs"].items() if "Export" in o}
    assert exports == {"WorkerRoleArn": "${SluiceStackName}-team-${TeamName}-WorkerRoleArn",
                       "RegistrarArn": "${SluiceStackName}-team-${TeamName}-RegistrarArn"}


@pytest.mark.parametrize(("queue", "ok"), [
    ("avatars", True), ("thumbs-*", True), ("a", True), ("sluice-ops", False), ("sluice-*", False),
    ("s*", False), ("sluic*", False), ("sluice*", False), ("slx*", True), ("Thumbs", False), ("*", False),
    ("a.b", False), ("a*b", False),
    # A queue name has up to 64 characters (the API's pattern) and a prefix 63 before its *: the
    # parameter refused a 64-character queue, so no team could be given one (session 36's walk).
    ("q" * 64, True), ("q" * 65, False), ("q" * 63 + "*", True), ("q" * 64 + "*", False),
])
def test_the_queues_parameter_refuses_sluices_own_queues_and_what_covers_them(queue: str, ok: bool) -> None:
    pattern = TEAM["Parameters"]["Queues"]["AllowedPattern"]
    assert bool(re.fullmatch(pattern, queue)) is ok


def test_the_role_is_exactly_its_boundary_so_it_cannot_be_widened() -> None:
    assert ROLE["PermissionsBoundary"] == {"Ref": "TeamWorkerBoundary"}
    assert ROLE["ManagedPolicyArns"] == [{"Ref": "TeamWorkerBoundary"}]
    assert "Policies" not in ROLE
    trust = ROLE["AssumeRolePolicyDocument"]["Statement"]
    assert [s["Principal"] for s in trust] == [{"Service": "lambda.amazonaws.com"}]


def test_the_boundary_has_no_wildcard_action_no_listing_and_no_route_table() -> None:
    for s in BOUNDARY:
        assert all("*" not in a for a in s["Action"]), s
        assert "dynamodb:Scan" not in s["Action"] and "dynamodb:Query" not in s["Action"]
        assert "RoutesTable" not in str(s), s  # only the registrar writes routes
        assert not any(a.startswith(("iam:", "ssm:", "kafka")) for a in s["Action"]), s


@pytest.mark.parametrize(("queues", "queue", "allowed"), [
    (["avatars", "avatar-cleanup"], "avatars", True),
    (["avatars", "avatar-cleanup"], "avatar-cleanup", True),
    (["avatars", "avatar-cleanup"], "avatar", False),
    (["avatars", "avatar-cleanup"], "avatars2", False),
    (["avatars", "avatar-cleanup"], "payments", False),
    (["thumbs-*"], "thumbs-big", True),
    (["thumbs-*"], "thumbs", False),
    (["thumbs-*"], "thumbsx", False),
])
def test_the_jobs_table_is_reached_only_for_its_own_queues_job_ids(queues: list[str], queue: str,
                                                                     allowed: bool) -> None:
    """dynamodb:LeadingKeys (ForAllValues:StringLike): another team's item cannot be read, granted,
    written or created, whatever the team's code does (the hostile team's direct writes)."""
    s = sid("OwnQueuesJobItems")
    assert s["Action"] == ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem",
                           "dynamodb:ConditionCheckItem"]
    keys = split_join(s["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"], queues)
    job_id = mint(1_700_000_000_000, queue, KEY)
    family = f"~family~{job_id}"
    assert any(fnmatchcase(job_id, k) for k in keys) is allowed, (queue, keys)
    assert any(fnmatchcase(family, k) for k in keys) is allowed


@pytest.mark.parametrize(("queues", "queue", "allowed"), [
    (["avatars"], "avatars", True), (["avatars"], "avatars2", False), (["avatars"], "payments", False),
    (["thumbs-*", "avatars"], "thumbs-big", True), (["thumbs-*", "avatars"], "thumbs", False),
])
def test_results_are_reached_only_under_its_own_queues_prefixes(queues: list[str], queue: str,
                                                                 allowed: bool) -> None:
    s = sid("OwnQueuesResults")
    assert s["Action"] == ["s3:GetObject", "s3:PutObject"]
    arns = split_join(s["Resource"], queues)
    job_id = mint(1_700_000_000_000, queue, KEY)
    key = result_key(job_id, 3, "a" * 64)
    assert key.startswith(f"results/{queue}/")
    assert any(fnmatchcase(f"arn:aws:s3:::sluice-results/{key}", a) for a in arns) is allowed, (key, arns)
    # Older results (results/<id>/...) are the gateway's to read, not a team's.
    assert not any(fnmatchcase(f"arn:aws:s3:::b/results/{job_id}/3/{'a' * 64}.json", a) for a in arns)


@pytest.mark.parametrize(("queues", "queue", "allowed"), [
    (["avatars"], "avatars", True), (["avatars"], "avatars2", False), (["avatars"], "payments", False),
    (["thumbs-*", "avatars"], "thumbs-big", True), (["thumbs-*", "avatars"], "thumbs", False),
])
def test_payloads_are_read_only_under_its_own_queues_prefixes(queues: list[str], queue: str,
                                                              allowed: bool) -> None:
    """Issue 28: a team's worker reads the large payloads of its own queues' jobs alone, and writes
    none (the gateway functions do)."""
    from sluice.core.payloads import payload_key

    s = sid("OwnQueuesPayloads")
    assert s["Effect"] == "Allow" and s["Action"] == ["s3:GetObject"]
    arns = split_join(s["Resource"], queues)
    key = payload_key(queue, mint(1_700_000_000_000, queue, KEY))
    assert any(fnmatchcase(f"arn:aws:s3:::sluice-payloads/{key}", a) for a in arns) is allowed, (key, arns)


def test_no_other_bucket_whatever_the_wildcards() -> None:
    deny = sid("OnlySluiceResultsBucket")
    assert deny["Effect"] == "Deny" and deny["Action"] == sid("OwnQueuesResults")["Action"]
    assert set(sid("OwnQueuesPayloads")["Action"]) <= set(deny["Action"])
    (results_text, results), (payloads_text, payloads) = (r["Fn::Sub"] for r in deny["NotResource"])
    assert results_text == "arn:${AWS::Partition}:s3:::${Bucket}/results/*"
    assert results["Bucket"] == {"Fn::ImportValue": {"Fn::Sub": "${SluiceStackName}-ResultsBucket"}}
    assert payloads_text == "arn:${AWS::Partition}:s3:::${Bucket}/payloads/*"
    assert payloads["Bucket"] == {"Fn::ImportValue": {"Fn::Sub": "${SluiceStackName}-PayloadsBucket"}}


def test_it_invokes_sluices_internal_function_only_and_sends_to_its_own_dlq() -> None:
    invoke = [s for s in BOUNDARY if any(a.startswith("lambda:") for a in s["Action"])]
    assert [s["Resource"] for s in invoke] == [{"Fn::Sub": "arn:${AWS::Partition}:lambda:${AWS::Region}:"
                                                           "${AWS::AccountId}:function:${SluiceStackName}-internal"}]
    dlq = sid("OwnDeadLetterQueue")
    assert dlq["Resource"]["Fn::Sub"].endswith(":${SluiceStackName}-worker-${TeamName}-dlq")


def test_the_team_has_its_own_redis_user_over_its_queues_keys_alone() -> None:
    """ElastiCache RBAC (issue 27): the team's user may touch sluice:{<queue>}:* of its Queues only,
    with a worker's commands (the Sluice stack's export, sluice.backends.redis.acl), and its role
    reads that user's secret alone, by the name infra/worker.yaml gives the function."""
    from sluice.backends.redis import acl

    assert sid("RedisSecret")["Action"] == ["secretsmanager:GetSecretValue"]
    assert sid("RedisSecret")["Resource"] == {"Ref": "TeamRedisUserSecret"}
    user = RES["TeamRedisUser"]["Properties"]
    parts = user["AccessString"]["Fn::Join"][1]
    queues = ["avatars", "thumbs-*"]
    inner = parts[1]["Fn::Join"]
    assert inner[1] == {"Ref": "Queues"}
    assert parts[3] == {"Fn::ImportValue": {"Fn::Sub": "${SluiceStackName}-RedisWorkerCommandRules"}}
    built = parts[0] + inner[0].join(queues) + parts[2] + acl.worker_command_rules()
    assert built.split() == acl.access_string("worker", queues).split()
    secret = RES["TeamRedisUserSecret"]["Properties"]
    assert secret["Name"] == {"Fn::Sub": "sluice/${SluiceStackName}/redis/team-${TeamName}"}
    worker = cfn.load(cfn.ROOT / "infra" / "worker.yaml")["Resources"]["TeamWorkerFunction"]["Properties"]
    assert worker["Environment"]["Variables"]["SLUICE_REDIS_AUTH_SECRET_ARN"] == secret["Name"]
    reads = [st for st in BOUNDARY if "secretsmanager:GetSecretValue" in st["Action"]]
    assert reads == [sid("RedisSecret")]
    assert TEAM["Outputs"]["TeamRedisUserId"]["Value"] == {"Ref": "TeamRedisUser"}


def test_the_registrar_is_configured_with_its_team_and_map_not_by_its_callers() -> None:
    env = REGISTRAR["Environment"]["Variables"]
    assert env["SLUICE_REGISTRAR_TEAM"] == {"Ref": "TeamName"}
    assert env["SLUICE_REGISTRAR_QUEUES"] == {"Fn::Join": [",", {"Ref": "Queues"}]}
    assert env["SLUICE_STACK_NAME"] == {"Ref": "SluiceStackName"}
    names = {f"SLUICE_{n.upper()}" for n in Settings.model_fields}
    assert {v for v in env if v.startswith("SLUICE_")} <= names
    assert "sluice.entry.registrar import handler" in REGISTRAR["Code"]["ZipFile"]
    assert REGISTRAR["Handler"] == "index.handler" and REGISTRAR["Layers"] == [{"Ref": "SluiceLayerArn"}]


def test_the_registrar_writes_only_its_teams_route_keys_and_invokes_only_its_teams_worker() -> None:
    statements = RES["RegistrarRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
    writes = next(s for s in statements if "dynamodb:PutItem" in s["Action"])
    assert writes["Condition"] == {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": {"Ref": "Queues"}}}
    invoke = next(s for s in statements if s["Action"] == ["lambda:InvokeFunction"])
    assert all(r["Fn::Sub"].split(":function:")[1].startswith("${SluiceStackName}-worker-${TeamName}")
               for r in invoke["Resource"])
    assert not [s for s in statements if s["Action"] != ["dynamodb:Scan"] and "Condition" not in s
                and any(a.startswith("dynamodb:") for a in s["Action"])]


def test_only_the_teams_deployers_may_invoke_the_registrar_and_a_deny_backs_it() -> None:
    policy = RES["RegistrarResourcePolicy"]
    assert policy["Type"] == "AWS::Lambda::ResourcePolicy"
    doc = policy["Properties"]["PolicyDocument"]["Statement"]
    allow = [s for s in doc if s["Effect"] == "Allow"]
    deny = [s for s in doc if s["Effect"] == "Deny"]
    assert [s["Principal"] for s in allow] == [{"AWS": {"Ref": "DeployerPrincipalArns"}}]
    assert len(deny) == 1 and deny[0]["Principal"] == "*" and deny[0]["Action"] == "lambda:InvokeFunction"
    assert deny[0]["Condition"] == {"ArnNotLike": {"aws:PrincipalArn": {"Ref": "DeployerPrincipalArns"}}}
    assert policy["Properties"]["ResourceArn"] == {"Fn::GetAtt": ["RegistrarFunction", "Arn"]}


def test_the_relay_reads_the_team_map_and_nothing_writes_it_but_this_stack() -> None:
    """The relay reads it through TeamMapFunction, outside the VPC (issue 33), which alone may read it."""
    sluice = cfn.template()["Resources"]
    relay = sluice["RelayFunction"]["Properties"]
    assert relay["Environment"]["Variables"]["SLUICE_STACK_NAME"] == {"Ref": "AWS::StackName"}
    assert relay["Environment"]["Variables"]["SLUICE_TEAM_MAP_FUNCTION_NAME"] == {"Ref": "TeamMapFunction"}
    reader = sluice["TeamMapFunction"]["Properties"]
    assert reader["Environment"]["Variables"]["SLUICE_STACK_NAME"] == {"Ref": "AWS::StackName"}
    readers = {name for name, r in sluice.items() if "ssm:GetParametersByPath" in str(r)}
    assert readers == {"TeamMapFunction"}
    statements = [s for p in reader["Policies"] if isinstance(p, dict) and "Statement" in p
                  for s in p["Statement"]]
    ssm = [s for s in statements if any(a.startswith("ssm:") for a in s["Action"])]
    assert [s["Action"] for s in ssm] == [["ssm:GetParametersByPath"]]
    assert all("/sluice/${AWS::StackName}/teams" in r["Fn::Sub"] for r in ssm[0]["Resource"])
    for name, resource in sluice.items():  # no role of Sluice's stack may write a team map entry
        assert "ssm:PutParameter" not in str(resource), name


def test_only_sluices_registrar_writes_routes_in_sluices_stack() -> None:
    """Issue 27: a team's routes are written by its registrar alone (infra/team.yaml); in Sluice's own
    stack only Sluice's registrar, the default worker's (issue 31: DefaultWorkerRegistration, owner
    sluice), not the worker, which runs handler code."""
    out = cfn.transformed()
    writers = set()
    for name, fn in cfn.resources(out, "AWS::Lambda::Function").items():
        role = out["Resources"][fn["Properties"]["Role"]["Fn::GetAtt"][0]]
        for policies in cfn.variants(role["Properties"].get("Policies", [])):
            for policy in policies:
                for st in policy["PolicyDocument"]["Statement"]:
                    actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
                    writes = {a for a in actions if a in ("dynamodb:PutItem", "dynamodb:DeleteItem",
                                                          "dynamodb:UpdateItem", "dynamodb:BatchWriteItem",
                                                          "dynamodb:*")}
                    if writes and "RoutesTable" in json.dumps(st["Resource"]):
                        writers.add(name)
    assert writers == {"RegistrarFunction"}
    resources = cfn.template()["Resources"]
    default = resources["DefaultWorkerRegistration"]["Properties"]
    assert default["Owner"] == "sluice" and default["Function"] == {"Ref": "WorkerFunction"}
    assert default["ServiceToken"] == {"Fn::GetAtt": ["RegistrarFunction", "Arn"]}
    env = resources["RegistrarFunction"]["Properties"]["Environment"]["Variables"]
    assert env["SLUICE_WORKER_FUNCTION_NAME"] == {"Ref": "WorkerFunction"}
    assert "SLUICE_REGISTRAR_TEAM" not in env
    assert "DefaultWorkerRoutes" not in resources  # a new logical id: a ServiceToken cannot change
    assert "SLUICE_ROUTES_TABLE" not in resources["WorkerFunction"]["Properties"]["Environment"]["Variables"]


def test_every_import_is_an_export_of_the_sluice_stack() -> None:
    exported = {o["Export"]["Name"]["Fn::Sub"].replace("${AWS::StackName}", "${SluiceStackName}")
                for o in cfn.template()["Outputs"].values() if "Export" in o}
    imported = set(_imports(TEAM))
    assert imported and imported <= exported, imported - exported
