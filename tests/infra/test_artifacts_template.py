"""infra/artifacts.py builds the SAME template for this machine: only the architecture and the
relative paths (made absolute for a copy elsewhere) may differ."""

from __future__ import annotations

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
