"""Build the shared Lambda layer: what the functions need at run time, and nothing else.

``sam build`` runs this through ``shared/Makefile`` (``BuildMethod: makefile``) with the
layer's folder as ``ARTIFACTS_DIR``; it must run under the functions' runtime (python3.12),
whose bytecode it writes. It

- installs the pinned dependencies of ``requirements.txt`` for the target platform
  (``SLUICE_LAYER_PLATFORM``, default ``manylinux2014_aarch64``: the functions run on arm64);
- copies the ``sluice`` package whole: the dev tooling (the local stack, chaos, the CLI, the
  console, the examples) is its own package, ``sluice_dev``, which never ships in the layer and
  which nothing in ``sluice`` imports (import-linter's contracts, tests/unit/test_layering.py);
- precompiles every module with hash-based invalidation (``unchecked-hash``: the layer is
  read-only, and SAM resets file times, which would make timestamp-checked ``.pyc`` files
  stale and the first import in every cold start compile everything again).

Not part of the layer itself.
"""

from __future__ import annotations

import compileall
import os
import py_compile
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PYTHON_VERSION = "3.12"


def _ignore(directory: str, names: list[str]) -> set[str]:
    return {n for n in names if n == "__pycache__" or n.endswith(".pyc")}


def install_dependencies(site: Path, platform: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    "--requirement", str(HERE / "requirements.txt"), "--target", str(site),
                    "--platform", platform, "--implementation", "cp", "--python-version", PYTHON_VERSION,
                    "--only-binary=:all:", "--no-compile", "--upgrade"], check=True)


def copy_package(site: Path) -> None:
    source = HERE / "sluice"
    target = site / "sluice"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, ignore=_ignore)


def precompile(site: Path) -> None:
    ok = compileall.compile_dir(str(site), quiet=1, workers=0,
                                invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    if not ok:
        raise SystemExit("compileall failed")


def main(argv: list[str]) -> int:
    if sys.version_info[:2] != tuple(int(p) for p in PYTHON_VERSION.split(".")):
        raise SystemExit(f"build the layer with python{PYTHON_VERSION} (its bytecode is version-specific), "
                         f"not {sys.version.split()[0]}")
    site = Path(argv[0]) / "python"
    site.mkdir(parents=True, exist_ok=True)
    install_dependencies(site, os.environ.get("SLUICE_LAYER_PLATFORM", "manylinux2014_aarch64"))
    copy_package(site)
    precompile(site)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
