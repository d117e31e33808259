"""openapi.json at the root is the document the gateway serves, regenerated in this process."""

from __future__ import annotations

import difflib
import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

from sluice_dev import openapi

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "openapi.json"


def test_the_committed_openapi_document_is_current() -> None:
    assert COMMITTED.is_file(), "openapi.json is missing: run make openapi"
    fresh, committed = openapi.document(), COMMITTED.read_text(encoding="utf-8")
    if fresh != committed:
        lines = difflib.unified_diff(committed.splitlines(True), fresh.splitlines(True),
                                     "openapi.json (committed)", "openapi.json (the models)")
        diff = "".join(list(lines)[:60])
        raise AssertionError(
            "openapi.json is stale: run make openapi and commit it (generated here with pydantic "
            f"{version('pydantic')}, aws-lambda-powertools {version('aws-lambda-powertools')})\n{diff}")


def test_the_document_covers_the_public_operator_and_schedule_routes() -> None:
    doc = json.loads(COMMITTED.read_text(encoding="utf-8"))
    assert doc["openapi"].startswith("3.1")
    operations = {op["operationId"] for item in doc["paths"].values() for op in item.values()}
    assert {"enqueue", "enqueue_batch", "get_job", "cancel_job", "get_queue"} <= operations
    assert any(p.startswith("/v1/admin/queues/{queue}/schedules") for p in doc["paths"])
    assert "x-sluice-typed-queues" not in doc  # a deployment's own routes, not the API's


def test_make_openapi_writes_the_same_bytes_and_says_when_nothing_changed(tmp_path: Path) -> None:
    target = tmp_path / "openapi.json"
    run = [sys.executable, "-m", "sluice_dev.openapi", str(target)]
    first = subprocess.run(run, capture_output=True, text=True, timeout=60, check=True)
    assert "written" in first.stdout
    assert target.read_text(encoding="utf-8") == openapi.document()
    again = subprocess.run(run, capture_output=True, text=True, timeout=60, check=True)
    assert "up to date" in again.stdout
    assert "openapi:" in (ROOT / "Makefile").read_text()
