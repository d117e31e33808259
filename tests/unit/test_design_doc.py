"""docs/design.md's trace of one job (issue 16): at most eight steps, every module it names exists,
and each relay part it names opens with a docstring saying its one job."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "shared" / "sluice"


def _trace() -> str:
    text = (ROOT / "docs" / "design.md").read_text()
    return text.split("## One job, end to end", 1)[1].split("\n## ", 1)[0]


def _resolve(name: str) -> Path:
    if name.startswith(("shared/", "functions/")):
        return ROOT / name
    return PACKAGE / name


def test_the_trace_has_at_most_eight_steps_in_order() -> None:
    steps = [int(n) for n in re.findall(r"^(\d+)\. ", _trace(), re.MULTILINE)]
    assert steps == list(range(1, len(steps) + 1)) and 0 < len(steps) <= 8


def test_every_module_the_trace_names_exists() -> None:
    names = re.findall(r"`([\w/]+\.(?:py|lua))`", _trace())
    assert len(names) > 10
    missing = [n for n in names if not _resolve(n).is_file() and not (PACKAGE / "relay" / n).is_file()]
    assert not missing, missing


def test_each_relay_part_names_its_one_job_first() -> None:
    step = next(s for s in re.split(r"^\d+\. ", _trace(), flags=re.MULTILINE) if "Relay.step" in s)
    parts = re.findall(r"`(\w+\.py)`", step)
    assert {"ownership.py", "intake.py", "planner.py", "pusher.py", "committer.py"} <= set(parts)
    for part in parts:
        doc = ast.get_docstring(ast.parse((PACKAGE / "relay" / part).read_text()))
        assert doc and doc.splitlines()[0].strip(), part
