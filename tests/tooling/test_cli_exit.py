"""``sluice`` leaves what it built to the process's exit instead of collecting it on the way out."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(60)


def test_a_command_freezes_its_objects_before_the_interpreter_exits() -> None:
    """After a local stack had stopped, `sluice dev`'s exit spent 2-3 s on the interpreter's last
    collections (a loaded machine), which every test that stops it waited for: now 0.2 s. An
    exit handler registered before the command runs after the command's own, and sees the freeze."""
    code = ("import atexit, gc\natexit.register(lambda: print('frozen', gc.get_freeze_count()))\n"
            "from sluice_dev.cli import main\nmain(['queues', '--help'])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    frozen = int(out.stdout.splitlines()[-1].removeprefix("frozen "))
    assert frozen > 1000, out.stdout[-500:]
