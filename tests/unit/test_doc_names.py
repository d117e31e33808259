"""One name per thing (docs/design.md, Glossary): what the docs name exists, and retired names stay gone.

- every file a doc names in backticks (``relay/loop.py``, ``backends/redis/lua/push.lua``,
  ``tests/unit/test_x.py``) exists, relative to the repository, ``shared/``, ``shared/sluice/`` or
  ``shared/sluice_dev/``;
- every dotted name a doc gives under ``sluice.`` or ``sluice_dev.`` imports (a module, or an
  attribute of one), except the names that are not code (Kafka topics, metric names);
- the names the house retired (issue 26) appear nowhere in the code, the tests or the docs.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from sluice.backends.otel.spans import ATTRIBUTES, SPAN_NAMES

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([*(ROOT / "docs").glob("*.md"), ROOT / "README.md"])
BASES = (ROOT, ROOT / "shared", ROOT / "shared" / "sluice", ROOT / "shared" / "sluice_dev")
NOT_CODE = {"sluice.jobs", "sluice.jobs.dlq", "sluice.relay.push.unminted",  # topics, a metric
            "sluice.queue", "sluice.queue.thumbs",  # completion events' sources (docs/events.md)
            "sluice.fence",  # the WSGI environ and ASGI scope key of an admitted request (sluice_fence)
            *SPAN_NAMES, *ATTRIBUTES}  # the spans' names and attributes (docs/worker.md, Traces)
# Files of a user's project or of a running stack, not of this repository.
NOT_OURS = {".sluice/endpoints.json", "myapp/jobs.py", "control/worker.json", "worker/jobs.py",
            "functions/worker/jobs.py"}  # README.md's first handler
# old name -> the one that replaced it (docs/design.md, Glossary)
RETIRED = {
    r"\bEndedJob\b": "SettleEntry",
    r"\bGatekeeper\b": "FamilyGateway",
    r"\bsluice\.wiring\b": "sluice.entry.root",
    r"\bsluice\.events\b": "sluice.core.bus",
    r"\bsluice\.flows\b": "sluice.core.families",
    r"\bsluice\.(local|chaos|cli)\b": "sluice_dev.*",
    r"\bapi_families\b": "sluice.gateway.families",
}


def _exists(name: str) -> bool:
    return any((base / name).exists() for base in BASES)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_file_a_doc_names_exists(doc: Path) -> None:
    names = re.findall(r"`((?:[\w.-]+/)+[\w.-]+\.(?:py|lua|json|yaml|md|toml|sh))`", doc.read_text())
    missing = sorted({n for n in names if not _exists(n)} - NOT_OURS)
    assert not missing, f"{doc.name} names files that do not exist: {missing}"


def _resolves(name: str) -> bool:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_dotted_name_a_doc_gives_imports(doc: Path) -> None:
    names = set(re.findall(r"\b(sluice(?:_dev)?(?:\.[A-Za-z_]\w*)+)", doc.read_text())) - NOT_CODE
    missing = sorted(n for n in names if not _resolves(n))
    assert not missing, f"{doc.name} names what does not exist: {missing}"


def test_retired_names_are_gone() -> None:
    files = [*DOCS, *(ROOT / "shared").rglob("*.py"), *(ROOT / "tests").rglob("*.py"),
             *(ROOT / "functions").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py"),
             ROOT / "template.yaml", *(ROOT / "infra").rglob("*.yaml")]
    me = Path(__file__).resolve()
    found = [f"{path.relative_to(ROOT)}: {re.search(old, path.read_text())[0]} (now {new})"  # type: ignore[index]
             for path in files if path.resolve() != me
             for old, new in RETIRED.items() if re.search(old, path.read_text())]
    assert not found, "\n".join(found)


def test_the_checks_see_what_they_look_for() -> None:
    assert _exists("relay/loop.py") and _exists("backends/redis/lua/push.lua")
    assert not _exists("store/jobs.py")
    assert _resolves("sluice.core.bus.EventBus") and not _resolves("sluice.core.bus.EndedJob")
    assert not _resolves("sluice.wiring")
