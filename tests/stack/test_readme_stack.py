"""README.md's first handler, run as its reader would: the module it shows, the commands it gives.

The handler's block goes to ``functions/worker/jobs.py`` of a fresh folder, and the README's own
command lines run there under bash: `sluice dev` with its PYTHONPATH, `sluice enqueue ... --wait`,
the Python client's block, `sluice check`, and every operator command of "Operating" that needs no
AWS. tests/tooling/test_readme.py checks the rest without a stack.
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from tests.stack.test_dev import wait_for, with_ctrl_c
from tests.tooling.readme_blocks import ROOT, blocks, python_block, shell_line, shell_lines, sluice_argv

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

BIN = str(Path(sys.executable).parent)
BASH = shutil.which("bash") or "/bin/bash"


def bash(line: str, cwd: Path, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def operator_lines() -> list[str]:
    """The "Operating" commands that run against `sluice dev` as written: no placeholder, not live."""
    return [line for b in blocks() if b.lang == "bash" and b.section == "Operating" for line in shell_lines(b)
            if sluice_argv(line) is not None and "<" not in line and sluice_argv(line) != ["top"]]


def test_the_readmes_first_handler_runs_on_sluice_dev_as_written(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "functions" / "worker").mkdir(parents=True)
    (tmp_path / "functions" / "worker" / "jobs.py").write_text(python_block("# functions/worker/jobs.py"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    dev = shell_line("A first handler", "PYTHONPATH=$PWD/functions/worker sluice dev")
    if env.get("PYTHONPATH"):  # a run from a source tree keeps its own path (make test has none)
        dev = dev.replace("$PWD/functions/worker", "$PWD/functions/worker:$PYTHONPATH", 1)
    # exec: the signals that stop it reach `sluice dev` itself, not the shell.
    dev = dev.replace(" sluice dev", " exec sluice dev", 1) + " --workers 1 --log-level WARNING"
    proc = subprocess.Popen(with_ctrl_c([BASH, "-c", dev]),
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        endpoints = wait_for(tmp_path / ".sluice" / "endpoints.json", proc)
        assert endpoints["handlers"] == "jobs" and endpoints["routes"] == ["greet -> sluice-worker"]

        done = bash(shell_line("A first handler", "sluice enqueue greet"), tmp_path, env)
        assert done.returncode == 0, done.stderr
        assert "succeeded" in done.stdout and "Hello, Ada!" in done.stdout, done.stdout

        # The client's block, with the api_url it says to use locally and credentials to sign with.
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            monkeypatch.setenv(name, "readme")
        printed = io.StringIO()
        with redirect_stdout(printed):
            exec(python_block("sluice.Client("), {"api_url": endpoints["gateway_url"]})
        assert "Hello, Ada!" in printed.getvalue() and "'token': 1" in printed.getvalue(), printed.getvalue()

        for line in operator_lines():
            ran = bash(line, tmp_path, env)
            assert ran.returncode == 0, (line, ran.stderr)
        assert len(operator_lines()) >= 8

        # As from the checkout's root: its template (whose worker's CodeUri is functions/worker/) and
        # samconfig, copied beside the module; `sluice check` reads the installed package's otherwise.
        for name in ("template.yaml", "samconfig.toml"):
            shutil.copy(ROOT / name, tmp_path / name)
        checked = bash(shell_line("Deploying", "sluice check") + " --template template.yaml", tmp_path, env)
        assert checked.returncode == 0, checked.stderr
        assert "greet" in checked.stdout and "yes" in checked.stdout, checked.stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
