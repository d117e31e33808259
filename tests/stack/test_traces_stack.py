"""Traces end to end on the local stack (issue 31, item 6): `sluice dev --traces FILE` writes every
function's spans to FILE, and one job's spans form one trace across the gateway, the relay and the
worker, under the caller's span, with each span's parent where docs/worker.md ("Traces") puts it; a
parent's children and its continuation join its trace through the internal function; a hostile
traceparent costs no enqueue; and no span carries a payload or a result."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from sluice.backends.otel.spans import ATTRIBUTES, SPAN_NAMES
from sluice_dev.local import deployed
from sluice_dev.local.traces import read
from tests.stack.test_dev import SLUICE, http, wait_for
from tests.stack.test_flows_stack import until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
DOCS_TRACE = "0af7651916cd43dd8448eb211c80319c"  # docs/api.md's example's
SECRET = 7_777_777_777  # in the ledger payload (its amount) and its result: in no span
GATEWAY, RELAY, WORKER, INTERNAL = (deployed.NAMES[n] for n in (
    "GatewayFunction", "RelayFunction", "WorkerFunction", "InternalFunction"))


def spans_of(path: Path, want: Any, timeout: float = 30) -> list[dict[str, Any]]:
    """The file's spans once ``want(spans)`` holds (a lease span is written when Redis is told)."""
    deadline = time.monotonic() + timeout
    while True:
        spans = read(path)
        if want(spans) or time.monotonic() > deadline:
            return spans
        time.sleep(0.3)


def one(spans: list[dict[str, Any]], name: str, job: str) -> dict[str, Any]:
    found = [s for s in spans if s["name"] == name and s["attributes"].get("sluice.job") == job]
    assert len(found) == 1, (name, job, [(s["name"], s["attributes"]) for s in spans])
    return found[0]


def test_one_jobs_spans_form_one_trace_across_the_functions_and_its_children_join_it(tmp_path: Path) -> None:
    traces_file = tmp_path / "spans.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    argv = [SLUICE, "dev", "--workers", "2", "--log-level", "WARNING", "--traces", str(traces_file)]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        ep = wait_for(tmp_path / ".sluice" / "endpoints.json", proc)
        gw = ep["gateway_url"]
        caller = {"traceparent": f"00-{TRACE}-{CALLER_SPAN}-01"}
        status, ledger = http("POST", f"{gw}/v1/queues/ledger/jobs",
                              {"payload": {"account": "a", "amount": SECRET}}, headers=caller)
        assert status == 202, ledger
        status, fan = http("POST", f"{gw}/v1/queues/fanout/jobs", {"payload": {"n": 2}},
                           headers={"traceparent": f"00-{'5' * 32}-{CALLER_SPAN}-01"})
        assert status == 202, fan
        status, hostile = http("POST", f"{gw}/v1/queues/echo/jobs", {"payload": "x"},
                               headers={"traceparent": "00-" + "Z" * 4000})
        assert status == 202, hostile  # ignored: a fresh trace, never a refusal
        text = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text(encoding="utf-8")
        example = text.split("## traceparent:", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
        exec(compile(example, "docs/api.md", "exec"), {"API": gw, "__name__": "docs_example"})
        until(f"{gw}/v1/jobs/{ledger['job_id']}", lambda v: v["status"] == "succeeded")
        parent = until(f"{gw}/v1/jobs/{fan['job_id']}", lambda v: v["status"] == "succeeded")
        then = parent["continuations"][0]
        until(f"{gw}/v1/jobs/{then}", lambda v: v["status"] == "succeeded")
        until(f"{gw}/v1/jobs/{hostile['job_id']}", lambda v: v["status"] == "succeeded")
        family = [*parent["children"], then]
        spans = spans_of(traces_file, lambda ss: {s["attributes"].get("sluice.job") for s in ss
                                                  if s["name"] == "sluice.lease"} >= {
            ledger["job_id"], fan["job_id"], hostile["job_id"], *family} and any(
            s["trace_id"] == DOCS_TRACE and s["name"] == "sluice.lease" for s in ss))
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()

    # One job: gateway -> relay -> worker, one trace, under the caller's span.
    job = ledger["job_id"]
    enqueue = one(spans, "sluice.enqueue", job)
    push, lease = one(spans, "sluice.push", job), one(spans, "sluice.lease", job)
    handler, grant = one(spans, "sluice.handler", job), one(spans, "sluice.grant", job)
    writes = [s for s in spans if s["name"] == "sluice.fenced_write" and s["attributes"]["sluice.job"] == job]
    traced = [s for s in spans if s["trace_id"] == TRACE]
    assert {s["service"] for s in traced} == {GATEWAY, RELAY, WORKER}
    expected = [enqueue, push, lease, handler, grant, *writes]
    assert sorted(s["span_id"] for s in traced) == sorted(s["span_id"] for s in expected)  # nothing else
    assert enqueue["parent_span_id"] == CALLER_SPAN and enqueue["service"] == GATEWAY
    assert (push["parent_span_id"], push["service"]) == (enqueue["span_id"], RELAY)
    assert (lease["parent_span_id"], lease["service"]) == (enqueue["span_id"], WORKER)
    assert grant["parent_span_id"] == handler["parent_span_id"] == lease["span_id"]
    by_write = {w["attributes"]["sluice.write"]: w for w in writes}
    assert by_write["result"]["parent_span_id"] == lease["span_id"]  # the result's fenced write
    assert by_write["put"]["parent_span_id"] == handler["span_id"]  # the handler's own, ctx.fenced_table
    assert enqueue["start_ns"] <= push["start_ns"] and enqueue["start_ns"] <= lease["start_ns"]
    assert lease["start_ns"] <= handler["start_ns"] <= handler["end_ns"] <= lease["end_ns"]
    assert lease["attributes"]["sluice.outcome"] == "acked" and all(
        s["status"] != "ERROR" for s in traced)

    # A family: the children and the continuation are enqueued under the parent's handler span.
    fan_handler = one(spans, "sluice.handler", fan["job_id"])
    [children] = [s for s in spans if s["name"] == "sluice.enqueue_children"]
    assert (children["parent_span_id"], children["service"]) == (fan_handler["span_id"], INTERNAL)
    assert children["trace_id"] == fan_handler["trace_id"] == "5" * 32
    for member in family:
        assert one(spans, "sluice.lease", member)["parent_span_id"] == children["span_id"], member
        assert one(spans, "sluice.handler", member)["trace_id"] == "5" * 32

    # docs/api.md's example: its given traceparent made a job of that trace, through to the worker.
    docs = [s for s in spans if s["trace_id"] == DOCS_TRACE]
    assert {s["service"] for s in docs} == {GATEWAY, RELAY, WORKER}
    [enqueued] = [s for s in docs if s["name"] == "sluice.enqueue"]
    assert enqueued["parent_span_id"] == "b7ad6b7169203331"

    # A hostile traceparent: a fresh trace rooted at the gateway, the job ran all the same.
    fresh = one(spans, "sluice.lease", hostile["job_id"])
    root = next(s for s in spans if s["span_id"] == fresh["parent_span_id"])
    assert (root["name"], root["parent_span_id"]) == ("sluice.enqueue", None)

    # Ids, names, counts and outcomes: the ledger's amount (its payload, its result) is in none.
    assert not [s for s in spans if str(SECRET) in json.dumps(s)]
    assert str(SECRET) not in traces_file.read_text()
    assert {k for s in spans for k in s["attributes"]} <= ATTRIBUTES
    assert {s["name"] for s in spans} <= SPAN_NAMES
