"""Who may invoke which local function: the template's resource policies and the callers' own policies.

The local Lambda service asks ``Access.check`` before every invocation it is sent with a caller
(issue 27): IAM's decision (``sluice_dev.local.iam``) over the function's ``AWS::Lambda::ResourcePolicy``
from ``template.yaml`` and the caller's own statements (its ``Policies``, its ``AWS::IAM::RolePolicy``).

The local caller identity stands in for the principal. Each local function's containers get their
own dummy credentials (``key_of``: distinct access key ids), and the SigV4 ``Authorization`` header's
access key id names the role the template would give that function (``role_arn``: ``<stack>-<Fn>Role``,
as SAM names the role it generates; a team's, ``role/sluice/<stack>-team-<team>``, as infra/team.yaml
vends it). A key nobody was given is an unknown principal of the account, with no rights of its own.
Sluice dev's stand-ins for AWS services invoke in-process with their service principal: the API
server as ``apigateway.amazonaws.com`` with the API's SourceArn, the schedule rules as
``events.amazonaws.com`` with their rule's ARN (``rule_caller``), the local Scheduler as
``SchedulerInvokeRole``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sluice_dev.local.iam import Request, decide
from sluice_dev.local.template import DeployConfig, FunctionConfig, Resource

ACCOUNT = "000000000000"
REGION = "us-east-1"
API_ID = "local"  # the local API server's requestContext.apiId (local.api_server.build_event)
SECRET = "local-secret"  # every local function's dummy secret key: only the key id names it
INVOKE = "lambda:InvokeFunction"
_AKID = re.compile(r"Credential=([A-Za-z0-9]+)/")


@dataclass(frozen=True)
class Caller:
    """A principal (a role's ARN, or a service principal with the SourceArn it calls for)."""

    principal: str
    source_arn: str | None = None


class AccessDenied(Exception):
    """Lambda's AccessDeniedException (HTTP 403): IAM did not allow the invocation."""


def function_arn(name: str) -> str:
    return f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{name}"


def role_arn(stack: str, role: str, path: str = "/") -> str:
    return f"arn:aws:iam::{ACCOUNT}:role{path}{stack}-{role}"


def team_role_arn(stack: str, team: str) -> str:
    """The role infra/team.yaml vends a team (``Path: /sluice/``, ``<stack>-team-<team>``)."""
    return role_arn(stack, f"team-{team}", "/sluice/")


def key_of(name: str) -> str:
    """The dummy access key id a local function's containers (or a stand-in) sign with."""
    return "AKIALOCAL" + re.sub(r"[^A-Z0-9]", "", name.upper())


def access_key_id(authorization: str | None) -> str | None:
    """The access key id of a SigV4 ``Authorization`` header; None for an unsigned request."""
    found = _AKID.search(authorization or "")
    return found.group(1) if found else None


def api_caller(method: str, path: str, stage: str = "local") -> Caller:
    """API Gateway invoking an integration for ``method path`` of the local API."""
    return Caller(
        "apigateway.amazonaws.com",
        f"arn:aws:execute-api:{REGION}:{ACCOUNT}:{API_ID}/{stage}/{method.upper()}{path}",
    )


EVENTS = Caller("events.amazonaws.com")  # an EventBridge invoke without a rule (SAM's Schedule events)


def rule_arn(stack: str, rule: str) -> str:
    """The ARN of the template's ``AWS::Events::Rule`` ``rule`` as deployed (a generated name)."""
    return f"arn:aws:events:{REGION}:{ACCOUNT}:rule/{stack}-{rule}"


def rule_caller(stack: str, rule: str) -> Caller:
    """EventBridge invoking a rule's target: ``events.amazonaws.com`` with the rule's SourceArn."""
    return Caller("events.amazonaws.com", rule_arn(stack, rule))


@dataclass
class Access:
    """Resource policies by local function name, identity policies by principal, and who holds
    which key. ``check`` raises AccessDenied unless IAM would allow the invocation."""

    resource_policies: dict[str, Any] = field(default_factory=dict)
    identities: dict[str, list[Any]] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)

    def principal_of(self, key: str | None) -> str:
        if key is None:
            return f"arn:aws:iam::{ACCOUNT}:user/anonymous"  # unsigned: no principal IAM would know
        return self.keys.get(key, f"arn:aws:iam::{ACCOUNT}:user/unknown-{key}")

    def check(self, function: str, caller: Caller) -> None:
        arn = function_arn(function)
        request = Request(caller.principal, INVOKE, arn, caller.source_arn)
        decision = decide(
            request, self.resource_policies.get(function), self.identities.get(caller.principal, [])
        )
        if decision != "allow":
            why = (
                "an explicit deny in a resource-based policy or an identity-based policy"
                if decision == "deny"
                else "no identity-based or resource-based policy allows it"
            )
            raise AccessDenied(
                f"User: {caller.principal} is not authorized to perform: {INVOKE} on "
                f"resource: {arn} because {why}"
            )

    def add_function(
        self, deploy: DeployConfig, cfg: FunctionConfig, name: str, names: Mapping[str, str]
    ) -> None:
        """Function ``cfg`` runs locally as ``name``: its resource policy (or SAM's for its events)."""
        policy = deploy.resource_policies.get(cfg.logical_id)
        self.resource_policies[name] = bind(policy, names) if policy is not None else _sam_events(cfg)

    def add_identity(self, key: str, role: str, policies: Any, names: Mapping[str, str]) -> None:
        """Whoever signs with ``key`` is ``role``, whose own policies are ``policies`` (SAM ``Policies``
        items or policy documents)."""
        self.keys[key] = role
        self.identities[role] = [bind(_identity(p), names) for p in policies]


