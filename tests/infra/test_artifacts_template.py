"""infra/artifacts.py builds the SAME template for this machine: only the architecture and the
relative paths (made absolute for a copy elsewhere) may differ."""

from __future__ import annotations

from pathlib import Path

import yaml

from infra import artifacts
from tests.infra import cfn


def _normalised(text: str) -> object:
    text = text.replace(f"{cfn.ROOT}/", "").replace("x86_64", "arm64")
    return yaml.load(text, Loader=cfn.CfnLoader)


def test_the_local_build_template_differs_only_in_architecture_and_paths() -> None:
    local = artifacts.local_template("x86_64")
    doc = yaml.load(local, Loader=cfn.CfnLoader)
    layer = doc["Resources"]["SharedLayer"]
    assert doc["Globals"]["Function"]["Architectures"] == ["x86_64"]
    assert layer["Properties"]["CompatibleArchitectures"] == ["x86_64"]
    assert layer["Metadata"]["BuildArchitecture"] == "x86_64"
    assert _normalised(local) == cfn.template()
    for uri in ("CodeUri: functions/", "ContentUri: shared/", "TemplateURL: infra/"):
        assert uri not in local


def _nested(path: Path) -> list[Path]:
    """The templates ``path``'s stacks nest, and theirs, each once."""
    doc = yaml.load(path.read_text(), Loader=cfn.CfnLoader)
    found: list[Path] = []
    for resource in doc.get("Resources", {}).values():
        if resource.get("Type") == "AWS::CloudFormation::Stack":
            child = (path.parent / resource["Properties"]["TemplateURL"]).resolve()
            if child not in found:
                found += [child, *(p for p in _nested(child) if p not in found)]
    return found


def test_the_nested_stacks_hold_nothing_sam_builds() -> None:
    """What lets the end-to-end build leave them out (``build(nested=False)``): no function or layer."""
    nested = _nested(cfn.TEMPLATE)
    assert {p.name for p in nested} >= {"network.yaml", "endpoints.yaml", "observability.yaml",
                                         "redis-shard-alarm.yaml"}
    for path in nested:
        doc = yaml.load(path.read_text(), Loader=cfn.CfnLoader)
        built = {name: r["Type"] for name, r in doc.get("Resources", {}).items()
                 if r.get("Type") in artifacts.BUILT_TYPES}
        assert not built, f"{path.name} holds {built}: build(nested=False) would leave them out"


def test_a_build_without_nested_stacks_differs_only_in_their_templates(tmp_path: Path) -> None:
    local = artifacts.local_template("x86_64")
    empty = tmp_path / "empty-stack.yaml"
    text = artifacts.without_nested_stacks(local, cfn.ROOT, empty)
    doc, full = yaml.load(text, Loader=cfn.CfnLoader), yaml.load(local, Loader=cfn.CfnLoader)
    stacks = [name for name, r in full["Resources"].items() if r["Type"] == "AWS::CloudFormation::Stack"]
    assert sorted(stacks) == ["Endpoints", "Network", "Observability"]
    for name in stacks:
        assert doc["Resources"][name]["Properties"]["TemplateURL"] == str(empty)
        full["Resources"][name]["Properties"]["TemplateURL"] = str(empty)
    assert doc == full
    assert yaml.safe_load(artifacts.EMPTY_STACK)["Resources"]
