"""A 200 KB payload through the whole local pipeline (`sluice dev`, issue 28 item 4): the gateway
function puts it in the payloads bucket (moto) and appends a record carrying a pointer; Redis holds
the pointer alone; the worker function resolves it and the handler gets the payload intact."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import boto3
import pytest
import redis

from sluice.backends.redis.keys import QueueKeys
from sluice.core.models import dump_json
from tests.stack.test_dev import SLUICE, http, wait_for
from tests.stack.test_flows_stack import until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

HANDLERS = """
import hashlib

import sluice
from sluice.core.models import dump_json

app = sluice.Worker()


@app.handler("blobs")
def blobs(job, ctx):
    body = dump_json(job.payload).encode("utf-8")
    return {"sha256": hashlib.sha256(body).hexdigest(), "bytes": len(body), "keys": sorted(job.payload)}
"""


def big(tag: str) -> dict[str, Any]:
    """About 200 KB of JSON, not ASCII only."""
    return {"tag": tag, "rows": [{"i": i, "text": f"ligne {i} \u00e9t\u00e9 " * 5} for i in range(2200)]}


def test_a_200_kb_payload_reaches_its_handler_intact_while_redis_holds_a_pointer(tmp_path: Path) -> None:
    (tmp_path / "bigjobs.py").write_text(HANDLERS)
    dev = [SLUICE, "dev", "--workers", "1", "--log-level", "WARNING", "--handlers", "bigjobs"]
    proc = subprocess.Popen(dev, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")})
    try:
        ep = wait_for(tmp_path / ".sluice" / "endpoints.json", proc)
        gw = ep["gateway_url"]
        held, run = big("held"), big("run")
        size = len(dump_json(run).encode("utf-8"))
        assert 190_000 < size < 256 * 1024

        # Delayed ten minutes (within the relay's 15-minute horizon, so not in the delay lane): it
        # waits in Redis, where its hash must hold the pointer only.
        status, accepted = http("POST", f"{gw}/v1/queues/blobs/jobs",
                                {"payload": held, "delay_seconds": 600})
        assert status == 202, accepted
        admin = redis.Redis.from_url(ep["redis_url"])
        key = QueueKeys("blobs").job(accepted["job_id"])
        deadline = time.monotonic() + 60
        while not admin.exists(key):
            assert time.monotonic() < deadline, "the relay never pushed the delayed job"
            time.sleep(0.2)
        fields = admin.hgetall(key)
        stored = sum(len(k) + len(v) for k, v in fields.items())
        assert stored < 1024, (stored, fields)  # not the 200 KB payload
        pointer = [v for v in fields.values() if b'"$sluice":"s3"' in v]
        assert len(pointer) == 1 and accepted["job_id"].encode() in pointer[0], fields
        s3 = boto3.client("s3", region_name="us-east-1", endpoint_url=ep["dynamodb_endpoint"])
        obj = s3.get_object(Bucket="sluice-payloads",
                            Key=f"payloads/blobs/{accepted['job_id']}")["Body"].read()
        assert obj == dump_json(held).encode("utf-8")

        # Hostile: a caller forging a pointer to that object (another caller's, say) is refused.
        forged = {"$sluice": "s3", "key": f"payloads/blobs/{accepted['job_id']}",
                  "sha256": hashlib.sha256(obj).hexdigest(), "bytes": len(obj)}
        status, problem = http("POST", f"{gw}/v1/queues/blobs/jobs", {"payload": forged})
        assert (status, problem["code"]) == (400, "INVALID_INPUT"), problem

        # Run now: the handler sees the original payload, byte for byte as canonical JSON.
        status, accepted = http("POST", f"{gw}/v1/queues/blobs/jobs", {"payload": run})
        assert status == 202, accepted
        done = until(f"{gw}/v1/jobs/{accepted['job_id']}", lambda v: v["status"] in ("succeeded", "dead"))
        assert done["status"] == "succeeded", done
        assert done["result"] == {"sha256": hashlib.sha256(dump_json(run).encode("utf-8")).hexdigest(),
                                  "bytes": size, "keys": ["rows", "tag"]}
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
