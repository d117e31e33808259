"""cfn-lint and `sam validate --lint` accept each deploy profile (issue 33, item 2) with each egress choice.

test_lint.py and test_lint_egress.py lint the standard profile with every HandlerEgress. Here the small
profile (its own resource types: MSK Provisioned, an HTTP API; its endpoints' conditions) with no egress,
a NAT gateway and an existing VPC's NAT, and the large one, in one cfn-lint run (every combination of
profile and HandlerEgress was linted by hand when the profiles were added: clean); `sam validate --lint`
on the small profile over a NAT gateway, its least usual shape.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.infra import cfn
from tests.infra.test_lint_egress import EXISTING, place
from tests.infra.tools import env, tool

# nat-per-az differs from nat-single only in infra/network.yaml (test_lint_egress lints both), and the large
# profile's egress resources are the standard profile's: four templates cover every profile's own branches.
VARIANTS = [("small", "none"), ("small", "nat-single"), ("small", "existing-nat"), ("large", "none")]


def lint(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """As test_lint_egress's, with room for four templates in one cfn-lint run on a loaded machine."""
    return subprocess.run(args, cwd=folder, env=env(), capture_output=True, text=True, timeout=280,
                          check=False)


def variant(folder: Path, profile: str, egress: str, name: str | None = None) -> str:
    existing = EXISTING if egress == "existing-nat" else {}
    return place(folder, name or f"template-{profile}-{egress}.yaml", cfn.TEMPLATE, Profile=profile,
                 HandlerEgress=egress, **existing)


@pytest.mark.timeout(300)
def test_cfn_lint_accepts_each_profile_with_each_egress_choice(tmp_path: Path) -> None:
    names = [variant(tmp_path, profile, egress) for profile, egress in VARIANTS]
    result = lint(tmp_path, tool("cfn-lint"), "--format", "parseable", "--", *names)
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


@pytest.mark.timeout(300)
def test_sam_validate_lint_accepts_the_small_profile_over_a_nat_gateway(tmp_path: Path) -> None:
    name = variant(tmp_path, "small", "nat-single", "template.yaml")
    result = lint(tmp_path, tool("sam"), "validate", "--lint", "--template", name)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "is a valid SAM Template" in result.stdout + result.stderr
