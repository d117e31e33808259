"""Finding and running the SAM CLI and cfn-lint for the infra tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.infra.cfn import ROOT

# pyenv has python3.12 (the Lambda runtime); sam build runs its pip for that interpreter.
PYENV_VERSION = "3.12.1:3.11.7"
PYENV_SHIMS = Path(os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))) / "shims"


def tool(name: str) -> str:
    """The venv's copy (installed by the dev extra), else one on PATH; skip if neither exists."""
    venv = Path(sys.executable).parent / name
    found = str(venv) if venv.exists() else shutil.which(name)
    if not found:
        pytest.skip(f"{name} is not installed (it comes with `pip install -e .[dev]`)")
    return found


def env() -> dict[str, str]:
    """PATH puts the venv first (sam's own Python) and keeps pyenv's shims (python3.12)."""
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", ""), str(PYENV_SHIMS)])
    return {**os.environ, "PATH": path, "PYENV_VERSION": PYENV_VERSION, "SAM_CLI_TELEMETRY": "0",
            "AWS_DEFAULT_REGION": os.environ.get("AWS_DEFAULT_REGION", "us-east-1")}


def run(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=timeout,
                          check=False)
