"""``sluice --version`` in a fresh interpreter: it imports almost nothing."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("boto3", "botocore", "redis", "kafka", "confluent_kafka", "rich", "pydantic", "sluice_dev.local",
         "sluice.core.config", "sluice.client", "sluice_dev.cli.ops", "sluice_dev.cli.target")


def test_version_imports_almost_nothing() -> None:
    code = ("import sys, json\nsys.argv = ['sluice', '--version']\nfrom sluice_dev.cli import main\n"
            "try:\n    main()\nexcept SystemExit as exc:\n    assert exc.code in (0, None), exc.code\n"
            "print(json.dumps(sorted(sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    version, modules = out.stdout.splitlines()
    assert version.startswith("sluice, version")
    loaded = [m for m in json.loads(modules) if any(m == h or m.startswith(h + ".") for h in HEAVY)]
    assert not loaded, loaded


def test_the_console_script_runs_the_cli_when_the_tooling_is_installed() -> None:
    """``sluice`` is ``sluice_dev.launcher:main`` (issue 31, item 3): with the tooling it is the CLI."""
    code = ("import sys\nsys.argv = ['sluice', '--version']\nfrom sluice_dev.launcher import main\n"
            "main()\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("sluice, version")
