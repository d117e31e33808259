"""Issue 14: production code never imports the dev tooling, which the Lambda layer leaves out.

The tooling modules are named once in pyproject.toml (``[tool.sluice] tooling``); the layer
build (``shared/build_layer.py``) must leave out the same ones. Every import statement of
every other module of ``sluice`` (at module level or inside a function) and of the functions'
handler files is parsed here; one that reaches into the tooling fails the test.
"""

from __future__ import annotations

import ast
import importlib.util
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "shared" / "sluice"
TOOLING: list[str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["sluice"]["tooling"]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT / "shared").with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_tooling(module: str) -> bool:
    return any(module == t or module.startswith(t + ".") for t in TOOLING)


def imports_of(path: Path, module: str) -> list[tuple[int, str]]:
    """Every module ``path`` imports (relative imports resolved), with its line."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package) \
                if node.level else node.module or ""
            found.append((node.lineno, base))
            # "from sluice import cli" imports the submodule sluice.cli
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def _production_files() -> list[tuple[Path, str]]:
    files = [(p, _module_name(p)) for p in sorted(PACKAGE.rglob("*.py"))]
    files = [(p, m) for p, m in files if not _is_tooling(m)]
    files += [(p, f"functions.{p.parent.name}.app") for p in sorted((ROOT / "functions").glob("*/app.py"))]
    return files


def test_the_tooling_list_names_real_modules() -> None:
    for module in TOOLING:
        relative = Path(*module.split(".")[1:])
        assert (PACKAGE / relative).is_dir() or (PACKAGE / relative).with_suffix(".py").is_file(), module


def test_production_code_never_imports_the_dev_tooling() -> None:
    upward = [f"{path.relative_to(ROOT)}:{line} imports {name}"
              for path, module in _production_files()
              for line, name in imports_of(path, module) if _is_tooling(name)]
    assert not upward, "production code imports dev tooling:\n" + "\n".join(upward)


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    """The parser catches the forms an upward import takes (the old worker entry's among them)."""
    (tmp_path / "sluice" / "runtime").mkdir(parents=True)
    bad = tmp_path / "sluice" / "runtime" / "entry.py"
    bad.write_text("def f():\n    from sluice.local.history import recorded\n"
                   "from ..cli import main\nimport sluice.chaos.app\nfrom sluice import local\n")
    names = [n for _, n in imports_of(bad, "sluice.runtime.entry")]
    assert {n for n in names if _is_tooling(n)} == {
        "sluice.local.history", "sluice.local.history.recorded", "sluice.cli", "sluice.cli.main",
        "sluice.chaos.app", "sluice.local"}


def test_the_layer_build_leaves_out_exactly_the_tooling() -> None:
    spec = importlib.util.spec_from_file_location("build_layer", ROOT / "shared" / "build_layer.py")
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    as_modules = sorted("sluice." + t.removesuffix(".py").replace("/", ".") for t in build.TOOLING)
    assert as_modules == sorted(TOOLING)


# (module, what it may not import): the use case sits below its HTTP adapter, and the wire
# format (request and response bodies) below both (issue 16).
BELOW = [("sluice.api", "sluice.http"), ("sluice.wire", "sluice.http"), ("sluice.wire", "sluice.api")]


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def upward_imports(files: list[tuple[Path, str]]) -> list[str]:
    return [f"{path.relative_to(ROOT)}:{line} imports {name}"
            for path, module in files for lower, upper in BELOW if _within(module, lower)
            for line, name in imports_of(path, module) if _within(name, upper)]


def test_the_use_case_imports_nothing_from_its_http_adapter() -> None:
    upward = upward_imports([(p, m) for p, m in _production_files() if m.startswith("sluice.")])
    assert not upward, "a lower layer imports an upper one:\n" + "\n".join(upward)


def test_the_layer_rule_sees_the_old_api_imports(tmp_path: Path) -> None:
    (tmp_path / "sluice").mkdir()
    bad = tmp_path / "sluice" / "api.py"
    bad.write_text("from sluice.http.models import Accepted\nfrom sluice.http import jsonguard\n"
                   "from sluice.httpx import fine\n")
    found = [n for _, n in imports_of(bad, "sluice.api") if _within(n, "sluice.http")]
    assert found == ["sluice.http.models", "sluice.http.models.Accepted",
                     "sluice.http", "sluice.http.jsonguard"]
