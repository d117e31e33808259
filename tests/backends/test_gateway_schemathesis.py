"""Schemathesis against the gateway served over HTTP on the real adapters.

The OpenAPI document the gateway serves drives the run: coverage (boundary and
negative values), fuzzing and stateful phases. Any 5xx, an undocumented status code,
content type or header, or a body that breaks its documented schema fails the test.
Bounded (few examples per operation, fixed seed) so it takes well under a minute.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sluice.entry.gateway import Gateway, build_api
from sluice_dev.local import servers
from sluice_dev.local.api_server import LocalGateway
from tests.backends.test_gateway_stack import kafka_records, stack_settings

CHECKS = ("not_a_server_error,status_code_conformance,content_type_conformance,"
          "response_headers_conformance,response_schema_conformance")


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_schemathesis_finds_no_server_error_and_no_schema_violation(
        tansu: servers.Server, moto_server: servers.Server, redis_server: servers.Server,
        tmp_path: Path) -> None:
    settings = stack_settings(tansu, moto_server, redis_server)
    api = build_api(settings)
    with LocalGateway([Gateway(api), Gateway(api)]) as gateway:
        run = subprocess.run(
            [str(Path(sys.executable).parent / "st"), "run", f"{gateway.url}/v1/openapi.json",
             "--checks", CHECKS, "--max-examples", "10", "--seed", "5", "--workers", "1",
             "--phases", "coverage,fuzzing,stateful", "--generation-database", "none", "--no-color",
             "--request-timeout", "20", "--report", "junit", "--report-dir", str(tmp_path)],
            capture_output=True, text=True, timeout=100, check=False)
    summary = run.stdout[-4000:]
    assert run.returncode == 0, summary + run.stderr[-2000:]
    assert " passed" in summary and "failures" not in summary.lower().split("summary")[-1]
    assert kafka_records(settings), "the run enqueued nothing: it did not exercise the real path"
