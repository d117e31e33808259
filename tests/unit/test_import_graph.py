"""The production package has no import cycle (issue 26), measured as infra/import_graph.py does."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

import grimp

from tests.loading import module_from_file

ROOT = Path(__file__).resolve().parents[2]


def _tool() -> ModuleType:
    return module_from_file(ROOT / "infra" / "import_graph.py", "import_graph")


def test_sluice_and_sluice_dev_have_no_import_cycle() -> None:
    tool = _tool()
    for package in ("sluice", "sluice_dev", "sluice_fence"):
        graph = grimp.build_graph(package, cache_dir=None)
        assert tool.cycles(graph, set(graph.modules)) == [], package


def test_the_measure_sees_a_cycle(tmp_path: Path) -> None:
    package = tmp_path / "loopy"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from loopy import b\n")
    (package / "b.py").write_text("def f():\n    from loopy import c\n")
    (package / "c.py").write_text("import typing\nif typing.TYPE_CHECKING:\n    from loopy.a import x\n")
    (package / "d.py").write_text("from loopy import a\n")
    sys.path.insert(0, str(tmp_path))
    try:
        graph = grimp.build_graph("loopy", cache_dir=None)
    finally:
        sys.path.remove(str(tmp_path))
    assert _tool().cycles(graph, set(graph.modules)) == [["loopy.a", "loopy.b", "loopy.c"]]
