"""``sluice dev --worker``: the local stack plays infra/team.yaml for each team (issue 27).

What the infra team's stack gives a team in AWS, read from infra/team.yaml at
``SluiceStackName=sluice``, ``TeamName=<team>``, ``Queues=<the team's queues>``:

- its **team map entry**, the SSM parameter ``/sluice/sluice/teams/<team>`` (StringList), on the moto
  server, which the relay reads as it reads SSM in AWS;
- its **registrar**, ``sluice-registrar-<team>`` in the local Lambda service, with the template's
  environment (its team, its queues, the routes table) and ``sluice.entry.registrar``'s handler;
- its worker's **role**, ``role/sluice/sluice-team-<team>`` (``role_arn``), which names the worker's
  own credentials where the local Lambda service evaluates them.

A team's routes are registered the way CloudFormation does it: the registrar is invoked with a
``Custom::SluiceRoutes`` Create request, whose ResponseURL is an object on the moto server's S3
(the registrar answers CloudFormation's pre-signed S3 URL the same way), and the answer is read back.

Locally the infra team gives each team the queues its handlers module handles (``--worker
NAME=MODULE``): the team map, not the module, is what the registrar and the relay trust.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sluice.core.config import Settings
from sluice.core.errors import ConfigError, RegistrationRefused, RouteConflict, SluiceError
from sluice_dev.local.template import SOURCE_ROOT, CfnLoader, Resource, _parameters, _Resolver, _text

TEAM_TEMPLATE = SOURCE_ROOT / "infra" / "team.yaml"
RESPONSES_BUCKET = "sluice-cfn-responses"  # CloudFormation's custom-resource response bucket, locally
ACCOUNT = "000000000000"
LOCAL_LAYER = "arn:aws:lambda:us-east-1:000000000000:layer:sluice-local:1"
NO_SCHEDULER = frozenset({"SLUICE_SCHEDULER_GROUP", "SLUICE_SCHEDULER_ROLE_ARN",
                          "SLUICE_FIRINGS_FUNCTION_ARN", "SLUICE_FIRINGS_DEAD_LETTER_ARN"})


@dataclass(frozen=True)
class TeamStack:
    """One team's infra/team.yaml, resolved for the local stack."""

    team: str
    queues: tuple[str, ...]
    map_name: str  # the SSM parameter
    map_value: str  # its StringList value
    registrar: str  # the registrar function's name
    registrar_env: dict[str, str | Resource]
    registrar_timeout_s: int
    role_arn: str  # the vended worker role
    # The vended role's permissions (its boundary's PolicyDocument, attached as its policy too),
    # resolved: what the local Lambda service reads as the team worker's own rights (its invoke of
    # <stack>-internal). Values only a deploy knows are ``Resource`` markers.
    worker_policy: dict[str, Any]
    # The registrar's resource policy (the team's deployers alone) and its own role's rights (the
    # routes table's keys of the team, its worker's describe), as the local Lambda service reads them.
    registrar_policy: dict[str, Any]
    registrar_role_arn: str
    registrar_role_policies: list[dict[str, Any]]
    deployer_arn: str  # the team's deploy role, whose stack operation invokes the registrar


def load_team(team: str, queues: list[str], stack_name: str, path: Path = TEAM_TEMPLATE) -> TeamStack:
    """infra/team.yaml at these parameters; ConfigError where CloudFormation would refuse them."""
    try:
        doc = yaml.load(path.read_text(), Loader=CfnLoader)  # a SafeLoader subclass
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read the team template {path}: {exc}") from exc
    given = {"SluiceStackName": stack_name, "TeamName": team, "Queues": ",".join(sorted(queues)),
             "SluiceLayerArn": LOCAL_LAYER,
             "DeployerPrincipalArns": f"arn:aws:iam::{ACCOUNT}:role/{stack_name}-deployer-{team}"}
    params = _parameters(doc, given)
    pseudo = {"AWS::Region": "us-east-1", "AWS::Partition": "aws", "AWS::URLSuffix": "amazonaws.com",
              "AWS::AccountId": ACCOUNT, "AWS::StackName": f"{stack_name}-team-{team}"}
    r = _Resolver(doc, {**params, **pseudo, "Queues": params["Queues"]})
    res = doc["Resources"]
    entry = r.value(res["TeamMapEntry"]["Properties"])
    fn = r.value(res["RegistrarFunction"]["Properties"])
    role = r.value(res["TeamWorkerRole"]["Properties"])
    boundary = r.value(res["TeamWorkerBoundary"]["Properties"]["PolicyDocument"])
    registrar_role = r.value(res["RegistrarRole"]["Properties"])
    registrar_policy = r.value(res["RegistrarResourcePolicy"]["Properties"]["PolicyDocument"])
    env = {k: v if isinstance(v, Resource) else _text(v) for k, v in fn["Environment"]["Variables"].items()}
    return TeamStack(team, tuple(sorted(queues)), str(entry["Name"]), _text(entry["Value"]),
                     str(fn["FunctionName"]), env, int(fn["Timeout"]),
                     f"arn:aws:iam::{ACCOUNT}:role{role['Path']}{role['RoleName']}", boundary,
                     registrar_policy,
                     f"arn:aws:iam::{ACCOUNT}:role{registrar_role['Path']}{registrar_role['RoleName']}",
                     [p["PolicyDocument"] for p in registrar_role.get("Policies", [])],
                     given["DeployerPrincipalArns"])


