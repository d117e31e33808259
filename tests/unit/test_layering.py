"""Production code never imports the dev tooling, which is its own package and not in the layer.

``sluice`` is the Lambda layer, whole; ``sluice_dev`` (the local stack, chaos, the CLI, the
console, the examples, the fakes) never ships in it (``shared/build_layer.py`` copies ``sluice``
alone). import-linter's contracts (pyproject.toml) hold the same rule for ``make test``; this
test parses every import statement (at module level or inside a function) of every module of
``sluice`` and of the functions' handler files, so the rule holds in the unit tier too.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

from tests.loading import module_from_file

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "shared" / "sluice"
TOOLING = ["sluice_dev"]


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
            # "from sluice_dev import cli" imports the submodule sluice_dev.cli
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def _production_files() -> list[tuple[Path, str]]:
    files = [(p, _module_name(p)) for p in sorted(PACKAGE.rglob("*.py"))]
    files += [(p, f"functions.{p.parent.name}.app") for p in sorted((ROOT / "functions").glob("*/app.py"))]
    return files


def test_production_code_never_imports_the_dev_tooling() -> None:
    upward = [f"{path.relative_to(ROOT)}:{line} imports {name}"
              for path, module in _production_files()
              for line, name in imports_of(path, module) if _is_tooling(name)]
    assert not upward, "production code imports dev tooling:\n" + "\n".join(upward)


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    """The parser catches the forms an upward import takes (the old worker entry's among them)."""
    (tmp_path / "sluice" / "worker").mkdir(parents=True)
    bad = tmp_path / "sluice" / "worker" / "entry.py"
    bad.write_text("def f():\n    from sluice_dev.local.history import recorded\n"
                   "import sluice_dev.chaos.app\nfrom sluice_dev import local\n")
    names = [n for _, n in imports_of(bad, "sluice.worker.entry")]
    assert {n for n in names if _is_tooling(n)} == {
        "sluice_dev.local.history", "sluice_dev.local.history.recorded",
        "sluice_dev.chaos.app", "sluice_dev", "sluice_dev.local"}


def test_the_layer_build_copies_sluice_whole_and_nothing_of_the_tooling(tmp_path: Path) -> None:
    build = module_from_file(ROOT / "shared" / "build_layer.py", "build_layer")
    build.copy_package(tmp_path)
    copied = {p.relative_to(tmp_path / "sluice") for p in (tmp_path / "sluice").rglob("*") if p.is_file()}
    source = {p.relative_to(PACKAGE) for p in PACKAGE.rglob("*")
              if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}
    assert copied == source
    assert not (tmp_path / "sluice_dev").exists()


# (module, what it may not import): the use case sits below its HTTP adapter, and the wire
# format (request and response bodies) below both (issue 16).
BELOW = [("sluice.gateway.api", "sluice.gateway.http"), ("sluice.core.wire", "sluice.gateway.http"),
         ("sluice.core.wire", "sluice.gateway.api")]


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
    bad.write_text("from sluice.gateway.http.models import Accepted\n"
                   "from sluice.gateway.http import jsonguard\n"
                   "from sluice.httpx import fine\n")
    found = [n for _, n in imports_of(bad, "sluice.gateway.api") if _within(n, "sluice.gateway.http")]
    assert found == ["sluice.gateway.http.models", "sluice.gateway.http.models.Accepted",
                     "sluice.gateway.http", "sluice.gateway.http.jsonguard"]


# The services' fence middleware (issue 31, item 7): a package of its own, outside the layer, that a
# service imports with no Sluice runtime and no tooling: of ``sluice`` it may use the pure core only.
FENCE = ROOT / "shared" / "sluice_fence"
FENCE_MAY_USE = ("sluice.core", "sluice_fence")


def test_the_layer_never_imports_the_fence_and_the_build_leaves_it_out(tmp_path: Path) -> None:
    found = [f"{path.relative_to(ROOT)}:{line} imports {name}" for path, module in _production_files()
             for line, name in imports_of(path, module) if _within(name, "sluice_fence")]
    assert not found, "the layer imports the services' fence:\n" + "\n".join(found)
    build = module_from_file(ROOT / "shared" / "build_layer.py", "build_layer")
    build.copy_package(tmp_path)
    assert not (tmp_path / "sluice_fence").exists()


def test_the_fence_uses_only_the_core_of_the_layer_and_no_tooling() -> None:
    files = [(p, _module_name(p)) for p in sorted(FENCE.rglob("*.py"))]
    assert files
    beyond = [f"{path.relative_to(ROOT)}:{line} imports {name}" for path, module in files
              for line, name in imports_of(path, module)
              if (name.split(".")[0] in ("sluice", "sluice_dev", "sluice_fence", "boto3")
                  and not any(_within(name, ok) for ok in FENCE_MAY_USE))]
    assert not beyond, "the fence imports beyond the core:\n" + "\n".join(beyond)
