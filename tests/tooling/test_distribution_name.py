"""The distribution's name is ours on the public index (issue 31, item 3: the name only).

``sluice`` there is an unrelated 2015 project (zfs snapshots, 0.3.1), which outranks our 0.1.0 for any
``pip install sluice`` that also reads the public index (``--extra-index-url``): dependency confusion.
The distribution is ``sluice-queue``; the import name stays ``sluice``. The venv is shared by the
tests, so nothing here installs: the names below were looked up with ``pip index versions`` on
2026-12-06 (``sluice-queue``: "No matching distribution found").
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Names on the public index that hold "sluice" (2026-12-06), normalized as PEP 503 does.
TAKEN = frozenset({
    "sluice", "sluicebox", "sluice-cli", "sluice-celery", "sluice-intel", "sluice-limiter", "sluice-mcp",
    "sluice-pipeline", "sluice-taint", "job-sluice", "mcp-sluice", "fastapi-sluice", "datasluice",
    "goldsluice", "lmsluice", "apache-airflow-providers-datasluice",
})


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def project() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        found: dict[str, object] = tomllib.load(f)["project"]
    return found


def test_the_distribution_is_not_named_after_a_project_on_the_public_index() -> None:
    name = normalized(str(project()["name"]))
    assert name not in TAKEN, f"{name!r} belongs to another project on the public index"
    assert name == "sluice-queue"


def test_extras_that_name_the_project_name_it_by_its_distribution_name() -> None:
    name = normalized(str(project()["name"]))
    extras = project()["optional-dependencies"]
    assert isinstance(extras, dict)
    own = [req for reqs in extras.values() for req in reqs
           if normalized(re.split(r"[\[<>=!~; ]", req, maxsplit=1)[0]) in TAKEN | {name}]
    assert own, "the dev extra builds on the local one"
    for req in own:  # "sluice[local]" would pull the 2015 project into a dev install
        assert normalized(req.split("[", 1)[0]) == name, req


def test_the_import_name_stays_sluice() -> None:
    with (ROOT / "pyproject.toml").open("rb") as f:
        tool = tomllib.load(f)["tool"]["setuptools"]
    assert tool["package-dir"] == {"": "shared"}
    assert (ROOT / "shared" / "sluice" / "__init__.py").is_file()
    assert set(tool["package-data"]) == {"sluice", "sluice_dev", "sluice_fence"}  # fence.lua (issue 31)


def test_no_install_command_names_the_old_distribution() -> None:
    """A README, doc or Makefile line that runs ``pip install sluice`` fetches the 2015 project."""
    files = [ROOT / "README.md", ROOT / "Makefile", ROOT / ".ci" / "run",
             *sorted((ROOT / "docs").glob("*.md"))]
    bad = [(f.name, line) for f in files for line in f.read_text().splitlines()
           if re.search(r"pip install[^\n]*?(?<![\w.-])sluice(?![\w-])(?!/)", line)]
    assert not bad, bad
