"""What a deploy of ``template.yaml`` gives each function: read from the template, not copied.

``sluice dev``, the demo, the chaos runtime and ``sluice check`` take every function's
Timeout, MemorySize, environment, reserved concurrency and schedules from here, at the
parameters' defaults or at a ``samconfig.toml`` environment's ``parameter_overrides``
(``--config-env``). Intrinsics are resolved as CloudFormation would for parameters,
pseudo parameters and conditions; a value that names a stack resource (a table, the Redis
endpoint, the Kafka bootstrap) cannot be known before deploy and is kept as a ``Resource``
marker, which the local stack binds to its own servers.

Tooling only: the Lambda layer leaves ``sluice_dev.local`` out (docs/deploy.md).
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from sluice.core.errors import ConfigError

SOURCE_ROOT = Path(__file__).resolve().parents[3]  # a source checkout: template.yaml is here
TEMPLATE = SOURCE_ROOT / "template.yaml"
SAMCONFIG = SOURCE_ROOT / "samconfig.toml"
_FN = {"And", "Base64", "Cidr", "Contains", "Equals", "FindInMap", "GetAZs", "If", "ImportValue", "Join",
       "Not", "Or", "Select", "Split", "Sub", "Length", "ToJsonString"}
IMPORT = "ImportValue:"  # a Resource marker's prefix for an Fn::ImportValue: ImportValue:<export name>


@dataclass(frozen=True)
class Resource:
    """A value only a deploy knows (a resource's name or attribute): ``what`` says which."""

    what: str

    def __str__(self) -> str:
        return f"<{self.what}>"


_ABSENT = object()  # AWS::NoValue


@dataclass(frozen=True)
class Schedule:
    """An EventBridge schedule that invokes a function: an ``AWS::Events::Rule`` naming it as a
    target (``name``: the rule's logical id; template.yaml, issue 27), or a SAM ``Schedule`` event
    (``name``: the event's; infra/worker.yaml)."""

    name: str
    expression: str  # rate(...) or cron(...)
    enabled: bool
    input: Any = None  # the constant Input (parsed JSON), or None


@dataclass(frozen=True)
class FunctionConfig:
    logical_id: str
    timeout_s: int
    memory_mb: int
    env: Mapping[str, str | Resource]
    reserved_concurrency: int | None
    schedules: tuple[Schedule, ...] = ()
    handler: str = "app.handler"
    code_uri: str | None = None  # a local folder (relative to the template), as written; None: not one
    # Its role's policies as the template writes them (SAM's ``Policies``: statements and policy
    # templates), resolved: what the local Lambda service reads of the caller's own rights.
    policies: tuple[Any, ...] = ()

    def concrete_env(self) -> dict[str, str]:
        return {k: v for k, v in self.env.items() if isinstance(v, str)}


@dataclass(frozen=True)
class DeployConfig:
    path: Path
    config_env: str | None
    parameters: Mapping[str, str]
    functions: Mapping[str, FunctionConfig] = field(default_factory=dict)
    # AWS::Lambda::ResourcePolicy documents by the function they name (logical id), resolved.
    resource_policies: Mapping[str, Any] = field(default_factory=dict)
    # AWS::IAM::RolePolicy documents by the role they attach to (logical id), resolved.
    role_policies: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    stack_name: str = "sluice-local"
    rotations: Mapping[str, str] = field(default_factory=dict)  # rotation schedule -> its expression


def code_folder(deploy: DeployConfig, cfg: FunctionConfig) -> str | None:
    """The function's CodeUri as a folder on this machine, if it is one (an s3:// URI is not): where a
    deploy puts the user's handlers module (/var/task in Lambda)."""
    if cfg.code_uri is None or "://" in cfg.code_uri:
        return None
    folder = (deploy.path.parent / cfg.code_uri).resolve()
    return str(folder) if folder.is_dir() else None


if TYPE_CHECKING:
    _SafeLoader = yaml.SafeLoader
else:
    # libyaml's parser where PyYAML has it: template.yaml in 0.04 CPU-s instead of 0.24, once per
    # local stack, per chaos run and in many tests; the same document (tests/unit/test_dev_template.py)
    _SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class CfnLoader(_SafeLoader):
    """SafeLoader plus CloudFormation's short-form tags, turned into their long form."""


def _construct(loader: CfnLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    elif isinstance(node, yaml.MappingNode):
        value = loader.construct_mapping(node, deep=True)
    else:
        raise yaml.constructor.ConstructorError(None, None, f"unexpected node for !{suffix}", node.start_mark)
    if suffix in ("Ref", "Condition"):
        return {suffix: value}
    if suffix == "GetAtt":
        return {"Fn::GetAtt": value.split(".", 1) if isinstance(value, str) else value}
    if suffix in _FN:
        return {f"Fn::{suffix}": value}
    raise yaml.constructor.ConstructorError(None, None, f"unknown tag !{suffix}", node.start_mark)


CfnLoader.add_multi_constructor("!", _construct)


def config_env_overrides(env: str, samconfig: Path = SAMCONFIG) -> tuple[dict[str, str], str | None]:
    """``[env.deploy.parameters]``: its parameter_overrides and region. ConfigError if absent."""
    try:
        doc = tomllib.loads(samconfig.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {samconfig}: {exc}") from exc
    section = doc.get(env, {}).get("deploy", {}).get("parameters")
    if section is None:
        raise ConfigError(f"{samconfig} has no [{env}.deploy.parameters] (environments: "
                          f"{', '.join(sorted(doc)) or 'none'})")
    raw = section.get("parameter_overrides", [])
    items = raw.split() if isinstance(raw, str) else list(raw)
    overrides = {}
    for item in items:
        key, sep, value = str(item).partition("=")
        if not sep:
            raise ConfigError(f"{samconfig} [{env}]: parameter override {item!r} is not Name=Value")
        overrides[key] = value.strip('"')
    return overrides, section.get("region")


def load(path: Path = TEMPLATE, config_env: str | None = None, samconfig: Path | None = None,
         overrides: Mapping[str, str] | None = None, stack_name: str = "sluice-local") -> DeployConfig:
    """Every ``AWS::Serverless::Function`` of the template, resolved at these parameters, with the
    resource policies and role policies that name them."""
    try:
        doc = yaml.load(path.read_text(), Loader=CfnLoader)  # a SafeLoader subclass
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read the template {path}: {exc}") from exc
    given: dict[str, str] = {}
    region = None
    if config_env is not None:
        given, region = config_env_overrides(config_env, samconfig or path.parent / "samconfig.toml")
    given |= dict(overrides or {})
    params = _parameters(doc, given)
    pseudo = {"AWS::Region": region or "us-east-1", "AWS::Partition": "aws",
              "AWS::URLSuffix": "amazonaws.com", "AWS::AccountId": "000000000000",
              "AWS::StackName": stack_name}
    lists = {n for n, spec in doc.get("Parameters", {}).items() if spec.get("Type") == "CommaDelimitedList"}
    r = _Resolver(doc, {**params, **pseudo}, lists)
    resources = doc.get("Resources", {})
    rules = _rules(r, resources)
    globals_ = doc.get("Globals", {}).get("Function", {})
    functions = {name: _function(r, name, res, globals_, rules.get(name, ()))
                 for name, res in resources.items() if res.get("Type") == "AWS::Serverless::Function"}
    policies: dict[str, Any] = {}
    roles: dict[str, tuple[Any, ...]] = {}
    for res in resources.values():
        props = res.get("Properties", {})
        if res.get("Type") == "AWS::Lambda::ResourcePolicy":
            target = props["ResourceArn"].get("Fn::GetAtt", [None])[0]
            if target in policies:
                raise ConfigError(f"{target} has two AWS::Lambda::ResourcePolicy resources")
            policies[target] = r.value(props["PolicyDocument"])
        elif res.get("Type") == "AWS::IAM::RolePolicy":
            role = props["RoleName"].get("Ref")
            roles[role] = (*roles.get(role, ()), r.value(props["PolicyDocument"]))
    rotations = {name: res.get("Properties", {}).get("RotationRules", {}).get("ScheduleExpression")
                 for name, res in resources.items()
                 if res.get("Type") == "AWS::SecretsManager::RotationSchedule"}
    return DeployConfig(path, config_env, params, functions, policies, roles, stack_name,
                        {k: v for k, v in rotations.items() if isinstance(v, str)})


def _parameters(doc: dict[str, Any], given: Mapping[str, str]) -> dict[str, str]:
    declared = doc.get("Parameters", {})
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise ConfigError(f"parameters not in the template: {', '.join(unknown)}")
    out = {}
    for name, spec in declared.items():
        value = given.get(name, spec.get("Default"))
        if value is None:
            raise ConfigError(f"parameter {name} has no default and no value")
        out[name] = _text(value)
        if name in given:
            _check_parameter(name, spec, out[name])
    return out


def _check_parameter(name: str, spec: Mapping[str, Any], value: str) -> None:
    """The constraints CloudFormation checks before a deploy, so a value it would refuse fails here."""
    allowed = spec.get("AllowedValues")
    if allowed is not None and value not in {_text(a) for a in allowed}:
        raise ConfigError(f"parameter {name}={value!r} is not one of {', '.join(_text(a) for a in allowed)}")
    pattern = spec.get("AllowedPattern")
    items = value.split(",") if spec.get("Type") == "CommaDelimitedList" else [value]
    if pattern is not None and not all(re.fullmatch(pattern, item) for item in items):
        raise ConfigError(f"parameter {name}={value!r} does not match {pattern}")
    if spec.get("Type") == "Number":
        try:
            number = float(value)
        except ValueError:
            raise ConfigError(f"parameter {name}={value!r} is not a number") from None
        low, high = spec.get("MinValue"), spec.get("MaxValue")
        if (low is not None and number < float(low)) or (high is not None and number > float(high)):
            raise ConfigError(f"parameter {name}={value} is outside {low}..{high}")


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(_text(v) for v in value)
    return str(value)


class _Resolver:
    def __init__(self, doc: dict[str, Any], refs: dict[str, str], lists: set[str] | None = None) -> None:
        self.doc, self.refs, self.lists = doc, refs, lists or set()
        self.conditions: dict[str, bool] = {}

    def condition(self, name: str) -> bool:
        if name not in self.conditions:
            self.conditions[name] = bool(self.value(self.doc["Conditions"][name]))
        return self.conditions[name]

    def value(self, v: Any) -> Any:  # noqa: C901 (one branch per intrinsic)
        if isinstance(v, list):
            return [x for x in (self.value(i) for i in v) if x is not _ABSENT]
        if not isinstance(v, dict):
            return v
        if len(v) != 1:
            return {k: x for k, x in ((k, self.value(i)) for k, i in v.items()) if x is not _ABSENT}
        ((key, arg),) = v.items()
        if key == "Ref":
            return self._ref(arg)
        if key == "Condition":
            return self.condition(arg)
        if key == "Fn::If":
            name, yes, no = arg
            return self.value(yes if self.condition(name) else no)
        if key == "Fn::Equals":
            a, b = (self.value(x) for x in arg)
            return _text(a) == _text(b)
        if key == "Fn::Not":
            return not self.value(arg[0])
        if key == "Fn::Or":
            return any(self.value(x) for x in arg)
        if key == "Fn::And":
            return all(self.value(x) for x in arg)
        if key == "Fn::GetAtt":
            return Resource(".".join(arg))
        if key == "Fn::FindInMap":  # the Profiles mapping (issue 33), CacheEngines
            table, first, second = (_text(self.value(x)) for x in arg)
            return self.doc["Mappings"][table][first][second]
        if key == "Fn::Sub":
            return self._sub(arg)
        if key == "Fn::Join":
            sep, items = arg[0], self.value(arg[1])
            parts = items if isinstance(items, list) else _text(items).split(",")
            joined = [p for p in parts]
            if any(isinstance(p, Resource) for p in joined):
                return Resource(sep.join(str(p) for p in joined))
            return sep.join(_text(p) for p in joined)
        if key == "Fn::Split":
            text = self.value(arg[1])
            if isinstance(text, Resource) and arg[0] in text.what:  # a Join's: its parts again
                return [Resource(p[1:-1]) if re.fullmatch(r"<[^<>]+>", p) else p
                        for p in text.what.split(arg[0])]
            return Resource(str(text)) if isinstance(text, Resource) else _text(text).split(arg[0])
        if key == "Fn::ImportValue":  # another stack's export, by its name: the local stack binds it
            return Resource(f"{IMPORT}{_text(self.value(arg))}")
        if key.startswith("Fn::"):
            return Resource(key)  # an intrinsic the functions' settings do not use
        return {key: self.value(arg)}

    def _ref(self, name: str) -> Any:
        if name == "AWS::NoValue":
            return _ABSENT
        if name in self.lists:  # a CommaDelimitedList's Ref is a list, as in CloudFormation
            return self.refs[name].split(",")
        if name in self.refs:
            return self.refs[name]
        return Resource(name)

    def _sub(self, arg: Any) -> str | Resource:
        text, names = (arg, {}) if isinstance(arg, str) else (arg[0], arg[1])
        local = {k: self.value(x) for k, x in names.items()}
        unknown = False

        def one(m: re.Match[str]) -> str:
            nonlocal unknown
            name = m.group(1)
            if name in local:
                got = local[name]
            elif "." in name:
                got = Resource(name)
            else:
                got = self._ref(name)
            if isinstance(got, Resource):
                unknown = True
                return str(got)
            return _text(got)

        out = re.sub(r"\$\{([^}!]+)\}", one, text)
        return Resource(out) if unknown else out


def _rules(r: _Resolver, resources: Mapping[str, Any]) -> dict[str, tuple[Schedule, ...]]:
    """The ``AWS::Events::Rule`` schedules (of a deploy's conditions) by the function they target."""
    out: dict[str, tuple[Schedule, ...]] = {}
    for name, res in resources.items():
        if res.get("Type") != "AWS::Events::Rule":
            continue
        if "Condition" in res and not r.condition(res["Condition"]):
            continue
        p = r.value(res.get("Properties", {}))
        if "ScheduleExpression" not in p:
            continue
        for target in p.get("Targets", []):
            arn = target.get("Arn")
            if not (isinstance(arn, Resource) and arn.what.endswith(".Arn")):
                continue
            raw = target.get("Input")
            schedule = Schedule(name, _text(p["ScheduleExpression"]), p.get("State", "ENABLED") == "ENABLED",
                                json.loads(raw) if isinstance(raw, str) else raw)
            fn = arn.what.removesuffix(".Arn")
            out[fn] = (*out.get(fn, ()), schedule)
    return out


def _function(r: _Resolver, name: str, res: dict[str, Any], globals_: dict[str, Any],
              rules: tuple[Schedule, ...] = ()) -> FunctionConfig:
    props = r.value(res.get("Properties", {}))
    g = r.value(globals_)
    raw_env = {**g.get("Environment", {}).get("Variables", {}),
               **props.get("Environment", {}).get("Variables", {})}
    env = {k: v if isinstance(v, Resource) else _text(v) for k, v in raw_env.items()}
    reserved = props.get("ReservedConcurrentExecutions")
    schedules = []
    for event_name, event in props.get("Events", {}).items():
        if event.get("Type") != "Schedule":
            continue
        p = event.get("Properties", {})
        raw = p.get("Input")
        schedules.append(Schedule(event_name, _text(p["Schedule"]), p.get("State", "ENABLED") == "ENABLED"
                                  and p.get("Enabled", True) is not False,
                                  json.loads(raw) if isinstance(raw, str) else raw))
    return FunctionConfig(
        logical_id=name,
        timeout_s=int(props.get("Timeout", g.get("Timeout", 3))),
        memory_mb=int(props.get("MemorySize", g.get("MemorySize", 128))),
        env=env,
        reserved_concurrency=None if reserved is None else int(reserved),
        schedules=(*schedules, *rules),
        handler=str(props.get("Handler", g.get("Handler", "app.handler"))),
        code_uri=code_uri if isinstance(code_uri := props.get("CodeUri", g.get("CodeUri")), str) else None,
        policies=tuple(props.get("Policies") or ()),
    )


def rate_seconds(expression: str) -> float:
    """``rate(N unit)`` in seconds. ConfigError for anything else (cron needs a calendar)."""
    m = re.fullmatch(r"rate\((\d+) (minute|minutes|hour|hours|day|days)\)", expression.strip())
    if m is None:
        raise ConfigError(f"only rate() schedules are understood locally, not {expression!r}")
    unit = {"minute": 60, "hour": 3600, "day": 86400}[m.group(2).rstrip("s")]
    return int(m.group(1)) * unit