def registrar_env(stack: TeamStack, s: Settings) -> dict[str, str]:
    """The registrar's environment with the stack's imports bound to the local servers."""
    env: dict[str, str] = {}
    for var, value in stack.registrar_env.items():
        if var == "SLUICE_ROUTES_TABLE":
            env[var] = s.routes_table
        elif var == "SLUICE_SCHEDULES_TABLE":
            env[var] = s.schedules_table
        elif var in NO_SCHEDULER:
            continue  # no EventBridge Scheduler locally: sluice dev's scheduler reads the table
        elif isinstance(value, Resource):
            raise ConfigError(f"{stack.registrar}: {var} names {value}, which the local stack does not bind")
        else:
            env[var] = value
    local = {"SLUICE_AWS_ENDPOINT_URL": s.aws_endpoint_url,
             "SLUICE_LAMBDA_ENDPOINT_URL": s.lambda_endpoint_url}
    return env | {k: v for k, v in local.items() if v}


def put_team_map(s: Settings, stacks: list[TeamStack]) -> None:
    """The team map entries, as infra/team.yaml's TeamMapEntry writes them."""
    import boto3

    ssm = boto3.client("ssm", region_name=s.aws_region, endpoint_url=s.aws_endpoint_url)
    for stack in stacks:
        ssm.put_parameter(Name=stack.map_name, Type="StringList", Value=stack.map_value, Overwrite=True)


def cfn_event(kind: str, stack_id: str, response_url: str, properties: dict[str, Any],
              physical_id: str | None = None) -> dict[str, Any]:
    """A ``Custom::SluiceRoutes`` request as CloudFormation sends it."""
    event = {"RequestType": kind, "ResponseURL": response_url, "StackId": stack_id,
             "RequestId": str(uuid.uuid4()), "LogicalResourceId": "TeamRoutes",
             "ResourceType": "Custom::SluiceRoutes", "ResourceProperties": properties}
    if physical_id is not None:
        event["PhysicalResourceId"] = physical_id
    return event


class ResponseBucket:
    """CloudFormation's side of a custom resource: a URL to answer at, and the answer read back."""

    def __init__(self, s: Settings) -> None:
        import boto3

        self.s3 = boto3.client("s3", region_name=s.aws_region, endpoint_url=s.aws_endpoint_url)
        self.base = f"{(s.aws_endpoint_url or '').rstrip('/')}/{RESPONSES_BUCKET}"
        with contextlib.suppress(self.s3.exceptions.BucketAlreadyOwnedByYou):
            self.s3.create_bucket(Bucket=RESPONSES_BUCKET)

    def url(self) -> tuple[str, str]:
        key = f"responses/{uuid.uuid4()}"
        return key, f"{self.base}/{key}"

    def answer(self, key: str, timeout_s: float = 60.0) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                body = self.s3.get_object(Bucket=RESPONSES_BUCKET, Key=key)["Body"].read()
            except self.s3.exceptions.NoSuchKey:
                if time.monotonic() > deadline:
                    return None
                time.sleep(0.1)
                continue
            answer: dict[str, Any] = json.loads(body)
            return answer


def raise_refusal(team: str, answer: dict[str, Any] | None, whose: str | None = None) -> dict[str, Any]:
    """The registrar's answer if it succeeded; else the refusal as the exception it names. ``whose``:
    what the registrar registers (default ``team <team>``; Sluice's registrar: its default worker)."""
    whose = whose or f"team {team}"
    if answer is None:
        raise ConfigError(f"{whose}'s registrar did not answer")
    if answer.get("Status") == "SUCCESS":
        return answer
    reason = str(answer.get("Reason") or "")
    kind, _, message = reason.partition(": ")
    error: type[SluiceError] = {"RouteConflict": RouteConflict,
                                "RegistrationRefused": RegistrationRefused}.get(kind, ConfigError)
    raise error(f"{whose}'s routes were refused: {message or reason}")
