"""Issue 14: one job end to end through the BUILT artifacts, not the source tree.

``sam build`` of the same template for this machine (x86_64, python3.12: infra/artifacts.py; its
nested stacks, which hold nothing sam builds, left out: test_artifacts_template.py; test_build.py
builds them), then the gateway, relay and worker functions from the build folder, each in a python3.12
process with only its own bundle and the built layer on its path, as Lambda lays them out
(/var/task and /opt/python; infra/lambda_rie.py), configured from the template like
``sluice dev`` (``DevOptions.artifacts``). The job goes over HTTP to the gateway, through
Kafka (Tansu) and the relay into Redis, to a worker, and its result into DynamoDB (moto).
This catches what a source checkout hides: a module or .lua file missing from the layer, a
dependency missing from requirements.txt, a wrong handler path, a wheel missing for the
target platform, a function that imports dev tooling the layer leaves out.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra import artifacts
from sluice_dev.local.dev import DevOptions, DevStack
from tests.infra.test_build import _python312_available
from tests.stack.gateway_http import http

# Its x86_64 build (no --cached: it shares no cache with test_build's arm64 one) runs beside
# test_build's on the other xdist worker (tests/infra/conftest.py).
pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not _python312_available():
        pytest.skip("no python3.12 (pyenv, PYENV_VERSION=3.12.1:3.11.7): the build and the functions need it")
    return artifacts.build(tmp_path_factory.mktemp("x86"), "x86_64", timeout=400, nested=False)


# A team's handlers module, where template.yaml's WorkerHandlersModule says to put it: in the
# worker's own bundle (functions/worker/, so WorkerFunction/ once built). The examples are dev
# tooling (sluice_dev) and never ship in the layer, so the built stack runs this one.
HANDLERS = """import sluice

app = sluice.Worker()


@app.handler("echo")
def echo(job: sluice.Job, ctx: sluice.JobContext) -> dict:
    return {"echo": job.payload}
"""


@pytest.fixture
def stack(built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[DevStack]:
    (built / "WorkerFunction" / "built_echo.py").write_text(HANDLERS)
    monkeypatch.syspath_prepend(str(built / "WorkerFunction"))  # sluice dev checks it here first
    dev = DevStack(DevOptions(state_dir=tmp_path / "stack", artifacts=built, workers=1, warm_workers=1,
                              gateway_concurrency=1, history=False, log_level="WARNING",
                              artifacts_python=artifacts.python312(), handlers="built_echo"))
    try:
        dev.start()
        yield dev
    finally:
        dev.stop()


@pytest.mark.timeout(480)
def test_the_built_layer_has_only_the_target_platforms_wheels(built: Path) -> None:
    site = built / "SharedLayer" / "python"
    (native,) = (site / "pydantic_core").glob("_pydantic_core.cpython-312-*.so")
    assert "x86_64" in native.name
    assert (site / "sluice" / "backends" / "redis" / "lua" / "push.lua").is_file()
    assert not (site / "sluice_dev").exists()  # the tooling never ships in the layer
    assert (built / "WorkerFunction" / "app.py").is_file()
    assert not (built / "WorkerFunction" / "sluice").exists()  # the bundle holds only its handler


@pytest.mark.timeout(480)
def test_one_job_goes_end_to_end_through_the_built_functions(stack: DevStack) -> None:
    url = stack.endpoints["gateway_url"]
    status, accepted = http("POST", f"{url}/v1/queues/echo/jobs", {"payload": {"hello": "built"}})
    assert status == 202, accepted
    job_id = accepted["job_id"]
    deadline, job = time.monotonic() + 120, {}
    while time.monotonic() < deadline:
        status, job = http("GET", f"{url}/v1/jobs/{job_id}")
        if job.get("status") in ("succeeded", "dead"):
            break
        time.sleep(0.5)
    assert job.get("status") == "succeeded", (job, _logs(stack))
    assert job["result"] == {"echo": {"hello": "built"}}
    # The result is in the DynamoDB jobs table, written by the built worker with its fencing token.
    import boto3

    s = stack.settings
    assert s is not None
    table = boto3.resource("dynamodb", region_name=s.aws_region, endpoint_url=s.aws_endpoint_url,
                           aws_access_key_id="testing", aws_secret_access_key="testing").Table(s.jobs_table)
    item = table.get_item(Key={"job_id": job_id}).get("Item") or {}
    assert item.get("status") == "succeeded" and int(item.get("token", 0)) >= 1, item
    # Each function ran from the build folder, never from this checkout.
    assert stack.lambdas is not None
    for fn in stack.lambdas.functions.values():
        assert fn.command and str(stack.options.artifacts) in " ".join(fn.command)
        assert "PYTHONPATH" not in fn.env and fn.command[0] != "python3.12"


def _logs(stack: DevStack) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted(stack.logs.glob("*.log")))