def names_for(deploy: DeployConfig, functions: Mapping[str, str]) -> dict[str, str]:
    """What the template's references become locally: each local function's name and ARN (by
    logical id), every function's SAM-generated role, the template's roles, and the API's id."""
    stack = deploy.stack_name
    out = {"Api": API_ID, "HttpApi": API_ID}  # the small profile's front door is an HTTP API (issue 33)
    for lid, cfg in deploy.functions.items():
        out[f"{lid}Role.Arn"] = role_arn(stack, f"{lid}Role")
        for schedule in cfg.schedules:  # its rules (SourceArn in its resource policy)
            out[f"{schedule.name}.Arn"] = rule_arn(stack, schedule.name)
    for lid in deploy.role_policies:
        out[f"{lid}.Arn"] = role_arn(stack, lid)
    for lid, name in functions.items():
        out[lid], out[f"{lid}.Arn"] = name, function_arn(name)
    return out


def bind(value: Any, names: Mapping[str, str]) -> Any:
    """``value`` with each ``Resource`` marker named locally; a reference the local stack has no name
    for (a table's ARN in a statement about DynamoDB) stays a placeholder no ARN matches."""
    if isinstance(value, Resource):
        if value.what in names:
            return names[value.what]
        return re.sub(r"<([^<>]+)>", lambda m: names.get(m.group(1), m.group(0)), value.what)
    if isinstance(value, list):
        return [bind(v, names) for v in value]
    if isinstance(value, dict):
        return {k: bind(v, names) for k, v in value.items()}
    return value


def _identity(policy: Any) -> Any:
    """A SAM ``Policies`` item as a policy document: its statements, or the one policy template
    that grants an invoke (``LambdaInvokePolicy``, as SAM expands it); other templates grant none."""
    if isinstance(policy, dict) and "Statement" in policy:
        return {"Statement": policy["Statement"]}
    if isinstance(policy, dict) and "LambdaInvokePolicy" in policy:
        fn = policy["LambdaInvokePolicy"]["FunctionName"]
        target = f"<{fn.what}>" if isinstance(fn, Resource) else str(fn)
        return {
            "Statement": [
                {
                    "Effect": "Allow",
                    "Action": [INVOKE],
                    "Resource": Resource(f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{target}*"),
                }
            ]
        }
    return {"Statement": []}


def _sam_events(cfg: FunctionConfig) -> Any:
    """The permission SAM adds for a function's Schedule events (EventBridge may invoke it); none
    for a function without events (nobody but its callers' own policies admits a caller)."""
    if not cfg.schedules:
        return None
    return {
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "events.amazonaws.com"},
                "Action": INVOKE,
                "Resource": "*",
            }
        ]
    }
