"""Each pytest process of the suite freezes its objects before it exits (tests/conftest.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[2]


def test_a_pytest_run_leaves_its_objects_frozen_to_the_exit() -> None:
    # --collect-only: the session ends (and unconfigures) as a run does, without running the test
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider",
                          "-p", "tests.tooling.exit_probe", "tests/tooling/test_cli_version.py"],
                         cwd=ROOT, capture_output=True, text=True, timeout=110)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    (line,) = [x for x in out.stdout.splitlines() if x.startswith("frozen at exit: ")]
    assert int(line.removeprefix("frozen at exit: ")) > 1000, line
