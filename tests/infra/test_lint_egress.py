"""`sam validate --lint` and cfn-lint accept every handler egress choice (issue 33, item 1).

test_lint.py lints the templates at their defaults (HandlerEgress=none). Here each other choice is
rendered: a copy of the template whose parameter defaults are the choice's, next to a link to the real
``infra/`` (cfn-lint reads the nested templates a TemplateURL names), then linted as it would deploy.
`sam validate --lint` runs cfn-lint on the template it validates, so each template variant is both.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.infra import cfn
from tests.infra.tools import env, tool

EXISTING = {"VpcId": "vpc-0123456789abcdef0", "PrivateRouteTableIds": "rtb-0123456789abcdef0",
            "PrivateSubnetIds": '"subnet-0123456789abcdef0,subnet-0123456789abcdef1"'}


def render(text: str, **defaults: str) -> str:
    """``text`` with each named parameter's Default replaced (the parameter must have one)."""
    for name, value in defaults.items():
        pattern = re.compile(rf"(^  {name}:\n(?:    .*\n)*?    Default: ).*$", re.M)
        text, n = pattern.subn(lambda m, value=value: m[1] + value, text, count=1)
        assert n == 1, f"no Default for {name}"
    return text


def place(folder: Path, name: str, source: Path, **defaults: str) -> str:
    folder.mkdir(exist_ok=True)
    if not (folder / "infra").exists():
        (folder / "infra").symlink_to(cfn.ROOT / "infra")
    (folder / name).write_text(render(source.read_text(encoding="utf-8"), **defaults), encoding="utf-8")
    return name


def lint(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=folder, env=env(), capture_output=True, text=True, timeout=110,
                          check=False)


def test_render_changes_only_the_defaults_named() -> None:
    original = cfn.TEMPLATE.read_text(encoding="utf-8")
    changed = render(original, HandlerEgress="nat-per-az").splitlines()
    diff = [(a, b) for a, b in zip(original.splitlines(), changed, strict=True) if a != b]
    assert diff == [("    Default: none", "    Default: nat-per-az")]


@pytest.mark.timeout(120)
def test_cfn_lint_accepts_the_network_and_a_teams_worker_with_each_egress(tmp_path: Path) -> None:
    network, worker = cfn.NESTED["network"], cfn.ROOT / "infra" / "worker.yaml"
    names = [place(tmp_path, "network-single.yaml", network, Egress="nat-single"),
             place(tmp_path, "network-per-az.yaml", network, Egress="nat-per-az"),
             place(tmp_path, "network-per-az-2.yaml", network, Egress="nat-per-az", SubnetCount="2"),
             place(tmp_path, "worker-internet.yaml", worker, Egress="internet")]
    result = lint(tmp_path, tool("cfn-lint"), "--format", "parseable", "--", *names)
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("choice", ["nat-single", "nat-per-az", "existing-nat"])
def test_sam_validate_lint_accepts_each_egress_choice(tmp_path: Path, choice: str) -> None:
    defaults = {"HandlerEgress": choice, **(EXISTING if choice == "existing-nat" else {})}
    name = place(tmp_path, "template.yaml", cfn.TEMPLATE, **defaults)
    result = lint(tmp_path, tool("sam"), "validate", "--lint", "--template", name)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "is a valid SAM Template" in result.stdout + result.stderr
