"""Build template.yaml for THIS machine's architecture, to run what ships (not the source tree).

The deployed functions are arm64; this machine is x86_64, so an arm64 layer cannot be
imported here. ``build`` runs ``sam build`` on a copy of the same template that differs only
in the architecture (the Globals' ``Architectures``, the layer's ``BuildArchitecture`` and
``CompatibleArchitectures``) and in paths made absolute, with the layer's wheels for x86_64
(``SLUICE_LAYER_PLATFORM``). Everything else (handlers, CodeUri contents, requirements, the
layer's build script) is the template's own. Needs python3.12 (pyenv: PYENV_VERSION=3.12.1:3.11.7).

    python infra/artifacts.py OUT_DIR      # -> OUT_DIR/build/{SharedLayer,GatewayFunction,...}
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYENV_VERSION = "3.12.1:3.11.7"
PLATFORMS = {"x86_64": "manylinux2014_x86_64", "arm64": "manylinux2014_aarch64"}
# What sam builds: a nested stack holding none of these is a template to translate, nothing more.
BUILT_TYPES = frozenset({"AWS::Serverless::Function", "AWS::Serverless::LayerVersion",
                         "AWS::Lambda::Function", "AWS::Lambda::LayerVersion",
                         "AWS::Serverless::Application"})
# An empty template for a nested stack's place (``build(nested=False)``).
EMPTY_STACK = """AWSTemplateFormatVersion: "2010-09-09"
Description: A nested stack left out of this build (infra/artifacts.py, nested=False)
Resources:
  Nothing:
    Type: AWS::CloudFormation::WaitConditionHandle
"""


def local_template(arch: str = "x86_64", root: Path = ROOT) -> str:
    """template.yaml for ``arch``, with its relative paths made absolute (the copy lives elsewhere)."""
    text = (root / "template.yaml").read_text()
    replacements = {
        "    Architectures: [arm64]\n": f"    Architectures: [{arch}]\n",
        "      CompatibleArchitectures: [arm64]\n": f"      CompatibleArchitectures: [{arch}]\n",
        "      BuildArchitecture: arm64\n": f"      BuildArchitecture: {arch}\n",
        "CodeUri: functions/": f"CodeUri: {root}/functions/",
        "CodeUri: infra/": f"CodeUri: {root}/infra/",
        "ContentUri: shared/": f"ContentUri: {root}/shared/",
        "TemplateURL: infra/": f"TemplateURL: {root}/infra/",
    }
    for old, new in replacements.items():
        if old not in text:
            raise RuntimeError(f"template.yaml changed shape: {old.strip()!r} not found")
        text = text.replace(old, new)
    return text


def env() -> dict[str, str]:
    shims = Path(os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))) / "shims"
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", ""), str(shims)])
    return {**os.environ, "PATH": path, "PYENV_VERSION": PYENV_VERSION, "SAM_CLI_TELEMETRY": "0",
            "AWS_DEFAULT_REGION": os.environ.get("AWS_DEFAULT_REGION", "us-east-1")}


def python312() -> str:
    """The runtime's interpreter itself (not pyenv's shim, which needs PYENV_VERSION in every child)."""
    out = subprocess.run(["python3.12", "-c", "import sys; print(sys.executable)"], env=env(),
                         capture_output=True, text=True, timeout=60, check=True)
    return out.stdout.strip()


def without_nested_stacks(text: str, root: Path, empty: Path) -> str:
    """``text`` (``local_template``'s) with each nested stack's TemplateURL pointing at ``empty``."""
    return re.sub(rf"TemplateURL: {re.escape(str(root))}/infra/\S+", f"TemplateURL: {empty}", text)


def build(out: Path, arch: str = "x86_64", timeout: float = 600, root: Path = ROOT,
          nested: bool = True) -> Path:
    """``sam build`` of ``root``'s template for ``arch`` into ``out/build``; returns that folder.

    ``nested=False``: the nested stacks (infra/network.yaml, endpoints.yaml, observability.yaml and
    its ~90 shard alarms) are each an empty template in the copy. They hold nothing sam builds
    (``BUILT_TYPES``; tests/infra/test_artifacts_template.py), but sam translates each one twice,
    about 9 of an x86_64 build's 27 CPU-s; what runs the functions needs none of them.
    """
    out.mkdir(parents=True, exist_ok=True)
    template = out / "template.yaml"
    text = local_template(arch, root)
    if not nested:
        empty = out / "empty-stack.yaml"
        empty.write_text(EMPTY_STACK)
        text = without_nested_stacks(text, root, empty)
    template.write_text(text)
    sam = shutil.which("sam", path=env()["PATH"])
    if sam is None:
        raise RuntimeError("sam is not installed (pip install -e .[dev])")
    build_dir = out / "build"
    result = subprocess.run([sam, "build", "--template", str(template), "--build-dir", str(build_dir)],
                            cwd=out, env={**env(), "SLUICE_LAYER_PLATFORM": PLATFORMS[arch]},
                            capture_output=True, text=True, timeout=timeout, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"sam build failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return build_dir


if __name__ == "__main__":  # OUT_DIR [SOURCE_ROOT]: another checkout's template, e.g. to compare
    print(build(Path(sys.argv[1]), root=Path(sys.argv[2]).resolve() if len(sys.argv) > 2 else ROOT))
