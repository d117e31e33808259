"""Read CloudFormation/SAM templates the way CloudFormation does, for the infra tests.

``load`` understands the short-form tags (``!Ref``, ``!Sub``, ``!GetAtt``, ``!If`` ...) and
turns them into the long form (``{"Ref": ...}``, ``{"Fn::Sub": ...}``), so tests see exactly
the structure CloudFormation sees, read as the local stack reads it (``CfnLoader``).
``transform`` runs the real SAM translator (the one ``sam deploy`` uses) offline, so tests can
inspect the IAM roles SAM generates from policy templates. ``variants`` expands ``Fn::If`` into
every value a property can take.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from sluice_dev.local.template import CfnLoader

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
NESTED = {"network": ROOT / "infra/network.yaml", "endpoints": ROOT / "infra/endpoints.yaml",
          "observability": ROOT / "infra/observability.yaml",
          "redis_shard_alarm": ROOT / "infra/redis-shard-alarm.yaml",  # nested in observability
          "queue_alarm": ROOT / "infra/queue-alarm.yaml"}  # standalone, one stack per queue: linted here


def load(path: Path = TEMPLATE) -> dict[str, Any]:
    with path.open() as f:
        return yaml.load(f, Loader=CfnLoader)  # type: ignore[no-any-return]


@cache
def template() -> dict[str, Any]:
    return load(TEMPLATE)


def resources(doc: dict[str, Any], type_: str) -> dict[str, dict[str, Any]]:
    return {name: r for name, r in doc["Resources"].items() if r["Type"] == type_}


_ABSENT = object()  # the AWS::NoValue branch: the property or list item is left out


def variants(value: Any) -> Iterator[Any]:
    """Every concrete shape ``value`` can take, one per combination of ``Fn::If`` branches.

    A branch that is ``AWS::NoValue`` removes the property or list item, as in CloudFormation.
    """
    for shape in _variants(value):
        if shape is not _ABSENT:
            yield shape


def _variants(value: Any) -> Iterator[Any]:
    if value == {"Ref": "AWS::NoValue"}:
        yield _ABSENT
    elif isinstance(value, dict) and set(value) == {"Fn::If"}:
        _condition, yes, no = value["Fn::If"]
        yield from _variants(yes)
        yield from _variants(no)
    elif isinstance(value, dict):
        shapes: list[dict[str, Any]] = [{}]
        for key, item in value.items():
            shapes = [{**shape, key: option} if option is not _ABSENT else shape
                      for shape in shapes for option in _variants(item)]
        yield from shapes
    elif isinstance(value, list):
        lists: list[list[Any]] = [[]]
        for item in value:
            lists = [[*prefix, option] if option is not _ABSENT else prefix
                     for prefix in lists for option in _variants(item)]
        yield from lists
    else:
        yield value


def is_ref(value: Any, name: str) -> bool:
    return value == {"Ref": name}


def is_getatt(value: Any, name: str, attribute: str | None = None) -> bool:
    if not (isinstance(value, dict) and "Fn::GetAtt" in value):
        return False
    resource, attr = value["Fn::GetAtt"]
    return bool(resource == name and (attribute is None or attr == attribute))


@cache
def transformed() -> dict[str, Any]:
    """template.yaml after the SAM transform (plain CloudFormation, Fn::If kept), offline.

    The translator looks managed policies up by name only for names listed in ``Policies``;
    the template lists none, so the map is empty and no AWS credentials are needed.
    """
    import boto3
    from samtranslator.parser.parser import Parser
    from samtranslator.translator.translator import Translator

    doc = copy.deepcopy(template())
    # As `sam validate` does: local code paths become placeholder S3 URIs (sam package uploads them).
    for resource in doc["Resources"].values():
        props = resource.get("Properties", {})
        for key in ("CodeUri", "ContentUri"):
            if isinstance(props.get(key), str) and not props[key].startswith("s3://"):
                props[key] = f"s3://bucket/{props[key]}"
    translator = Translator({}, Parser(), boto_session=boto3.session.Session(region_name="us-east-1"))
    return translator.translate(doc, parameter_values={},  # type: ignore[no-any-return]
                                get_managed_policy_map=dict)


def parameters(doc: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    """Parameter values as a deploy with these overrides (and defaults elsewhere) would see them."""
    values: dict[str, Any] = {}
    for name, spec in doc.get("Parameters", {}).items():
        value = overrides.get(name, spec.get("Default"))
        if spec["Type"] == "CommaDelimitedList" and isinstance(value, str):
            value = value.split(",")
        values[name] = value
    values.update({"AWS::Region": "us-east-1", "AWS::Partition": "aws", "AWS::AccountId": "123456789012",
                   "AWS::StackName": "sluice-test", "AWS::URLSuffix": "amazonaws.com"})
    return values


def conditions(doc: dict[str, Any], params: dict[str, Any]) -> dict[str, bool]:
    """Evaluate the Conditions section (Equals, Not, And, Or, Condition over parameter Refs)."""
    done: dict[str, bool] = {}

    def value(v: Any) -> Any:
        return _condition_value(v, params)

    def truth(expr: Any) -> bool:
        (fn, args), = expr.items()
        if fn == "Fn::Equals":
            return str(value(args[0])) == str(value(args[1]))
        if fn == "Fn::Not":
            return not truth(args[0])
        if fn == "Fn::And":
            return all(truth(a) for a in args)
        if fn == "Fn::Or":
            return any(truth(a) for a in args)
        if fn == "Condition":
            return named(args)
        raise ValueError(f"unsupported condition function {fn}")

    def named(name: str) -> bool:
        if name not in done:
            done[name] = truth(doc["Conditions"][name])
        return done[name]

    for name in doc.get("Conditions", {}):
        named(name)
    return done


def _condition_value(v: Any, params: dict[str, Any]) -> Any:
    """A parameter Ref's value, or a Fn::Join of such (e.g. a CommaDelimitedList joined: empty or not)."""
    if isinstance(v, dict) and set(v) == {"Ref"}:
        return params[v["Ref"]]
    if isinstance(v, dict) and set(v) == {"Fn::Join"}:
        sep, parts = v["Fn::Join"]
        parts = _condition_value(parts, params)
        items = parts if isinstance(parts, list) else [parts]
        return sep.join(str(_condition_value(p, params)) for p in items)
    return v


