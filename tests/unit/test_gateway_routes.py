"""The gateway and routes (issue 15): an unrouted queue refused once routes are known, a typed
queue's payload checked against its JSON Schema, and both shown by GET and the OpenAPI document.

Each refusal writes nothing to Kafka (``rig.log.records``) and nothing to the idempotency store.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sluice.core.bus import EventBus
from sluice.core.errors import BackendUnavailable
from sluice.core.routes import Route, RouteCache
from sluice.entry.gateway import Gateway
from sluice.gateway.api import Api, Backends, IdMinting, Intake
from tests.unit.test_gateway_fakes import KEY, Rig

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"url": {"type": "string", "minLength": 1},
                   "size": {"$ref": "#/$defs/Size"}},
    "required": ["url", "size"],
    "$defs": {"Size": {"type": "object", "properties": {"width": {"type": "integer", "minimum": 1}},
                       "required": ["width"]}},
}


class Source:
    def __init__(self, routes: list[Route]) -> None:
        self.routes, self.fail = routes, False

    def list_routes(self) -> list[Route]:
        if self.fail:
            raise BackendUnavailable("routes table unreachable")
        return list(self.routes)


def routed_rig(routes: list[Route], *, refuse: bool = True) -> tuple[Rig, Source]:
    rig = Rig()
    source = Source(routes)
    cache = RouteCache(source, ttl_s=0)
    rig.api = Api(Backends(rig.log, rig.store, rig.queue, events=EventBus()), IdMinting(KEY),  # type: ignore[arg-type]
                  intake=Intake(routes=cache, refuse_unrouted=refuse), idempotency=rig.idem,
                  clock=lambda: rig.now_ms)
    rig.gateway = Gateway(rig.api, routes=cache)
    return rig, source


TEAM = [Route("thumbnails", "sluice-worker-media", "media", {"thumbnails": SCHEMA}),
        Route("clips-*", "sluice-worker-media", "media"), Route("echo", "sluice-worker", "sluice")]
GOOD = {"url": "https://x/y.png", "size": {"width": 3}}


def test_no_routes_known_means_every_queue_is_accepted_as_before() -> None:
    rig, _ = routed_rig([])
    code, _, _ = rig.call("POST", "/v1/queues/anything/jobs", {"payload": 1})
    assert code == 202 and len(rig.log.records) == 1


def test_an_unrouted_queues_job_is_refused_404_no_route_and_nothing_written() -> None:
    rig, _ = routed_rig(TEAM)
    for path, body in (("/v1/queues/orphan/jobs", {"payload": 1}),
                       ("/v1/queues/orphan/jobs/batch", {"jobs": [{"payload": 1}]})):
        code, headers, doc = rig.call("POST", path, body, headers={"Idempotency-Key": f"k-{path}"})
        assert code == 404 and headers["content-type"] == "application/problem+json", doc
        assert doc["code"] == "NO_ROUTE" and "orphan" in doc["detail"]
    assert rig.log.records == [] and rig.idem.records == {}
    # A prefix route and an exact route both count.
    assert rig.call("POST", "/v1/queues/clips-long/jobs", {"payload": 1})[0] == 202
    assert rig.call("POST", "/v1/queues/echo/jobs", {"payload": 1})[0] == 202


def test_with_unrouted_default_the_job_goes_to_the_default_worker() -> None:
    rig, _ = routed_rig(TEAM, refuse=False)
    assert rig.call("POST", "/v1/queues/orphan/jobs", {"payload": 1})[0] == 202


def test_a_registry_outage_does_not_stop_enqueues() -> None:
    rig, source = routed_rig(TEAM)
    source.fail = True
    assert rig.call("POST", "/v1/queues/orphan/jobs", {"payload": 1})[0] == 202  # nothing read yet: accept


def test_a_typed_payload_that_does_not_validate_is_400_naming_each_field_path() -> None:
    rig, _ = routed_rig(TEAM)
    code, _, doc = rig.call("POST", "/v1/queues/thumbnails/jobs",
                            {"payload": {"url": "", "size": {"width": 0}, "extra": 1}},
                            headers={"Idempotency-Key": "bad-1"})
    assert code == 400 and doc["code"] == "PAYLOAD_INVALID", doc
    pointers = {e["pointer"] for e in doc["errors"]}
    assert pointers == {"/payload/url", "/payload/size/width"}, doc["errors"]
    assert rig.log.records == [] and rig.idem.records == {}
    code, _, doc = rig.call("POST", "/v1/queues/thumbnails/jobs", {"payload": "not an object"})
    assert code == 400 and [e["pointer"] for e in doc["errors"]] == ["/payload"]


def test_a_batch_names_each_failing_jobs_index_and_writes_nothing() -> None:
    rig, _ = routed_rig(TEAM)
    body = {"jobs": [{"payload": GOOD}, {"payload": {"url": "u"}}, {"payload": {**GOOD, "url": 5}}]}
    code, _, doc = rig.call("POST", "/v1/queues/thumbnails/jobs/batch", body)
    assert code == 400 and doc["code"] == "PAYLOAD_INVALID"
    assert [(e["index"], e["pointer"]) for e in doc["errors"]] == [(1, "/jobs/1/payload"),
                                                                   (2, "/jobs/2/payload/url")]
    assert rig.log.records == []


def test_a_valid_typed_payload_is_accepted_and_422_still_answers_a_reused_key() -> None:
    rig, _ = routed_rig(TEAM)
    key = {"Idempotency-Key": "same"}
    assert rig.call("POST", "/v1/queues/thumbnails/jobs", {"payload": GOOD}, headers=key)[0] == 202
    code, _, doc = rig.call("POST", "/v1/queues/thumbnails/jobs",
                            {"payload": {**GOOD, "url": "https://other"}}, headers=key)
    assert code == 422 and doc["code"] == "IDEMPOTENCY_CONFLICT"
    assert len(rig.log.records) == 1


def test_get_queue_shows_the_route_and_the_schema() -> None:
    rig, _ = routed_rig(TEAM)
    code, _, view = rig.call("GET", "/v1/queues/thumbnails")
    assert code == 200
    assert view["route"] == {"pattern": "thumbnails", "function": "sluice-worker-media", "owner": "media",
                             "payload_schema": SCHEMA}
    assert rig.call("GET", "/v1/queues/clips-x")[2]["route"]["payload_schema"] is None
    # Nobody runs an unrouted queue: 404 as at enqueue, not "null: the default worker"
    code, headers, doc = rig.call("GET", "/v1/queues/orphan")
    assert code == 404 and headers["content-type"] == "application/problem+json", doc
    assert doc["code"] == "NO_ROUTE" and "orphan" in doc["detail"]
    rig, _ = routed_rig(TEAM, refuse=False)  # unrouted queues go to the default worker: null says so
    code, _, view = rig.call("GET", "/v1/queues/orphan")
    assert code == 200 and view["route"] is None


def test_the_openapi_document_carries_each_typed_queues_schema_with_its_refs_rebased() -> None:
    rig, source = routed_rig(TEAM)
    code, _, doc = rig.call("GET", "/v1/openapi.json")
    assert code == 200
    assert doc["x-sluice-typed-queues"] == {"thumbnails": {"$ref": "#/components/schemas/Payload_thumbnails"}}
    payload = doc["components"]["schemas"]["Payload_thumbnails"]
    assert payload["properties"]["size"] == {"$ref": "#/components/schemas/Payload_thumbnails/$defs/Size"}
    assert "404" in doc["paths"]["/v1/queues/{queue}/jobs"]["post"]["responses"]
    assert "404" in doc["paths"]["/v1/queues/{queue}"]["get"]["responses"]
    source.routes = []  # the route is gone: so is the schema, on the next read
    _, _, doc = rig.call("GET", "/v1/openapi.json")
    assert "x-sluice-typed-queues" not in doc and "Payload_thumbnails" not in json.dumps(doc)


@pytest.mark.parametrize("payload", [GOOD, {**GOOD, "size": {"width": 10, "height": 2}}])
def test_valid_payloads_reach_kafka_unchanged(payload: dict[str, Any]) -> None:
    rig, _ = routed_rig(TEAM)
    assert rig.call("POST", "/v1/queues/thumbnails/jobs", {"payload": payload})[0] == 202
    assert rig.log.records[0].payload == payload


LIMITED: dict[str, Any] = {"type": "object", "additionalProperties": False, "required": ["text"],
                           "properties": {"text": {"type": "string", "maxLength": 10},
                                          "i": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}}


@pytest.mark.parametrize(("payload", "pointer", "reason"), [
    ({"text": "a" * 5000}, "/payload/text", "is too long"),
    ({"text": "a", "i": "x" * 5000}, "/payload/i", "is not valid under any of the given schemas"),
    ({"text": "a", "y" * 5000: 1}, "/payload", "was unexpected"),
])
def test_a_long_bad_value_is_shortened_in_the_message_and_the_reason_kept(payload: Any, pointer: str,
                                                                          reason: str) -> None:
    """A message echoed the whole value and was then cut at 300 characters, which cut off the
    reason ("'aaaa...a..." for a text over its maxLength): the value is shortened instead."""
    rig, _ = routed_rig([Route("texts", "sluice-worker-words", "words", {"texts": LIMITED})])
    code, _, doc = rig.call("POST", "/v1/queues/texts/jobs", {"payload": payload})
    assert (code, doc["code"]) == (400, "PAYLOAD_INVALID"), doc
    [error] = doc["errors"]
    assert error["pointer"] == pointer and reason in error["detail"], error
    assert len(error["detail"]) <= 300 and reason in doc["detail"] and len(doc["detail"]) < 600
    assert rig.log.records == []
