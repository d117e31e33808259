"""`sluice dev --profile small`: the pipeline behind the small profile's HTTP API, whose local server sends
payload 2.0 events to the gateway function, end to end (issue 33, item 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.stack.devrun import job_views, running_dev
from tests.stack.gateway_http import http

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

HANDLERS = "import sluice\n\napp = sluice.Worker()\n\n\n@app.handler('small')\ndef h(job, ctx):\n" \
           "    return {'n': job.payload['n'] + 1}\n"


def test_sluice_dev_runs_a_job_behind_the_small_profiles_http_api(tmp_path: Path) -> None:
    (tmp_path / "smalljobs.py").write_text(HANDLERS)
    with running_dev(tmp_path, "--workers", "1", "--handlers", "smalljobs", "--profile", "small") as dev:
        gateway = dev.endpoints["gateway_url"]
        status, accepted = http("POST", f"{gateway}/v1/queues/small/jobs", {"payload": {"n": 41}})
        assert status == 202, accepted
        url = f"{gateway}/v1/jobs/{accepted['job_id']}"
        views = job_views([url])
        assert url in views, "the job did not succeed within 60 s"
        assert views[url]["result"] == {"n": 42}
        status, problem = http("GET", f"{gateway}/v1/queues/small/nope")  # the gateway's own 404, as 2.0
        assert status == 404 and problem["status"] == 404, problem
    assert dev.proc.returncode == 0, dev.err