def resolve(value: Any, conds: dict[str, bool]) -> Any:
    """``value`` with every ``Fn::If`` decided by ``conds``: AWS::NoValue properties and list items
    removed; a ``value`` that is itself AWS::NoValue stays ``{"Ref": "AWS::NoValue"}``."""
    out = _resolve(value, conds)
    return {"Ref": "AWS::NoValue"} if out is _ABSENT else out


def _resolve(value: Any, conds: dict[str, bool]) -> Any:
    if value == {"Ref": "AWS::NoValue"}:  # before the dict case, which kept it as a property
        return _ABSENT
    if isinstance(value, dict) and set(value) == {"Fn::If"}:
        name, yes, no = value["Fn::If"]
        return _resolve(yes if conds[name] else no, conds)
    if isinstance(value, dict):
        out = {k: _resolve(v, conds) for k, v in value.items()}
        return {k: v for k, v in out.items() if v is not _ABSENT}
    if isinstance(value, list):
        items = [_resolve(v, conds) for v in value]
        return [v for v in items if v is not _ABSENT]
    return value


def sub(text: str, values: dict[str, Any]) -> str:
    """Fn::Sub's ${Name} and ${Resource.Attr} replaced from ``values`` (unknown names left alone)."""
    import re

    return re.sub(r"\$\{([A-Za-z0-9:.]+)\}", lambda m: str(values.get(m.group(1), m.group(0))), text)


def dashboard(doc: dict[str, Any], **overrides: Any) -> tuple[str, dict[str, Any]]:
    """A dashboard's body as deployed with these parameters: the text of its ``Fn::Sub`` (the string form,
    or the list form's first item) with its own variables (the list form's map, ``Fn::If`` decided and
    ``Fn::Join`` of parameter Refs computed) put in, and the parameter values, for ``sub`` to finish."""
    (body,) = (r["Properties"]["DashboardBody"]["Fn::Sub"]
               for r in resources(doc, "AWS::CloudWatch::Dashboard").values())
    params = parameters(doc, **overrides)
    if isinstance(body, str):
        return body, params
    text, variables = body

    def value(v: Any) -> str:
        if isinstance(v, dict) and set(v) == {"Ref"}:
            return str(params[v["Ref"]])
        if isinstance(v, dict) and set(v) == {"Fn::Join"}:
            sep, parts = v["Fn::Join"]
            return str(sep).join(value(p) for p in parts)
        return str(v)

    resolved = resolve(variables, conditions(doc, params))
    return sub(text, {name: value(v) for name, v in resolved.items()}), params
