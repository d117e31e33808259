"""Importing ``sluice.core.config`` in a fresh interpreter loads no pydantic-settings (issue 14)."""

from __future__ import annotations

import subprocess
import sys


def test_importing_settings_loads_no_pydantic_settings() -> None:
    code = ("import sys, sluice.core.config; sluice.core.config.Settings(); "
            "print('pydantic_settings' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"
