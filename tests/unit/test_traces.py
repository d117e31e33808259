"""Traces end to end (issue 31, item 6) on the fakes: the W3C traceparent a job carries, the sealed
record, the enqueue span the gateway starts, and the relay's and worker's spans observed on the bus;
a hostile traceparent never costs an enqueue, and no span carries a payload or a result."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from sluice.backends.otel.spans import ATTRIBUTES, SPAN_NAMES, OtelEnqueueSpans, TraceObserver
from sluice.core import seal, traces
from sluice.core.bus import EventBus
from sluice.core.models import JobSpec
from sluice_dev.fakes import kit
from sluice_dev.local.traces import RecordingProvider
from tests.unit.test_gateway_fakes import Rig
from tests.unit.test_relay import World, run_steps

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER = f"00-{TRACE}-00f067aa0ba902b7-01"
JOBS = "/v1/queues/emails/jobs"
SECRET = "s3cr3t-payload-marker"


def recorded() -> tuple[list[dict[str, Any]], RecordingProvider]:
    spans: list[dict[str, Any]] = []
    return spans, RecordingProvider(spans.append, "test")


def traced_rig() -> tuple[Rig, list[dict[str, Any]]]:
    spans, provider = recorded()
    rig = Rig()
    rig.api.spans = OtelEnqueueSpans(provider)
    return rig, spans


# -- the header ------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", [
    CALLER, f"  {CALLER} ", f"01-{TRACE}-00f067aa0ba902b7-01-extra", f"cc-{TRACE}-00f067aa0ba902b7-00"])
def test_a_w3c_traceparent_is_read_and_carried_as_version_00(value: str) -> None:
    found = traces.parse(value)
    assert found is not None and found.trace_id == TRACE and found.span_id == "00f067aa0ba902b7"
    assert traces.carried(value) == f"00-{TRACE}-00f067aa0ba902b7-{found.flags}"


@pytest.mark.parametrize("value", [
    None, 7, "", "garbage", CALLER.upper(), CALLER + "-00", f"ff-{TRACE}-00f067aa0ba902b7-01",
    f"00-{'0' * 32}-00f067aa0ba902b7-01", f"00-{TRACE}-{'0' * 16}-01", f"00-{TRACE[:-1]}-00f067aa0ba902b7-01",
    f"01-{TRACE}-00f067aa0ba902b7-01" + "-x" * 300, CALLER.replace("-", "_"), "\u00e9" * 55])
def test_a_malformed_or_oversized_traceparent_is_ignored(value: object) -> None:
    assert traces.parse(value) is None and traces.carried(value) is None


def test_a_header_is_read_whatever_its_names_case_and_a_repeated_one_is_ignored() -> None:
    rig = Rig()
    assert rig.call("POST", JOBS, {"payload": 1}, headers={"TraceParent": CALLER})[0] == 202
    assert rig.log.records[0].traceparent == CALLER
    assert traces.carried([CALLER, f"00-{TRACE}-1111111111111111-01"]) is None  # a repeated header


# -- the sealed record -----------------------------------------------------------------------------

def test_the_seal_covers_the_traceparent_and_untraced_records_sign_the_bytes_of_before() -> None:
    key = b"k" * 32
    plain = JobSpec(job_id="j", queue="q", payload=1, enqueued_at_ms=5)
    assert seal.spec_message(plain) == seal.message("j", "q", "1", 0, 5, 30_000, 0, 5, None)
    traced = seal.seal_spec(plain.model_copy(update={"traceparent": CALLER}), key)
    assert seal.verify_spec(traced, [key])
    grafted = traced.model_copy(update={"traceparent": f"00-{'1' * 32}-00f067aa0ba902b7-01"})
    assert not seal.verify_spec(grafted, [key])  # a Kafka writer cannot move a job to another trace
    assert not seal.verify_spec(traced.model_copy(update={"traceparent": None}), [key])


def test_a_record_may_only_carry_a_version_00_traceparent() -> None:
    with pytest.raises(ValueError, match="traceparent"):
        JobSpec(job_id="j", queue="q", traceparent=CALLER.upper())


# -- the gateway's enqueue span --------------------------------------------------------------------

def test_the_enqueue_span_is_the_callers_child_and_the_record_carries_its_context() -> None:
    rig, spans = traced_rig()
    code, _, body = rig.call("POST", JOBS, {"payload": {"x": SECRET}}, headers={"traceparent": CALLER})
    assert code == 202
    [span] = spans
    assert (span["name"], span["trace_id"], span["parent_span_id"]) == (
        "sluice.enqueue", TRACE, "00f067aa0ba902b7")
    assert span["attributes"]["sluice.job"] == body["job_id"] and span["status"] == "UNSET"
    [record] = rig.log.records
    assert record.traceparent == f"00-{TRACE}-{span['span_id']}-01"
    assert SECRET not in json.dumps(spans)


@pytest.mark.parametrize("bad", ["junk", CALLER.upper(), "00-" + "a" * 5000, [CALLER, CALLER]])
def test_a_bad_traceparent_costs_no_enqueue_the_job_starts_a_fresh_trace(bad: Any) -> None:
    rig, spans = traced_rig()
    event_headers: dict[str, str] = {"traceparent": bad} if isinstance(bad, str) else {}
    if isinstance(bad, list):  # a repeated header
        from tests.unit.test_gateway_fakes import LambdaContext, event_for, unpack

        event = event_for("POST", JOBS, {"payload": 1})
        event["headers"]["traceparent"] = bad[0]
        event["multiValueHeaders"]["traceparent"] = bad
        code, _, _ = unpack(rig.gateway(event, LambdaContext()))
    else:
        code, _, _ = rig.call("POST", JOBS, {"payload": 1}, headers=event_headers)
    assert code == 202
    [span] = spans
    assert span["parent_span_id"] is None and span["trace_id"] != TRACE  # a new trace, rooted here
    assert rig.log.records[0].traceparent == f"00-{span['trace_id']}-{span['span_id']}-01"


def test_with_traces_off_the_callers_traceparent_goes_on_with_the_job_and_a_bad_one_is_dropped() -> None:
    rig = Rig()  # NO_SPANS: no OpenTelemetry involved
    assert rig.call("POST", JOBS, {"payload": 1}, headers={"traceparent": CALLER})[0] == 202
    assert rig.call("POST", JOBS, {"payload": 2}, headers={"traceparent": "junk"})[0] == 202
    assert [r.traceparent for r in rig.log.records] == [CALLER, None]


def test_a_refused_enqueue_ends_its_span_with_the_errors_code_not_its_message() -> None:
    rig, spans = traced_rig()
    code, _, _ = rig.call("POST", JOBS, {"payload": {"x": SECRET * 13_000}}, headers={"traceparent": CALLER})
    assert code == 413
    [span] = spans
    assert (span["status"], span["status_description"]) == ("ERROR", "PAYLOAD_TOO_LARGE")
    assert SECRET not in json.dumps(spans) and rig.log.records == []


def test_a_batch_shares_one_enqueue_span() -> None:
    rig, spans = traced_rig()
    code, _, _ = rig.call("POST", JOBS + "/batch", {"jobs": [{"payload": 1}, {"payload": 2}]},
                          headers={"traceparent": CALLER})
    assert code == 202
    [span] = spans
    assert span["name"] == "sluice.enqueue_batch" and span["attributes"]["sluice.jobs"] == 2
    assert {r.traceparent for r in rig.log.records} == {f"00-{TRACE}-{span['span_id']}-01"}


# -- the relay and the worker, observed ------------------------------------------------------------

def test_the_relays_push_span_is_a_child_of_the_records_context() -> None:
    spans, provider = recorded()
    w, bus = World(partitions=1), EventBus()
    TraceObserver(provider).subscribe(bus)
    w.source.append_spec(0, JobSpec(job_id="t1", queue="q", payload=SECRET, enqueued_at_ms=1,
                                    traceparent=CALLER))
    w.add(1)  # an untraced job beside it: no span
    relay = w.relay(events=bus)
    run_steps(relay, 5)
    relay.stop()
    [push] = [s for s in spans if s["name"] == "sluice.push"]
    assert (push["trace_id"], push["parent_span_id"], push["attributes"]["sluice.job"]) == (
        TRACE, "00f067aa0ba902b7", "t1")
    assert push["start_ns"] <= push["end_ns"] and SECRET not in json.dumps(spans)


def test_the_workers_spans_hang_from_the_lease_and_the_handler_hands_its_context_on() -> None:
    spans, provider = recorded()
    k = kit()
    observer = TraceObserver(provider)
    observer.subscribe(k.app.events)
    seen: list[str | None] = []

    @k.app.handler("q")
    def handle(job: Any, ctx: Any) -> dict[str, str]:
        seen.append(ctx.traceparent)
        return {"secret": SECRET}

    k.queue.enqueue(JobSpec(job_id="t1", queue="q", payload={"p": SECRET}, traceparent=CALLER))
    k.queue.enqueue(JobSpec(job_id="u1", queue="q", payload={"p": 1}))  # untraced: no span
    worker = k.worker()
    worker.traces = observer
    worker.drain(["q"], batch=10)
    by = {s["name"]: s for s in spans}
    assert set(by) == {"sluice.lease", "sluice.grant", "sluice.handler", "sluice.fenced_write"}
    assert all(s["trace_id"] == TRACE and s["attributes"]["sluice.job"] == "t1" for s in spans)
    lease = by["sluice.lease"]
    assert lease["parent_span_id"] == "00f067aa0ba902b7" and lease["attributes"]["sluice.outcome"] == "acked"
    for child in ("sluice.grant", "sluice.handler", "sluice.fenced_write"):
        assert by[child]["parent_span_id"] == lease["span_id"], child
    assert by["sluice.fenced_write"]["attributes"]["sluice.outcome"] == "written"
    assert seen[0] == f"00-{TRACE}-{by['sluice.handler']['span_id']}-01"  # ctx.traceparent: the handler span
    assert seen[1] is None
    assert SECRET not in json.dumps(spans)
    assert {k for s in spans for k in s["attributes"]} <= ATTRIBUTES and set(by) <= SPAN_NAMES
    assert observer.handler_traceparent("t1") is None  # nothing left open


# -- the client: the caller's current span -------------------------------------------------------

def test_the_client_sends_the_current_spans_traceparent_and_nothing_without_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from opentelemetry import trace

    from tests.unit.test_client import ACCEPTED, FakeTransport, client, ok

    _spans, provider = recorded()
    t = FakeTransport(*[ok(ACCEPTED, 202)] * 4)
    c, _ = client(t)
    c.enqueue("emails", 1)  # no span is current
    with provider.get_tracer("app").start_as_current_span("request") as current:
        c.enqueue("emails", 2)
        c.enqueue("emails", 3, traceparent=CALLER)  # given: it wins
        monkeypatch.delitem(sys.modules, "opentelemetry.trace")  # a process that never imported the API
        c.enqueue("emails", 5)
    mine = f"00-{current.get_span_context().trace_id:032x}-{current.get_span_context().span_id:016x}-01"
    assert [h.get("traceparent") for _, _, h, _ in t.sent] == [None, mine, CALLER, None]
    assert trace.get_current_span() is trace.INVALID_SPAN


def test_an_untraced_record_and_childrens_request_are_the_json_of_before_traces() -> None:
    """A relay (an internal function) of before traces refuses a record (a request) with a field it
    does not know: an untraced one has none (docs/deploy.md, Upgrading)."""
    plain = JobSpec(job_id="j", queue="q", payload=1)
    assert "traceparent" not in json.loads(plain.model_dump_json())
    traced = plain.model_copy(update={"traceparent": CALLER})
    assert json.loads(traced.model_dump_json())["traceparent"] == CALLER
    assert JobSpec.model_validate_json(traced.model_dump_json()) == traced
    from sluice.core.families import FamilyRequest

    request = FamilyRequest(parent_id="01M969M1N5Q3NS1QAM2TBVQP5H.q.819KQJS996DTKGN37", token=1)
    assert "traceparent" not in request.model_dump(mode="json")  # what a worker sends the internal function


@pytest.mark.parametrize("given", ["junk" * 200, CALLER])
def test_a_childrens_request_takes_any_traceparent_a_valid_one_parents_the_span(given: str) -> None:
    """The full path (the children's records carry the span) is on the local stack
    (tests/stack/test_traces_stack.py); the fake store keeps no families, so this one ends refused."""
    from sluice.core import ids
    from sluice.core.errors import SluiceError
    from sluice.core.families import ChildRequest, FamilyRequest
    from tests.unit.test_gateway_fakes import KEY

    rig, spans = traced_rig()
    request = FamilyRequest(parent_id=ids.mint(rig.now_ms, "emails", KEY), token=1, traceparent=given,
                            jobs=[ChildRequest(queue="kids", key="a", payload={"p": SECRET})])
    with pytest.raises(SluiceError):
        rig.api.enqueue_children(request)
    [span] = spans
    assert span["name"] == "sluice.enqueue_children" and span["status"] == "ERROR"
    assert span["parent_span_id"] == (None if given != CALLER else "00f067aa0ba902b7")
    assert SECRET not in json.dumps(spans)


def test_ctx_http_sends_the_handler_spans_traceparent_and_its_call_is_a_span_without_its_path(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from sluice.worker.runtime import http as fenced_http
    from tests.unit.test_fencing import FakePool, FakeResponse

    pool = FakePool(FakeResponse(200, b"{}"), FakeResponse(200, b"{}"))
    monkeypatch.setattr(fenced_http, "pool", lambda: pool)
    spans, provider = recorded()
    k = kit()
    observer = TraceObserver(provider)
    observer.subscribe(k.app.events)

    @k.app.handler("q")
    def handle(job: Any, ctx: Any) -> int:
        ctx.http.request("POST", f"https://svc.example/charge/{SECRET}?card={SECRET}", json={"s": SECRET})
        ctx.http.request("GET", "https://svc.example/x", headers={"traceparent": CALLER})  # the handler's own
        return 1

    k.queue.enqueue(JobSpec(job_id="t1", queue="q", payload=1, traceparent=CALLER))
    worker = k.worker()
    worker.traces = observer
    worker.drain(["q"], batch=1)
    handler = next(s for s in spans if s["name"] == "sluice.handler")
    assert [kw["headers"]["traceparent"] for _, _, kw in pool.sent] == [
        f"00-{TRACE}-{handler['span_id']}-01", CALLER]
    calls = [s for s in spans if s["name"] == "sluice.fenced_call"]
    assert [(c["parent_span_id"], c["attributes"]["sluice.method"], c["attributes"]["sluice.host"],
             c["attributes"]["sluice.status"]) for c in calls] == [
        (handler["span_id"], "POST", "svc.example", 200), (handler["span_id"], "GET", "svc.example", 200)]
    assert SECRET not in json.dumps(spans)
